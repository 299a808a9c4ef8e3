"""MLflow's side of ``bench_registry.py``: its Model Registry's peer operations on registries
of several sizes. ``bench_registry.py`` imports it and takes each sample of an operation on
jaxport and on MLflow back to back (``Sized.reads``, ``push``, ``push_and_move``,
``measure``); run alone, it measures MLflow by itself:

    python benchmarks/bench_mlflow_peer.py REPEAT VERSIONS URL ...

Each ``URL`` is an empty database (``sqlite:///PATH`` or ``postgresql+psycopg://...``: MLflow 3
accepts psycopg 3, the driver jaxport uses). MLflow creates its tables there; each registry is
then filled to its ``VERSIONS`` as ``bench_registry.prefill`` fills jaxport's (10 versions per
name, ``m0`` ... ; alias ``prod`` on each name's version 10; a tag per platform, the platforms
mixed as jaxport's variants are), rows bulk-inserted into MLflow's own tables
(``registered_models``, ``model_versions``, ``model_version_tags``, ``registered_model_aliases``)
with SQLAlchemy, since 100,000 ``create_model_version`` calls take too long; ``MlflowClient``
then checks that it sees them. Every operation is timed through ``MlflowClient`` (the public
API, in-process: no tracking server), with the statements MLflow's store sends
(``before_cursor_execute`` on its engine; ``BEGIN`` left out, as jaxport's are). On SQLite,
``sqlite_pragmas`` gives MLflow's engine jaxport's settings (WAL, ``synchronous``). Run alone,
the last line of output is JSON: ``{"version": ..., "sizes": {VERSIONS: {operation: [p50 ms,
p99 ms, statements]}}}``, keyed by jaxport's operation names (``bench_registry.PEERS``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import mlflow  # noqa: E402 (after the filters: its import warns)
import sqlalchemy as sa  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.store.model_registry.dbmodels.models import (  # noqa: E402
    SqlModelVersion,
    SqlModelVersionTag,
    SqlRegisteredModel,
    SqlRegisteredModelAlias,
)

#: Each version's platforms, as ``bench_registry._PLATFORMS`` mixes jaxport's variants.
PLATFORMS = [("cpu",), ("cuda",), ("tpu",), ("cpu", "cuda", "tpu")]
WORKSPACE = "default"


def prefill(engine: sa.Engine, n_versions: int) -> None:
    """Bulk-inserts ``n_versions`` versions (10 per name, the newest aliased ``prod``)."""
    now = int(time.time() * 1000) - n_versions
    n_names = n_versions // 10
    models, versions, tags, aliases = [], [], [], []
    for i in range(n_names):
        name = f"m{i}"
        models.append(
            {"name": name, "creation_time": now + 10 * i, "last_updated_time": now + 10 * i + 9,
             "workspace": WORKSPACE}
        )  # fmt: skip
        aliases.append({"alias": "prod", "version": 10, "name": name, "workspace": WORKSPACE})
    for i in range(n_versions):
        name, version = f"m{i // 10}", i % 10 + 1
        source = f"/artifacts/{name}/{version}"
        versions.append(
            {"name": name, "version": version, "creation_time": now + i,
             "last_updated_time": now + i, "current_stage": "None", "source": source,
             "storage_location": source, "status": "READY", "workspace": WORKSPACE}
        )  # fmt: skip
        tags += [
            {"key": p, "value": "1", "name": name, "version": version, "workspace": WORKSPACE}
            for p in PLATFORMS[i % len(PLATFORMS)]
        ]
    with engine.begin() as conn:
        conn.execute(sa.insert(SqlRegisteredModel.__table__), models)
        conn.execute(sa.insert(SqlModelVersion.__table__), versions)
        conn.execute(sa.insert(SqlModelVersionTag.__table__), tags)
        conn.execute(sa.insert(SqlRegisteredModelAlias.__table__), aliases)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))


def check_prefill(client: MlflowClient, n_versions: int) -> None:
    """``client`` sees what ``prefill`` inserted (raises AssertionError if not)."""
    last = f"m{n_versions // 10 - 1}"
    assert client.get_model_version(last, "10").source == f"/artifacts/{last}/10"
    assert client.get_model_version_by_alias("m0", "prod").version == 10
    assert len(client.search_model_versions(f"name = '{last}'")) == 10
    page = client.search_model_versions("tags.tpu = '1'", max_results=50)
    assert len(page) == 50 and page.token, page
    assert client.get_registered_model(last).aliases == {"prod": 10}


def sqlite_pragmas(engine: sa.Engine, synchronous: str) -> None:
    """Every new connection of ``engine`` gets jaxport's SQLite settings (``registry/_db.py``:
    WAL journal, 30 s busy timeout) and ``PRAGMA synchronous=<synchronous>`` (``NORMAL`` is
    jaxport's; ``FULL`` syncs the WAL at every commit); the pool is emptied so that
    connections MLflow opened before (creating its tables) are not used again."""

    def on_connect(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.close()

    sa.event.listen(engine, "connect", on_connect)
    engine.dispose()


def synchronous_of(engine: sa.Engine) -> int:
    """``PRAGMA synchronous`` as a connection of ``engine`` sees it (1 NORMAL, 2 FULL)."""
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())


class Statements:
    """Counts the statements an engine sends (``BEGIN`` left out)."""

    def __init__(self, engine: sa.Engine):
        self.count = 0
        sa.event.listen(engine, "before_cursor_execute", self._on_statement)

    def _on_statement(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if not statement.startswith("BEGIN"):
            self.count += 1


class Sized:
    """The measurements on one MLflow registry of ``n_versions`` versions."""

    def __init__(self, url: str, n_versions: int, repeat: int, synchronous: str | None = None):
        client = MlflowClient(tracking_uri=url, registry_uri=url)
        engine = client._get_registry_client().store.engine
        if synchronous is not None and engine.dialect.name == "sqlite":
            sqlite_pragmas(engine, synchronous)
        t = time.perf_counter()
        prefill(engine, n_versions)
        check_prefill(client, n_versions)
        print(f"MLflow: prefilled {n_versions:,} versions in {time.perf_counter() - t:.1f} s")
        client.create_registered_model("target")
        self.client, self.engine, self.statements = client, engine, Statements(engine)
        self.samples: dict[str, list[float]] = {}
        self.counts: dict[str, int] = {}
        n_names = n_versions // 10

        def name(i: int) -> str:
            return f"m{(i * 7919) % n_names}"

        latest = {"order_by": ["version_number DESC"], "max_results": 1}
        search = client.search_model_versions
        self.reads: dict[str, Callable[[int], Any]] = {
            "alias move": lambda i: client.set_registered_model_alias(
                "target", "prod", 1 + i % repeat
            ),
            "get (NAME:VERSION)": lambda i: client.get_model_version(name(i), str(1 + i % 10)),
            "resolve latest (name with many versions)": lambda i: search(
                "name = 'target'", **latest
            ),
            "resolve latest (random name)": lambda i: search(f"name = '{name(i)}'", **latest),
            "resolve by alias (name with many versions)": lambda i: (
                client.get_model_version_by_alias("target", "prod")
            ),
            "resolve by alias (random name)": lambda i: client.get_model_version_by_alias(
                name(i), "prod"
            ),
            "list: a page of 50 of one name": lambda i: search("name = 'target'", max_results=50),
            "list: a page of 50 of every name": lambda i: search(max_results=50),
            "search: a page of 50 (platform)": lambda i: search("tags.tpu = '1'", max_results=50),
            "search: nothing matches (platform)": lambda i: search(
                "tags.rocm = '1'", max_results=50
            ),
            "search: nothing matches (fun_name)": lambda i: search("name = 'none'", max_results=50),
            "search: nothing matches (jax_version)": lambda i: search(
                "tags.jax_version = '0.1'", max_results=50
            ),
        }

    def push(self, i: int) -> Any:
        return self.client.create_model_version(
            "target", source=f"/artifacts/target/{i}", tags={"cpu": "1"}, await_creation_for=0
        )

    def push_durable(self, i: int, exported: Any, directory: Path) -> Any:
        """What storing an ``Exported`` in MLflow takes at jaxport's durability: jax's own
        ``serialize()``, the bytes written as a file durably (a temporary file, fsync,
        rename, the directory's fsync: what jaxport's blob store does), then
        ``create_model_version`` with the file as its source."""
        path = directory / f"{i}.bin"
        durable_write(path, exported.serialize())
        return self.client.create_model_version(
            "target", source=str(path), tags={"cpu": "1"}, await_creation_for=0
        )

    def push_and_move(self, i: int) -> None:
        self.client.set_registered_model_alias("target", "prod", self.push(i).version)

    def measure(self, op: str, fn: Callable[[], Any]) -> None:
        before = self.statements.count
        t = time.perf_counter()
        fn()
        self.samples.setdefault(op, []).append(time.perf_counter() - t)
        self.counts[op] = self.statements.count - before

    def results(self) -> dict[str, list[float]]:
        """``{operation: [p50 ms, p99 ms, statements]}``."""
        return {
            op: [statistics.median(s) * 1e3, percentile(s, 99) * 1e3, self.counts[op]]
            for op, s in self.samples.items()
        }


def durable_write(path: Path, data: bytes | bytearray) -> None:
    """``data`` written to ``path`` as a durable artifact store would: a temporary file
    beside it, fsynced, renamed over ``path``, the directory fsynced."""
    tmp = path.with_name(f".tmp-{path.name}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bench(urls: dict[int, str], repeat: int) -> dict[int, dict[str, list[float]]]:
    """Each size's ``Sized.results``: every registry is filled first, then each operation
    runs on each size in turn (MLflow alone)."""
    runs = {n: Sized(url, n, repeat) for n, url in urls.items()}
    for i in range(repeat):
        for run in runs.values():
            if i % 2:
                run.measure("push + move alias", functools.partial(run.push_and_move, i))
            else:
                run.measure("push", functools.partial(run.push, i))
    for op in next(iter(runs.values())).reads:
        for i in range(repeat):
            for run in runs.values():
                run.measure(op, functools.partial(run.reads[op], i))
    return {n: run.results() for n, run in runs.items()}


def percentile(samples: list[float], p: int) -> float:
    """The ``p``-th percentile (``statistics.quantiles``' default method; needs 2 samples)."""
    return statistics.quantiles(samples, n=100)[p - 1]


def main() -> None:
    repeat, sized = int(sys.argv[1]), sys.argv[2:]
    urls = {int(n): url for n, url in zip(sized[::2], sized[1::2], strict=True)}
    print(json.dumps({"version": mlflow.__version__, "sizes": bench(urls, repeat)}))


if __name__ == "__main__":
    main()
