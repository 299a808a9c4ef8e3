"""Registry benchmark: jaxport's operations at several registry sizes, the SQL statements each
sends, and MLflow's Model Registry beside them, in one run.

    python benchmarks/bench_registry.py [--variants 1000,100000] [--repeat 200]
        [--url postgresql+psycopg://host/db]   # default: SQLite in a temporary directory
        [--mlflow-python PATH]   # an interpreter with mlflow installed (default: this one)

jaxport: for each size, a registry pre-filled with that many variants (10 versions per name,
platforms and device counts mixed; rows bulk-inserted, all pointing at one real archive), then
p50 of ``push`` of a small artifact (dumps + blob write with fsync + its transactions), of the
reads (``get``, ``resolve`` by name and by alias, a page of ``list`` and of ``search`` with and
without matches) and of ``pull``; each with the statements it sends (``before_cursor_execute``
on the registry's engine; SQLite's ``BEGIN`` left out, as ``tests/test_sql_counts.py`` counts)
and how its p50 grows from the smallest size to the largest (1.0x: flat). With ``--url``, a
PostgreSQL database: each size gets a schema of its own, dropped afterwards. MLflow:
``create_model_version`` and ``search_model_versions`` on a model with 200 versions, its SQLite
store in the same temporary directory (skipped, saying why, where MLflow is not installed).
Prints p50s and ratios (the machine is noisy: a ratio holds, a time does not). Targets (issue
#3): resolve p50 under 2 ms and push p50 under 10 ms with 100,000 variants, both ahead of
MLflow; (issue #18) no read's statements or p50 growing with the registry's size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
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
from jaxport.registry._models import NameRow, VariantPlatformRow, VariantRow, VersionRow

_PLATFORMS = [("cpu",), ("cuda",), ("tpu",), ("cpu", "cuda", "tpu")]
_FIRST_ID = 1000


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def prefill(reg: jaxport.Registry, n_variants: int) -> None:
    """Bulk-inserts ``n_variants`` variants (10 versions per name) pointing at one real blob."""
    template = reg.push(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), "template").variants[0]
    now = time.time()
    with _db.write_transaction(reg._engine) as conn:
        n_names = n_variants // 10
        conn.execute(
            insert(NameRow),
            [
                {"id": _FIRST_ID + i, "name": f"m{i}", "last_version": 10, "created_at": now}
                for i in range(n_names)
            ],
        )
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
                for i in range(n_variants)
            ],
        )
        rows, platforms = [], []
        for i in range(n_variants):
            plats = _PLATFORMS[i % len(_PLATFORMS)]
            rows.append(
                {
                    "id": _FIRST_ID + i,
                    "version_id": _FIRST_ID + i,
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
            for table in ("models", "versions", "variants"):
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

    def of(self, fn: Callable[[], Any]) -> int:
        before = self.count
        fn()
        return self.count - before


@contextlib.contextmanager
def _database(url: str | None, tmp: Path, n_variants: int) -> Iterator[str]:
    """A fresh database for one size: SQLite in ``tmp``, or a schema of its own in ``url``."""
    if url is None:
        yield f"sqlite:///{tmp / f'jaxport-{n_variants}.db'}"
        return
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def bench_jaxport(
    url: str, blobs: Path, n_variants: int, repeat: int
) -> dict[str, tuple[float, int]]:
    """``{operation: (p50 in ms, statements)}`` on a registry of ``n_variants`` variants."""
    reg = jaxport.Registry(url, blobs=blobs)
    t = time.perf_counter()
    prefill(reg, n_variants)
    print(f"prefilled {n_variants:,} variants in {time.perf_counter() - t:.1f} s")
    statements = Statements(reg._engine)
    n_names = n_variants // 10
    exports = [
        jax.export.export(jax.jit(lambda x, s=float(i): x * s))(jnp.zeros(4)) for i in range(repeat)
    ]
    samples: dict[str, list[float]] = {}
    counts: dict[str, int] = {}

    def measure(op: str, fn: Callable[[], Any]) -> None:
        t = time.perf_counter()
        counts[op] = statements.of(fn)
        samples.setdefault(op, []).append(time.perf_counter() - t)

    for i, exp in enumerate(exports):
        if i % 2:
            measure("push + move alias", lambda e=exp: reg.push(e, "target", aliases=["prod"]))
        else:
            measure("push", lambda e=exp: reg.push(e, "target"))
    middle = f"m{n_names // 2}"
    reads: dict[str, Callable[[int], Any]] = {
        "get (name with many versions)": lambda i: reg.get("target"),
        "resolve (name with many versions)": lambda i: reg.resolve("target", platform="cpu"),
        "resolve by alias": lambda i: reg.resolve("target@prod", platform="cpu"),
        "resolve (random name)": lambda i: reg.resolve(
            f"m{(i * 7919) % n_names}", platform="tpu", nr_devices=8
        ),
        "list: a page of 50 of one name": lambda i: reg.list(
            "target", limit=50, after=("target", 1 + i % (repeat // 2))
        ),
        "list: a page of 50 after a name": lambda i: reg.list(limit=50, after=(middle, 5)),
        "search: a page of 50 (platform)": lambda i: reg.search(
            platform="tpu", limit=50, after=_FIRST_ID + (i * 7919) % n_variants
        ),
        "search: nothing matches (platform)": lambda i: reg.search(platform="rocm", limit=50),
        "search: nothing matches (fun_name)": lambda i: reg.search(fun_name="none", limit=50),
    }
    for i in range(repeat):
        for op, read in reads.items():
            measure(op, lambda read=read, i=i: read(i))
    for _ in range(min(repeat, 50)):
        measure("pull", lambda: reg.pull("target@prod", platform="cpu"))
    reg.close()
    return {op: (_p50_ms(s), counts[op]) for op, s in samples.items()}


_MLFLOW = textwrap.dedent(
    """
    import json, statistics, sys, time, warnings, logging
    warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
    import mlflow
    from mlflow import MlflowClient
    tmp, repeat = sys.argv[1], int(sys.argv[2])
    uri = f"sqlite:///{tmp}/mlflow.db"
    mlflow.set_tracking_uri(uri); mlflow.set_registry_uri(uri)
    client = MlflowClient()
    client.create_registered_model("m")
    creates = []
    for i in range(200):
        t = time.perf_counter()
        client.create_model_version("m", source=f"{tmp}/artifacts/{i}")
        creates.append(time.perf_counter() - t)
    searches = []
    for _ in range(repeat):
        t = time.perf_counter()
        client.search_model_versions("name='m'")
        searches.append(time.perf_counter() - t)
    print(json.dumps({"version": mlflow.__version__,
                      "create_model_version": statistics.median(creates) * 1e3,
                      "search_model_versions": statistics.median(searches) * 1e3}))
    """
)


def bench_mlflow(python: str, tmp: Path, repeat: int) -> dict[str, float] | None:
    proc = subprocess.run(
        [python, "-c", _MLFLOW, str(tmp), str(repeat)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        print(f"MLflow not measured ({python}): {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


_PEERS = {
    "push": "create_model_version",
    "push + move alias": "create_model_version",
    "resolve (name with many versions)": "search_model_versions",
    "resolve by alias": "search_model_versions",
    "resolve (random name)": "search_model_versions",
}


def report(
    sizes: list[int], ours: dict[int, dict[str, tuple[float, int]]], theirs: dict[str, Any] | None
) -> None:
    small, large = sizes[0], sizes[-1]
    head = " | ".join(f"{n:,} variants" for n in sizes)
    print(f"\njaxport {jaxport.__version__}; p50 in ms (statements)")
    print(f"| operation | {head} | growth | MLflow (200 versions) |")
    print("|---|" + "---|" * len(sizes) + "---|---|")
    for op in ours[small]:
        cells = " | ".join(f"{ours[n][op][0]:.2f} ({ours[n][op][1]})" for n in sizes)
        growth = ours[large][op][0] / ours[small][op][0]
        peer = _PEERS.get(op)
        mlflow = "-"
        if theirs and peer:
            ratio = ours[large][op][0] / theirs[peer]
            mlflow = f"{peer}: {theirs[peer]:.2f} ({ratio:.2f}x)"
        print(f"| {op} | {cells} | {growth:.2f}x | {mlflow} |")
    if theirs:
        print(f"(MLflow {theirs['version']}; ratio: jaxport at {large:,} variants / MLflow)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="1000,100000", help="sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--url", default=None, help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument("--mlflow-python", default=sys.executable)
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.variants.split(","))
    ours = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            with _database(args.url, Path(tmp), n) as url:
                ours[n] = bench_jaxport(url, Path(tmp) / f"blobs-{n}", n, args.repeat)
        theirs = bench_mlflow(args.mlflow_python, Path(tmp), args.repeat)
    report(sizes, ours, theirs)


if __name__ == "__main__":
    main()
