"""Registry benchmark: jaxport's operations beside MLflow's Model Registry on registries of
several sizes, the two measured like with like: interleaved, at equal durability, over several
runs.

    python benchmarks/bench_registry.py [--versions 1000,10000] [--with-100k] [--repeat 30]
        [--runs 5] [--url postgresql+psycopg://host/db]   # default: SQLite, temporary files
        [--synchronous NORMAL,FULL]   # SQLite: the levels to run, each on both sides

MLflow (``pip install ".[bench-mlflow]"``) runs in this process: ``bench_mlflow_peer.py`` has
its side. Both registries are filled to each size the same way: 10 versions per name (``m0``
...), alias ``prod`` on each name's version 10, platforms mixed; rows bulk-inserted (all of
jaxport's variants pointing at one real archive, its blob store given the 256 prefix
directories a registry of that size has; MLflow's rows into its own tables). Then the
same operations are timed on each, ``--repeat`` times: pushes to a name ``target``, alias
moves, get, resolve (the newest version, and by alias; of ``target`` and of a random name), a
page of ``list`` and of ``search`` with and without matches, and jaxport's ``pull`` (MLflow
has no peer: its registry stores a source URI). ``PEERS`` names MLflow's call for each
operation. MLflow's push records a source string; jaxport's serializes the artifact and writes
its blob with fsync. So a second push row gives MLflow's side the artifact too (``DURABLE``:
jax's own ``serialize()`` written as durably as jaxport's blob, then ``create_model_version``),
and two rows time the artifact's share of jaxport's push alone (``ARCHIVE``, ``BLOB_WRITE``):
the line under each table is the push less those, over MLflow's push. Every operation runs
through the public API (``Registry``, ``MlflowClient``: no tracking server), with the
statements it sends (``BEGIN`` left out).

Like with like:

- Interleaved: each sample is taken on jaxport and on MLflow back to back, who goes first
  alternating round by round, on each size in turn; a slow moment falls on both alike.
- Equal durability: on SQLite both engines get WAL, a 30 s busy timeout and the same
  ``PRAGMA synchronous`` (jaxport's own is ``NORMAL``; each level of ``--synchronous`` is a
  separate table; the run checks both connections report the level). On PostgreSQL both use
  the server's defaults, jaxport in a schema of its own per size, MLflow in a database of its
  own per size (``bench_mlflow_<random>``), dropped afterwards.
- A spread: ``--runs`` runs, each on fresh registries; each run's ratio jaxport p50 / MLflow
  p50, reported min - median - max, beside the median of the runs' p50s. The fsync latency
  of the disk (and, on PostgreSQL, of a one-row commit) and the load average are printed at
  the start and at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
import sqlalchemy as sa
from sqlalchemy import event, insert

import jaxport
from jaxport.registry import _db
from jaxport.registry._models import (
    AliasMoveRow,
    AliasRow,
    NameRow,
    VariantPlatformRow,
    VariantRow,
    VersionRow,
)

_PLATFORMS = [("cpu",), ("cuda",), ("tpu",), ("cpu", "cuda", "tpu")]
#: The push row where MLflow's side also stores the artifact, as durably as jaxport's blob.
DURABLE = "push, artifact stored durably by both"
#: jaxport only: the parts of a push that are the artifact's, not the registry's.
ARCHIVE, BLOB_WRITE = "part of a push: jaxport.dumps + inspect", "part of a push: blob write"
_FIRST_ID = 1000

#: MLflow's call (``MlflowClient``) for each of jaxport's operations.
PEERS = {
    "push": "create_model_version (source string, one tag)",
    "push + move alias": "create_model_version + set_registered_model_alias",
    DURABLE: "Exported.serialize(), the bytes written durably (temporary file, fsync, rename, "
    "directory fsync), create_model_version with that file as source",
    "alias move": "set_registered_model_alias",
    "get (NAME:VERSION)": "get_model_version",
    "resolve latest (name with many versions)": "search_model_versions(name, order_by "
    "version_number DESC, max_results=1)",
    "resolve latest (random name)": "search_model_versions(name, order_by version_number "
    "DESC, max_results=1)",
    "resolve by alias (name with many versions)": "get_model_version_by_alias",
    "resolve by alias (random name)": "get_model_version_by_alias",
    "list: a page of 50 of one name": "search_model_versions(name, max_results=50)",
    "list: a page of 50 of every name": "search_model_versions(max_results=50)",
    "search: a page of 50 (platform)": "search_model_versions(tag = value, max_results=50)",
    "search: nothing matches (platform)": "search_model_versions(tag = value, max_results=50)",
    "search: nothing matches (fun_name)": "search_model_versions(name = 'none', max_results=50)",
    "search: nothing matches (jax_version)": "search_model_versions(tag = value, max_results=50)",
}


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (seconds), in ms."""
    return statistics.median(samples) * 1e3, statistics.quantiles(samples, n=100)[98] * 1e3


def prefill(reg: jaxport.Registry, n_versions: int) -> None:
    """Bulk-inserts ``n_versions`` versions (10 per name, the newest aliased ``prod``), one
    variant each, all pointing at one real blob."""
    template = reg.push(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), "template").variants[0]
    now = time.time()
    n_names = n_versions // 10
    with _db.write_transaction(reg._backend.engine) as conn:
        conn.execute(
            insert(NameRow),
            [
                {"id": _FIRST_ID + i, "name": f"m{i}", "last_version": 10, "created_at": now}
                for i in range(n_names)
            ],
        )
        conn.execute(
            insert(AliasRow),
            [
                {"model_id": _FIRST_ID + i, "alias": "prod", "version": 10, "updated_at": now}
                for i in range(n_names)
            ],
        )
        conn.execute(
            insert(AliasMoveRow),
            [
                {"model_id": _FIRST_ID + i, "alias": "prod", "from_version": None,
                 "to_version": 10, "moved_at": now}
                for i in range(n_names)
            ],
        )  # fmt: skip
        conn.execute(
            insert(VersionRow),
            [
                {
                    "id": _FIRST_ID + i,
                    "model_id": _FIRST_ID + i // 10,
                    "version": i % 10 + 1,
                    "created_at": now,
                    "metadata_json": "{}",
                    "content_key": uuid.uuid4().hex,
                }
                for i in range(n_versions)
            ],
        )
        rows, platforms = [], []
        for i in range(n_versions):
            plats = _PLATFORMS[i % len(_PLATFORMS)]
            rows.append(
                {
                    "id": _FIRST_ID + i,
                    "version_id": _FIRST_ID + i,
                    "model_id": _FIRST_ID + i // 10,
                    "digest": template.digest,
                    "fun_name": "f",
                    "platforms": ",".join(plats),
                    "nr_devices": 8 if i % 3 == 0 else 1,
                    "sharded": i % 3 == 0,
                    "calling_convention_version": template.calling_convention_version,
                    "format_version": 1,
                    "jax_version": template.jax_version,
                    "jaxlib_version": template.jaxlib_version,
                    "vjp_order": 0,
                    "shape_polymorphic": False,
                    "custom_call_targets": "[]",
                    "size_bytes": template.size_bytes,
                    "in_signature": template.in_signature,
                    "out_signature": template.out_signature,
                    "created_at": now,
                    "metadata_json": "{}",
                }
            )
            platforms += [{"variant_id": _FIRST_ID + i, "platform": p} for p in plats]
        conn.execute(insert(VariantRow), rows)
        conn.execute(insert(VariantPlatformRow), platforms)
        if conn.dialect.name == "postgresql":  # explicit ids: move the sequences past them
            for table in ("models", "versions", "variants", "alias_history"):
                conn.execute(
                    sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                            f"(SELECT max(id) FROM {table}))")
                )  # fmt: skip
            conn.execute(sa.text("ANALYZE"))


class Statements:
    """Counts the statements an engine sends (SQLite's ``BEGIN`` left out)."""

    def __init__(self, engine: sa.Engine):
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._on_statement)

    def _on_statement(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if not statement.startswith("BEGIN"):
            self.count += 1


@contextlib.contextmanager
def _databases(url: str | None, tmp: Path, n_versions: int) -> Iterator[tuple[str, str]]:
    """Fresh databases for one size, jaxport's and MLflow's: SQLite files in ``tmp``, or on
    ``url``'s server a schema of jaxport's own and a database of MLflow's own."""
    if url is None:
        yield (
            f"sqlite:///{tmp / f'jaxport-{n_versions}.db'}",
            f"sqlite:///{tmp / f'mlflow-{n_versions}.db'}",
        )
        return
    tag = uuid.uuid4().hex[:12]
    schema, database = f"bench_{tag}", f"bench_mlflow_{tag}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        conn.execute(sa.text(f"CREATE DATABASE {database}"))
    sep = "&" if "?" in url else "?"
    mlflow_url = sa.make_url(url).set(database=database).render_as_string(hide_password=False)
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}", mlflow_url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        admin.dispose()


Results = dict[str, tuple[float, float, int]]  # operation: (p50 ms, p99 ms, statements)


class Sized:
    """The measurements on one registry of ``n_versions`` versions."""

    def __init__(self, reg: jaxport.Registry, n_versions: int, repeat: int):
        self.reg, self.statements = reg, Statements(reg._backend.engine)
        self.samples: dict[str, list[float]] = {}
        self.counts: dict[str, int] = {}
        n_names = n_versions // 10

        def name(i: int) -> str:
            return f"m{(i * 7919) % n_names}"

        self.reads: dict[str, Callable[[int], Any]] = {
            "alias move": lambda i: reg.alias("target", "prod", 1 + i % repeat),
            "get (NAME:VERSION)": lambda i: reg.get(f"{name(i)}:{1 + i % 10}"),
            "resolve latest (name with many versions)": lambda i: reg.resolve(
                "target", platform="cpu"
            ),
            "resolve latest (random name)": lambda i: reg.resolve(
                name(i), platform="tpu", nr_devices=8
            ),
            "resolve by alias (name with many versions)": lambda i: reg.resolve(
                "target@prod", platform="cpu"
            ),
            "resolve by alias (random name)": lambda i: reg.resolve(
                f"{name(i)}@prod", platform=None
            ),
            "list: a page of 50 of one name": lambda i: reg.list(
                "target", limit=50, after=("target", 1 + i % (repeat // 2))
            ),
            "list: a page of 50 of every name": lambda i: reg.list(limit=50, after=(name(i), 5)),
            "search: a page of 50 (platform)": lambda i: reg.search(
                platform="tpu", limit=50, after=_FIRST_ID + (i * 7919) % n_versions
            ),
            "search: nothing matches (platform)": lambda i: reg.search(platform="rocm", limit=50),
            "search: nothing matches (fun_name)": lambda i: reg.search(fun_name="none", limit=50),
            "search: nothing matches (jax_version)": lambda i: reg.search(
                jax_version="0.1", limit=50
            ),
            "pull": lambda i: reg.pull("target@prod", platform="cpu"),
        }

    def measure(self, op: str, fn: Callable[[], Any]) -> float:
        """Runs ``fn`` once as a sample of ``op``; returns its seconds."""
        before = self.statements.count
        t = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t
        self.samples.setdefault(op, []).append(elapsed)
        self.counts[op] = self.statements.count - before
        return elapsed

    def results(self) -> Results:
        """``{operation: (p50 ms, p99 ms, statements)}``."""
        return {op: (*percentiles_ms(s), self.counts[op]) for op, s in self.samples.items()}


def sqlite_synchronous(engine: sa.Engine, level: str) -> None:
    """``PRAGMA synchronous=<level>`` on every new connection of jaxport's ``engine``, after
    jaxport's own settings (its ``connect`` listener runs first); the pool is emptied."""

    def on_connect(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA synchronous={level}")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()


def prefixes(root: Path) -> None:
    """The blob store's 256 prefix directories (``sha256/00`` ... ``ff``), as a registry of
    1,000 versions or more has them: the rows ``prefill`` inserts share one archive, so without
    them most of the timed pushes would make a directory (and fsync it into its parent) that
    such a registry made long ago, while MLflow's side writes into a directory it has."""
    for i in range(256):
        (root / "sha256" / f"{i:02x}").mkdir(parents=True, exist_ok=True)


def bench_pair(
    urls: dict[int, tuple[str, str]], blobs: Path, repeat: int, synchronous: str | None
) -> tuple[dict[int, Results], dict[int, Any]]:
    """One run: jaxport's and MLflow's ``results`` at each size. Every registry is filled
    first; then each sample of an operation is taken on each size, jaxport's and MLflow's in
    turn (A, B, B, A, ...: who goes first alternates round by round), so that the machine's
    other work weighs on both alike. ``synchronous`` (SQLite): both engines' ``PRAGMA
    synchronous`` (MLflow's also gets jaxport's WAL journal and busy timeout)."""
    import bench_mlflow_peer as peer  # MLflow's side; it imports mlflow

    with contextlib.ExitStack() as stack:
        ours: dict[int, Sized] = {}
        theirs: dict[int, Any] = {}
        for n, (url, mlflow_url) in urls.items():
            reg = stack.enter_context(jaxport.Registry(url, blobs=blobs / f"blobs-{n}"))
            if synchronous is not None and reg._backend.engine.dialect.name == "sqlite":
                sqlite_synchronous(reg._backend.engine, synchronous)
            t = time.perf_counter()
            prefill(reg, n)
            prefixes(blobs / f"blobs-{n}")
            print(f"jaxport: prefilled {n:,} versions in {time.perf_counter() - t:.1f} s")
            ours[n] = Sized(reg, n, repeat)
            theirs[n] = peer.Sized(mlflow_url, n, repeat, synchronous)
            if synchronous is not None and reg._backend.engine.dialect.name == "sqlite":
                levels = {peer.synchronous_of(e) for e in (reg._backend.engine, theirs[n].engine)}
                assert len(levels) == 1, f"synchronous differs: {levels}"
        exports = [
            jax.export.export(jax.jit(lambda x, s=float(i): x * s))(jnp.zeros(4))
            for i in range(repeat)
        ]

        def pair(
            i: int, n: int, op: str, mine: Callable[[], Any], peers: Callable[[], Any]
        ) -> None:
            first, second = (mine, peers) if i % 2 == 0 else (peers, mine)
            for fn in (first, second):
                if fn is mine:
                    ours[n].measure(op, fn)
                else:
                    theirs[n].measure(op, fn)

        for i, exp in enumerate(exports):
            for n in urls:
                if i % 2:
                    push = functools.partial(ours[n].reg.push, exp, "target", aliases=["prod"])
                    pair(i // 2, n, "push + move alias", push,
                         functools.partial(theirs[n].push_and_move, i))  # fmt: skip
                else:
                    push = functools.partial(ours[n].reg.push, exp, "target")
                    pair(i // 2, n, "push", push, functools.partial(theirs[n].push, i))
        artifacts = {n: blobs / f"mlflow-artifacts-{n}" for n in urls}
        for directory in artifacts.values():
            directory.mkdir()
        stored = [
            jax.export.export(jax.jit(lambda x, s=float(i): x - s))(jnp.zeros(4))
            for i in range(repeat)
        ]
        for i, exp in enumerate(stored):
            for n in urls:
                push = functools.partial(ours[n].reg.push, exp, "target")
                durable = functools.partial(theirs[n].push_durable, i, exp, artifacts[n])
                pair(i, n, DURABLE, push, durable)
        for i, exp in enumerate(stored):  # the artifact's share of a push, measured alone
            for n in urls:
                archive = jaxport.dumps(exp)
                ours[n].measure(ARCHIVE, functools.partial(_archive_info, exp))
                path = blobs / f"blob-write-{n}-{i}"
                ours[n].measure(BLOB_WRITE, functools.partial(_blob_write, path, archive))
        for run in ours.values():  # untimed: the module sandbox's worker starts once
            run.reg.pull("target@prod", platform="cpu")
        for op in next(iter(ours.values())).reads:
            for i in range(repeat):
                for n in urls:
                    mine = functools.partial(ours[n].reads[op], i)
                    if op not in theirs[n].reads:
                        ours[n].measure(op, mine)
                        continue
                    pair(i, n, op, mine, functools.partial(theirs[n].reads[op], i))
        for run in theirs.values():
            run.engine.dispose()
        return {n: r.results() for n, r in ours.items()}, {
            n: r.results() for n, r in theirs.items()
        }


def _archive_info(exp: Any) -> Any:
    """What a push does to an ``Exported`` before the registry sees it: the archive, then its
    header read back (``registry/_push_items.py``)."""
    return jaxport.inspect(jaxport.dumps(exp))


def _blob_write(path: Path, data: bytes) -> None:
    """A blob's write as the local blob store makes it (``LocalBlobStore.put``): a temporary
    file, fsync, rename, the directory's fsync."""
    from jaxport._io import atomic_write

    atomic_write(path, [data], sync_dir=True)


def disk_syncs_ms(directory: Path, url: str | None, n: int = 30) -> str:
    """What a durable write costs here now, in words: p50 of an fsync of a small file in
    ``directory`` and, with ``url``, of a PostgreSQL commit of one row (a WAL flush). A push
    waits for both (blob file, its directory, the version's commit); the machine's other work
    moves them from 0.1 ms to several ms."""
    path = directory / "fsync-probe"
    samples = []
    with open(path, "wb") as f:
        for _ in range(n):
            f.write(b"x" * 4096)
            f.flush()
            t = time.perf_counter()
            os.fsync(f.fileno())
            samples.append(time.perf_counter() - t)
    path.unlink()
    words = f"fsync p50 {statistics.median(samples) * 1e3:.2f} ms"
    if url is None:
        return words
    engine = sa.create_engine(url)
    table = f"bench_sync_{uuid.uuid4().hex[:12]}"  # not TEMPORARY: its rows go to the WAL
    samples = []
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (x int)"))
        conn.commit()
        try:
            for _ in range(n):
                t = time.perf_counter()
                conn.execute(sa.text(f"INSERT INTO {table} VALUES (1)"))
                conn.commit()
                samples.append(time.perf_counter() - t)
        finally:
            conn.rollback()
            conn.execute(sa.text(f"DROP TABLE {table}"))
            conn.commit()
    engine.dispose()
    return f"{words}, PostgreSQL commit p50 {statistics.median(samples) * 1e3:.2f} ms"


def _server(url: str | None) -> str:
    """The database the run used, in words."""
    if url is None:
        import sqlite3

        return f"SQLite {sqlite3.sqlite_version}"
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        version = conn.execute(sa.text("SHOW server_version")).scalar_one()
    engine.dispose()
    return f"PostgreSQL {version}"


def _k(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


def report(sizes: list[int], runs: list[tuple[dict[int, Results], dict[int, Any]]]) -> None:
    """Prints one table for a setting: per size, jaxport's and MLflow's p50 (the median of the
    runs' p50s, ms) and jaxport / MLflow as min - median - max over the runs (each run's ratio
    of p50s, measured interleaved); statements per operation (MLflow's in brackets)."""
    heads = [f"{_k(n)}: jaxport / MLflow p50 ms | {_k(n)}: ratio min - median - max" for n in sizes]
    print(f"\n| operation | statements | {' | '.join(heads)} |")
    print("|---|---:|" + "---:|---:|" * len(sizes))
    for op in runs[0][0][sizes[0]]:
        cells = []
        for n in sizes:
            mine = statistics.median(r[0][n][op][0] for r in runs)
            if op not in runs[0][1][n]:
                cells.append(f"{mine:.2f} / - | -")
                continue
            peer = statistics.median(r[1][n][op][0] for r in runs)
            ratios = sorted(r[0][n][op][0] / r[1][n][op][0] for r in runs)
            spread = f"{ratios[0]:.2f} - {statistics.median(ratios):.2f} - {ratios[-1]:.2f}"
            cells.append(f"{mine:.2f} / {peer:.2f} | {spread}")
        theirs = runs[0][1][sizes[0]].get(op)
        stmts = f"{runs[0][0][sizes[0]][op][2]}" + ("" if theirs is None else f" [{theirs[2]}]")
        print(f"| {op} | {stmts} | {' | '.join(cells)} |")
    for n in sizes:  # the registry's own share: push less the artifact's parts
        rest = sorted(
            (r[0][n]["push"][0] - r[0][n][ARCHIVE][0] - r[0][n][BLOB_WRITE][0]) / r[1][n]["push"][0]
            for r in runs
        )
        print(
            f"{_k(n)}: push less its archive and blob write / MLflow's push, min - median - max: "
            f"{rest[0]:.2f} - {statistics.median(rest):.2f} - {rest[-1]:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default="1000,10000", help="sizes, comma-separated")
    parser.add_argument("--with-100k", action="store_true", help="add a size of 100,000")
    parser.add_argument("--repeat", type=int, default=30, help="samples per operation per run")
    parser.add_argument("--runs", type=int, default=3, help="runs, each on fresh registries")
    parser.add_argument("--url", default=None, help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument(
        "--synchronous", default="NORMAL,FULL", help="SQLite: PRAGMA synchronous levels, both sides"
    )
    args = parser.parse_args()
    if args.repeat < 4:  # pushes alternate with and without an alias: p99 needs 2 of each
        parser.error("--repeat must be at least 4")
    sizes = sorted(
        {int(n) for n in args.versions.split(",")} | ({100_000} if args.with_100k else set())
    )
    import mlflow

    print(
        f"{datetime.date.today()}; jaxport {jaxport.__version__}, jax {jax.__version__}, "
        f"MLflow {mlflow.__version__}, {_server(args.url)}; {os.cpu_count()} cores; "
        f"sizes {', '.join(map(_k, sizes))}; repeat {args.repeat}; runs {args.runs}"
    )
    levels = [None] if args.url else [x.strip().upper() for x in args.synchronous.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"start: {load_words()}; {disk_syncs_ms(Path(tmp), args.url)}")
        for level in levels:
            runs = []
            for _ in range(args.runs):
                with contextlib.ExitStack() as stack:
                    run_tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=tmp)))
                    urls = {n: stack.enter_context(_databases(args.url, run_tmp, n)) for n in sizes}
                    runs.append(bench_pair(urls, run_tmp, args.repeat, level))
            setting = (
                "PostgreSQL at the server's defaults, both"
                if level is None
                else f"SQLite WAL, synchronous={level}, both"
            )
            print(f"\n{setting}; {args.runs} runs; {load_words()}")
            report(sizes, runs)
        print(f"\nend: {load_words()}; {disk_syncs_ms(Path(tmp), args.url)}")
    print("MLflow's calls:")
    for op, call in PEERS.items():
        print(f"  {op}: {call}")


def load_words() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min)"


if __name__ == "__main__":
    main()
