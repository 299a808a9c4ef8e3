"""Concurrency at scale: the workload of ``tests/test_registry_concurrency.py``'s gc race, run
with more processes, counted.

The same churn workers (``tests/_concurrency_worker.py``: ``churn``) in separate processes on
one registry: each pushes archives shared with the others to its own name, moves an alias, pulls
through the alias and checks the bytes, and deletes every other version, while one process runs
``gc(min_age=0)`` in a loop (``gc_loop`` there, here counting what it removes). Afterwards every
version a worker kept must pull its archive's bytes, ``verify()`` must be clean and gc must hold
nothing back. The counts come from the workers' results and the database.

With ``--workload transient`` each worker instead pushes a random archive of the pool, pulls
it (bytes checked) and deletes it at once: every version is short-lived, so the blob of nearly
every push is unreferenced, and a gc candidate, while it is pushed again; a push whose blob gc
took would fail its pull (an error to a caller) or leave a missing blob.

Usage (the figures in RELIABILITY.md)::

    python tests/reliability/churn_figures.py --workers 8 --pushes 100 --backend sqlite
    python tests/reliability/churn_figures.py --workers 8 --pushes 100 --backend postgresql
    python tests/reliability/churn_figures.py --workload transient --archives 6 \\
        --workers 8 --pushes 100 --backend sqlite       # and --backend postgresql

The test itself, at the same scale::

    JAXPORT_CHURN_WORKERS=8 JAXPORT_CHURN_PUSHES=100 pytest -q \\
        tests/test_registry_concurrency.py -k gc_beside
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: _concurrency_worker

from crash_campaign import DEFAULT_POSTGRES_URL, POSTGRES_URL_ENV, postgres_schema


def _archives(count: int) -> list[bytes]:
    """The test's three archives (sin, cos, tanh of ``f32[3]``), then ``x * k`` ones."""
    import jax
    import jax.numpy as jnp

    import jaxport

    fns = [jnp.sin, jnp.cos, jnp.tanh]
    fns += [lambda x, k=float(k): x * k for k in range(count - len(fns))]
    return [jaxport.dumps(jax.export.export(jax.jit(f))(jnp.zeros(3))) for f in fns[:count]]


def counting_gc_loop(url: str, blobs: str, stop: str) -> tuple[int, int]:
    """``_concurrency_worker.gc_loop``, counting: ``(runs, blobs removed)``."""
    import os

    import jaxport

    runs = removed = 0
    with jaxport.Registry(url, blobs=blobs) as reg:
        while not os.path.exists(stop) or runs == 0:
            removed += len(reg.gc(min_age=0).digests)
            runs += 1
    return runs, removed


def transient(url: str, blobs: str, worker: int, count: int, archives: list[bytes]) -> list[str]:
    """Pushes a random archive of ``archives`` to its own name, pulls it (bytes checked) and
    deletes it, ``count`` times; keeps nothing. Raises on any error."""
    import random

    import jaxport

    name, rng = f"t{worker}", random.Random(worker)
    with jaxport.Registry(url, blobs=blobs) as reg:
        for i in range(count):
            data = archives[rng.randrange(len(archives))]
            ref = reg.push(data, name, metadata={"i": str(i)})
            assert reg.pull_bytes(f"{name}:{ref.version}", platform=None) == data
            reg.delete(name, ref.version)
    return []


def run(
    url: str, blobs: str, stop: str, workers: int, pushes: int, count: int, workload: str
) -> dict[str, Any]:
    """Runs the workload with ``count`` archives; returns the counts (``errors`` lists what
    workers raised)."""
    from _concurrency_worker import churn

    import jaxport

    worker_fn = churn if workload == "churn" else transient

    archives = _archives(count)
    jaxport.Registry(url, blobs=blobs).close()
    ctx = multiprocessing.get_context("spawn")
    errors, kept = [], []
    start = time.perf_counter()
    with ProcessPoolExecutor(workers + 1, mp_context=ctx) as pool:
        gc = pool.submit(counting_gc_loop, url, blobs, stop)
        futures = [pool.submit(worker_fn, url, blobs, w, pushes, archives) for w in range(workers)]
        for future in futures:
            try:
                kept += future.result(timeout=3600)
            except Exception as e:  # an error to a caller: counted and shown
                errors.append(f"{type(e).__name__}: {e}")
        Path(stop).touch()
        gc_runs, gc_removed = gc.result(timeout=600)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "errors": errors, "gc_runs": gc_runs, "gc_removed": gc_removed,
            "kept": kept, **_audit(url, blobs, kept, archives)}  # fmt: skip


def _audit(url: str, blobs: str, kept: list[str], archives: list[bytes]) -> dict[str, Any]:
    """Counts from the database, and what was lost, duplicated or corrupt."""
    from sqlalchemy import select

    import jaxport
    from jaxport.registry._db import create_registry_engine
    from jaxport.registry._models import NameRow

    engine = create_registry_engine(url)
    try:
        with engine.connect() as conn:
            created = dict(conn.execute(select(NameRow.name, NameRow.last_version)).all())
    finally:
        engine.dispose()
    with jaxport.Registry(url, blobs=blobs) as reg:
        remaining = reg.list(limit=1_000_000)
        lost = [ref for ref in kept if _pulls_wrong(reg, ref, archives)]
        pairs = [(r.name, r.version) for r in remaining]
        moves = sum(len(reg.alias_history(name)) for name in reg.names())
        report = reg.verify()
        held = reg.gc(min_age=0).kept_pending
    return {
        "created": sum(created.values()),
        "remaining": len(remaining),
        "alias_moves": moves,
        "lost": lost,
        "duplicates": len(pairs) - len(set(pairs)),
        "missing": len(report.missing),
        "corrupt": len(report.corrupt),
        "held_pending": len(held),
        "checked": report.checked,
    }


def _pulls_wrong(reg: Any, ref: str, archives: list[bytes]) -> bool:
    try:
        return reg.pull_bytes(ref, platform=None) not in archives
    except Exception:
        return True


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--pushes", type=int, default=100, help="iterations per worker")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--workload", choices=("churn", "transient"), default="churn")
    parser.add_argument(
        "--archives", type=int, default=3,
        help="archives shared by the workers (the test's 3; more go unreferenced more often)",
    )  # fmt: skip
    parser.add_argument(
        "--postgres-url", default=os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL)
    )
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="jaxport-churn-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if args.backend == "sqlite":
            url = f"sqlite:///{tmp}/registry.db"
        else:
            url = stack.enter_context(postgres_schema(args.postgres_url))
        r = run(
            url, f"{tmp}/blobs", f"{tmp}/stop", args.workers, args.pushes, args.archives,
            args.workload,
        )  # fmt: skip
    calls = args.workers * args.pushes
    rows = [
        ("processes", f"{args.workers} {args.workload} + 1 gc loop"),
        ("pushes", f"{calls} ({r['created']} created a version, the rest named an existing one)"),
        ("pulls, bytes checked", str(calls)),
        ("alias calls; moves in alias_history (force deletes too)",
         f"{calls if args.workload == 'churn' else 0}; {r['alias_moves']}"),
        ("deletes (versions removed)", str(r["created"] - r["remaining"])),
        ("gc(min_age=0) runs beside them", str(r["gc_runs"])),
        ("  blobs they removed while pushes ran", str(r["gc_removed"])),
        ("versions kept, each pulled and compared after", str(len(r["kept"]))),
        ("lost / duplicate / missing or corrupt versions",
         f"{len(r['lost'])} / {r['duplicates']} / {r['missing'] + r['corrupt']}"),
        ("errors to callers", str(len(r["errors"]))),
        ("blobs held back by pending rows afterwards", str(r["held_pending"])),
        ("wall time", f"{r['seconds']:.1f} s"),
    ]  # fmt: skip
    print(f"{args.workload}: backend {args.backend}, {args.workers} workers x {args.pushes} "
          f"iterations, {args.archives} archives")  # fmt: skip
    for label, value in rows:
        print(f"{label:<50} {value}")
    for error in r["errors"]:
        print(f"error: {error}")
    bad = r["errors"] or r["lost"] or r["duplicates"] or r["missing"] or r["corrupt"]
    return 1 if bad or r["held_pending"] else 0


if __name__ == "__main__":
    sys.exit(main())
