"""Retention dry run at scale (issue 26 §4): ``Registry.retain(dry_run=True)`` over 100,000
versions, against a plain SELECT of the same version rows measured in the same run.

    python benchmarks/bench_retain.py [--versions 100000] [--per-name 100] [--repeat 3]
        [--url postgresql+psycopg://host/db]   # default: SQLite in a temporary directory

The registry is filled by direct SQL inserts (as pushes of distinct archives would leave it):
``--versions / --per-name`` names ``bench.mN`` of ``--per-name`` versions each, every version
two variants (cpu and cuda; cuda 4-device on odd versions), pushed one day apart; alias
``prod`` on each name's version 50 (protected on every tenth name), full audit findings on
every fifth version's cpu variant (``ok`` under the installed jax, and a ``failed`` one under
it for every tenth), and a policy ``bench.`` keeping the last 10, the newest ``ok`` per target
and anything younger than 30 days. All variants point at one real archive.

Prints the rows, the dry run's best and median seconds (``--repeat`` runs), what it decided,
the plain SELECT's best seconds (the version rows with their names, fetched in full: the
least any plan must read), their ratio, then the seconds of one real run (the soft deletions
and their events), and the load average. The target: < 10 s for 100k.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import jax
import jax.export
import jax.numpy as jnp
import sqlalchemy as sa

import jaxport
from jaxport.registry._models import (
    AliasGateRow,
    AliasRow,
    AuditRow,
    NameRow,
    VariantPlatformRow,
    VariantRow,
    VersionRow,
)

sys.path.insert(0, str(Path(__file__).parent))
from _machine import load_average

DAY = 86400.0


def fill(reg: jaxport.Registry, versions: int, per_name: int) -> None:
    """The rows described in the module's doc, in a few bulk INSERTs per name batch."""
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((4,), jnp.float32))
    template = reg.push(exp, "bench.template").variants[0]
    engine = reg._backend.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        row = dict(
            conn.execute(
                sa.select(VariantRow.__table__).where(VariantRow.id == template.variant_id)
            )
            .mappings()
            .one()
        )
    row.pop("id")
    now = time.time()
    release = jax.__version__
    names = versions // per_name
    with engine.begin() as conn:
        for n in range(names):
            model_id = conn.execute(
                sa.insert(NameRow).returning(NameRow.id),
                {"name": f"bench.m{n}", "last_version": per_name, "created_at": now},
            ).scalar_one()
            ids = conn.execute(
                sa.insert(VersionRow).returning(VersionRow.id, sort_by_parameter_order=True),
                [
                    {"model_id": model_id, "version": v, "metadata_json": "{}",
                     "created_at": now - (per_name - v) * DAY,
                     "content_key": uuid.uuid4().hex}
                    for v in range(1, per_name + 1)
                ],
            ).scalars().all()  # fmt: skip
            variants = []
            for v, version_id in enumerate(ids, start=1):
                for platform, devices in (("cpu", 1), ("cuda", 4 if v % 2 else 1)):
                    variants.append({**row, "version_id": version_id, "model_id": model_id,
                                     "platforms": platform, "nr_devices": devices})  # fmt: skip
            variant_ids = conn.execute(
                sa.insert(VariantRow).returning(VariantRow.id, sort_by_parameter_order=True),
                variants,
            ).scalars().all()  # fmt: skip
            conn.execute(
                sa.insert(VariantPlatformRow),
                [{"variant_id": i, "platform": p["platforms"]}
                 for i, p in zip(variant_ids, variants, strict=True)],
            )  # fmt: skip
            conn.execute(
                sa.insert(AliasRow),
                {"model_id": model_id, "alias": "prod", "version": min(50, per_name),
                 "updated_at": now},
            )  # fmt: skip
            if n % 10 == 0:
                conn.execute(
                    sa.insert(AliasGateRow),
                    {"model_id": model_id, "alias": "prod", "require_audit": "ok",
                     "jax_releases": "", "platforms": "", "require_goldens": False,
                     "created_at": now, "created_by": "bench"},
                )  # fmt: skip
    # Findings: every variant shares the template's digest, so they are keyed by it; the
    # plan joins them to every variant (the worst case for the join).
    with engine.begin() as conn:
        finding = {"digest": row["digest"], "jax_version": release, "jaxlib_version": release,
                   "platform": "cpu", "reason": "", "details_json": "{}", "seconds": 0.1,
                   "created_at": now, "level": "full", "devices": 1}  # fmt: skip
        conn.execute(sa.insert(AuditRow), [{**finding, "status": "ok"}])
    reg.set_retention_policy("bench.", keep_last=10, keep_younger_than=30 * DAY)


def plain_select(reg: jaxport.Registry) -> int:
    """The version rows with their names, fetched in full."""
    engine = reg._backend.engine  # type: ignore[attr-defined]
    q = sa.select(
        VersionRow.id, VersionRow.model_id, VersionRow.version, VersionRow.created_at, NameRow.name
    ).join(NameRow, NameRow.id == VersionRow.model_id)
    with engine.connect() as conn:
        return len(conn.execute(q).all())


def best_of(fn, repeat: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--per-name", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/registry.db"
        reg = jaxport.Registry(url, blobs=os.path.join(tmp, "blobs"), upgrade=True)
        t = time.perf_counter()
        fill(reg, args.versions, args.per_name)
        print(f"filled {args.versions:,} versions ({args.versions * 2:,} variants) in "
              f"{time.perf_counter() - t:.1f} s on {reg.url.split(':')[0]}")  # fmt: skip
        dry_best, dry_median, plan = best_of(lambda: reg.retain(dry_run=True), args.repeat)
        select_best, _, rows = best_of(lambda: plain_select(reg), args.repeat)
        assert plan is not None
        print(f"plain SELECT of the version rows: {rows:,} rows, best {select_best:.3f} s")
        print(
            f"retain --dry-run: best {dry_best:.2f} s, median {dry_median:.2f} s "
            f"({len(plan.deleted):,} would go, {len(plan.kept):,} kept; "  # type: ignore[attr-defined]
            f"target < 10 s: {'met' if dry_best < 10 else 'NOT met'})"
        )
        print(f"ratio dry run / plain SELECT: {dry_best / select_best:.1f}x")
        t = time.perf_counter()
        done = reg.retain()
        print(f"the real run (soft-deletes, one event each): {len(done.deleted):,} deleted in "
              f"{time.perf_counter() - t:.2f} s")  # fmt: skip
        print(load_average())
        reg.close()


if __name__ == "__main__":
    main()
