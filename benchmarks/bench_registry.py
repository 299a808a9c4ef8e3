"""Registry benchmark: jaxport's operations at several registry sizes, the SQL statements each
sends, how each grows with the registry, and MLflow's Model Registry beside them, in one run.

    python benchmarks/bench_registry.py [--versions 1000,10000,100000] [--repeat 50]
        [--url postgresql+psycopg://host/db]   # default: SQLite in a temporary directory
        [--mlflow-python PATH]   # an interpreter with mlflow installed (default: this one)

Both registries are filled to each size the same way: 10 versions per name (``m0`` ...), alias
``prod`` on each name's version 10, platforms and device counts mixed; rows bulk-inserted (all
of jaxport's variants pointing at one real archive; MLflow's rows into its own tables, by
``bench_mlflow_peer.py`` in MLflow's interpreter, since MLflow is no dependency of jaxport's
and lives in an environment of its own: ``pip install ".[bench-mlflow]"`` there). Then the
same operations are timed on each, ``--repeat`` times: pushes to a name ``target`` (so it has
``--repeat`` versions), alias moves, get, resolve (the newest version, and by alias; of
``target`` and of a random name), a page of ``list`` and of ``search`` with and without
matches, and jaxport's ``pull`` (MLflow has no peer: its registry stores a source URI, not
the artifact). ``PEERS`` names MLflow's call for each operation. MLflow's push
(``create_model_version``) records a source string; jaxport's serializes the artifact and
writes its blob with fsync. Every operation runs in-process through the public API (jaxport's
``Registry``, MLflow's ``MlflowClient``), with the statements it sends (``before_cursor_execute``
on each engine; ``BEGIN`` left out, as ``tests/test_sql_counts.py`` counts). Every size is
filled first; then each sample of an operation is taken on each size in turn, so that the
machine's other work weighs on every size alike (jaxport's sizes in this process, then
MLflow's in its own).

With ``--url``, PostgreSQL: each size gets a schema of its own for jaxport and a database of
its own for MLflow, dropped afterwards. Prints one table: p50 and p99 in ms, statements, the
growth of the p50 from the smallest size to the largest (1.00x: flat), MLflow's p50 and
statements, and jaxport / MLflow at each size; then where a push's time goes (``Waits``), the
targets of issue #18 met or missed, the load average and what an fsync and a PostgreSQL commit
cost at the start and at the end. The machine is noisy: a ratio measured in one run holds, a
time alone does not.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import statistics
import subprocess
import sys
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
_FIRST_ID = 1000
_PEER = Path(__file__).with_name("bench_mlflow_peer.py")

#: MLflow's call (``MlflowClient``) for each of jaxport's operations.
PEERS = {
    "push": "create_model_version (source string, one tag)",
    "push + move alias": "create_model_version + set_registered_model_alias",
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

#: Issue #18's targets at the largest size (p50 in ms).
PUSH_TARGET_MS, RESOLVE_TARGET_MS, GROWTH_TARGET = 10.0, 2.0, 1.5


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


class Waits:
    """Seconds spent in ``os.fsync``, in the statements of ``engines`` (sent until answered)
    and in their commits, while the block runs: where a push's time goes (the rest is Python).
    One total for all the engines (operations run one at a time)."""

    def __init__(self, engines: list[sa.Engine]):
        self.fsync = self.statements = self.commits = 0.0
        self._engines, self._sent = engines, 0.0

    def totals(self) -> tuple[float, float, float]:
        return self.fsync, self.statements, self.commits

    def __enter__(self) -> Waits:
        fsync = os.fsync

        def timed_fsync(fd: Any) -> None:
            t = time.perf_counter()
            fsync(fd)
            self.fsync += time.perf_counter() - t

        def timed(commit: Callable[[Any], None]) -> Callable[[Any], None]:
            def timed_commit(dbapi_connection: Any) -> None:
                t = time.perf_counter()
                commit(dbapi_connection)
                self.commits += time.perf_counter() - t

            return timed_commit

        self._restore = fsync, [e.dialect.do_commit for e in self._engines]
        os.fsync = timed_fsync
        for engine in self._engines:
            engine.dialect.do_commit = timed(engine.dialect.do_commit)  # type: ignore[method-assign]
            event.listen(engine, "before_cursor_execute", self._before)
            event.listen(engine, "after_cursor_execute", self._after)
        return self

    def __exit__(self, *exc: object) -> None:
        os.fsync, commits = self._restore
        for engine, commit in zip(self._engines, commits, strict=True):
            engine.dialect.do_commit = commit  # type: ignore[method-assign]
            event.remove(engine, "before_cursor_execute", self._before)
            event.remove(engine, "after_cursor_execute", self._after)

    def _before(self, *args: Any) -> None:
        self._sent = time.perf_counter()

    def _after(self, *args: Any) -> None:
        self.statements += time.perf_counter() - self._sent


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
PUSH_PARTS = ("push", "fsync", "statements", "commits", "the rest")


class Sized:
    """The measurements on one registry of ``n_versions`` versions."""

    def __init__(self, reg: jaxport.Registry, n_versions: int, repeat: int):
        self.reg, self.statements = reg, Statements(reg._backend.engine)
        self.samples: dict[str, list[float]] = {}
        self.counts: dict[str, int] = {}
        self.parts: list[tuple[float, ...]] = []
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

    def results(self) -> tuple[Results, dict[str, float]]:
        """``{operation: (p50 ms, p99 ms, statements)}``, and the p50 of each part of a push
        (``PUSH_PARTS``: all of it, then its waits; in ms)."""
        ops = {op: (*percentiles_ms(s), self.counts[op]) for op, s in self.samples.items()}
        parts = {p: statistics.median(x[i] for x in self.parts) for i, p in enumerate(PUSH_PARTS)}
        return ops, {p: seconds * 1e3 for p, seconds in parts.items()}


def bench_jaxport(
    urls: dict[int, str], blobs: Path, repeat: int
) -> dict[int, tuple[Results, dict[str, float]]]:
    """Each size's ``Sized.results``: every registry is filled first, then each operation
    runs on each size in turn, so that the machine's other work weighs on every size alike."""
    with contextlib.ExitStack() as stack:
        runs: dict[int, Sized] = {}
        for n, url in urls.items():
            reg = stack.enter_context(jaxport.Registry(url, blobs=blobs / f"blobs-{n}"))
            t = time.perf_counter()
            prefill(reg, n)
            print(f"jaxport: prefilled {n:,} versions in {time.perf_counter() - t:.1f} s")
            runs[n] = Sized(reg, n, repeat)
        exports = [
            jax.export.export(jax.jit(lambda x, s=float(i): x * s))(jnp.zeros(4))
            for i in range(repeat)
        ]
        with Waits([run.reg._backend.engine for run in runs.values()]) as waits:
            for i, exp in enumerate(exports):
                for run in runs.values():
                    if i % 2:
                        push = functools.partial(run.reg.push, exp, "target", aliases=["prod"])
                        run.measure("push + move alias", push)
                        continue
                    before = waits.totals()
                    elapsed = run.measure("push", functools.partial(run.reg.push, exp, "target"))
                    spent = [a - b for a, b in zip(waits.totals(), before, strict=True)]
                    run.parts.append((elapsed, *spent, elapsed - sum(spent)))
        for run in runs.values():  # untimed: the module sandbox's worker starts once
            run.reg.pull("target@prod", platform="cpu")
        for op in next(iter(runs.values())).reads:
            for i in range(repeat):
                for run in runs.values():
                    run.measure(op, functools.partial(run.reads[op], i))
        return {n: run.results() for n, run in runs.items()}


def bench_mlflow(python: str, urls: dict[int, str], repeat: int) -> dict[int, Any]:
    """MLflow's ``{size: {"version", "ops": {operation: [p50, p99, statements]}}}``, measured
    by ``bench_mlflow_peer.py`` under ``python`` (every size in one process, as here); {}
    (saying why) if it fails."""
    sized = [str(a) for n, url in urls.items() for a in (n, url)]
    proc = subprocess.run(
        [python, str(_PEER), str(repeat), *sized], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        print(f"MLflow not measured ({python}): {proc.stderr.strip().splitlines()[-1:]}")
        return {}
    *lines, last = proc.stdout.strip().splitlines()
    print("\n".join(lines))
    found = json.loads(last)
    return {int(n): {"version": found["version"], "ops": ops} for n, ops in found["sizes"].items()}


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


def report(
    sizes: list[int],
    ours: dict[int, Results],
    theirs: dict[int, Any],
    push_parts: dict[int, dict[str, float]],
) -> None:
    """Prints the table, where a push's time goes, and the targets."""
    small, large = sizes[0], sizes[-1]

    def k(n: int) -> str:
        return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"

    mlflow_version = next((t["version"] for t in theirs.values() if t), None)
    print(f"\n| operation | {' | '.join(f'{k(n)}' for n in sizes)} | statements | growth "
          f"| {' | '.join(f'MLflow {k(n)}' for n in sizes)} | jaxport / MLflow |")  # fmt: skip
    print("|---|" + "---:|" * len(sizes) + "---:|---:|" + "---:|" * len(sizes) + "---:|")
    missed = []
    for op in ours[small]:
        cells = " | ".join(f"{ours[n][op][0]:.2f} / {ours[n][op][1]:.2f}" for n in sizes)
        counts = sorted({ours[n][op][2] for n in sizes})
        growth = ours[large][op][0] / ours[small][op][0]
        peer = [theirs.get(n, {}).get("ops", {}).get(op) for n in sizes]
        peer_cells = " | ".join("-" if p is None else f"{p[0]:.2f} ({p[2]})" for p in peer)
        ratios = [
            None if p is None else ours[n][op][0] / p[0] for n, p in zip(sizes, peer, strict=True)
        ]
        ratio = " / ".join("-" if r is None else f"{r:.2f}" for r in ratios)
        stmts = "/".join(map(str, counts))
        print(f"| {op} | {cells} | {stmts} | {growth:.2f}x | {peer_cells} | {ratio} |")
        if growth >= GROWTH_TARGET:
            missed.append(f"{op}: growth {growth:.2f}x (target < {GROWTH_TARGET}x)")
        if any(r is not None and r >= 1 for r in ratios):
            missed.append(f"{op}: behind MLflow ({ratio})")
        p50 = ours[large][op][0]
        if op.startswith("resolve") and p50 >= RESOLVE_TARGET_MS:
            missed.append(f"{op}: p50 {p50:.2f} ms at {k(large)} (target < {RESOLVE_TARGET_MS})")
        if op == "push" and p50 >= PUSH_TARGET_MS:
            missed.append(f"{op}: p50 {p50:.2f} ms at {k(large)} (target < {PUSH_TARGET_MS})")
    print(
        f"\njaxport cells: p50 / p99 in ms; statements per operation; growth: p50 at {k(large)} "
        f"/ p50 at {k(small)}. MLflow {mlflow_version}: p50 in ms (statements). MLflow's calls:"
    )
    for op, call in PEERS.items():
        print(f"  {op}: {call}")
    print("a push, p50 of each part in ms (its waits: fsync of the blob and its directory, "
          "statements sent until answered, commits; the rest is Python):")  # fmt: skip
    for n in sizes:
        print(f"  {k(n)}: " + ", ".join(f"{p} {push_parts[n][p]:.2f}" for p in PUSH_PARTS))
    print("targets (issue #18):", "all met" if not missed else "")
    for line in missed:
        print(f"  missed: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default="1000,10000,100000", help="sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--url", default=None, help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument("--mlflow-python", default=sys.executable)
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.versions.split(","))
    load = os.getloadavg()[0]
    print(
        f"{datetime.date.today()}; jaxport {jaxport.__version__}, jax {jax.__version__}, "
        f"{_server(args.url)}; {os.cpu_count()} cores; repeat {args.repeat}"
    )
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        syncs = disk_syncs_ms(Path(tmp), args.url)
        urls = {n: stack.enter_context(_databases(args.url, Path(tmp), n)) for n in sizes}
        measured = bench_jaxport({n: u[0] for n, u in urls.items()}, Path(tmp), args.repeat)
        theirs = bench_mlflow(args.mlflow_python, {n: u[1] for n, u in urls.items()}, args.repeat)
        syncs_after = disk_syncs_ms(Path(tmp), args.url)
    ours = {n: m[0] for n, m in measured.items()}
    report(sizes, ours, theirs, {n: m[1] for n, m in measured.items()})
    print(f"load average (1 min): {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"durable writes: {syncs} at the start; {syncs_after} at the end")


if __name__ == "__main__":
    main()
