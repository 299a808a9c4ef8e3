"""What a protected alias's gates cost a move: median wall time of an alias move with and
without gates, in one run, among many stored findings.

    python benchmarks/bench_gates.py [--findings 100000] [--moves 200] [--db URL]

Makes a registry (SQLite in a temporary directory, or ``--db``, e.g. a PostgreSQL URL whose
schema is empty) with two versions of one name, each a variant for cpu, cuda and tpu, with
golden examples, and stores ``--findings`` audit rows (most of other archives, as a fleet's
audits are; every target of both versions ``ok`` under two jax releases). Then moves an
unprotected alias back and forth ``--moves`` times, and a protected one (audit ok on three
platforms x two releases, golden examples: six audit targets) as many times, interleaved, and
prints each median, their ratio, and the median of ``Registry.gates`` (what ``show`` adds).

The gates are read in the move's own transaction from the ``audits`` index by digest
(``ix_audits_digest``): their cost does not grow with the findings of other archives.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from sqlalchemy import insert

import jaxport
from jaxport.registry._models import AuditRow

RELEASES = ("0.11.2", "0.12.0.1")
PLATFORMS = ("cpu", "cuda", "tpu")


def _exp(fn):
    spec = jax.ShapeDtypeStruct((4,), jnp.float32)
    return jax.export.export(jax.jit(fn), platforms=PLATFORMS)(spec)


def _findings(reg: jaxport.Registry, digests: list[str], total: int) -> None:
    """``total`` rows: every (digest, platform, release) of ``digests`` ok, the rest of other
    archives (random-looking digests), in batches."""
    now = time.time()
    ours = [(d, p, r) for d in digests for p in PLATFORMS for r in RELEASES]
    rows = []
    for i in range(total):
        digest, platform, release = (
            ours[i] if i < len(ours) else (f"{i:064x}", PLATFORMS[i % 3], RELEASES[i % 2])
        )
        rows.append({
            "digest": digest, "jax_version": release, "jaxlib_version": release,
            "platform": platform, "status": "ok" if i < len(ours) else "compile-error",
            "reason": "", "details_json": "{}", "seconds": 0.1, "created_at": now,
            "level": "full", "devices": 1, "examples_digest": None,
        })  # fmt: skip
    engine = reg._backend.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        for start in range(0, len(rows), 10_000):
            conn.execute(insert(AuditRow), rows[start : start + 10_000])


def _median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--findings", type=int, default=100_000)
    parser.add_argument("--moves", type=int, default=200)
    parser.add_argument("--db", help="a database URL (default: SQLite in a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'registry.db'}"
        reg = jaxport.Registry(url, blobs=Path(tmp) / "blobs")
        example = [((jnp.ones(4, jnp.float32),), {})]
        v1 = reg.push(_exp(jnp.sin), "bench", examples=example, aliases=["dev", "prod"])
        v2 = reg.push(_exp(jnp.cos), "bench", examples=example)
        _findings(reg, [v1.variants[0].digest, v2.variants[0].digest], args.findings)
        reg.protect("bench", "prod", require_audit="ok", jax=RELEASES, platforms=PLATFORMS,
                    require_goldens=True)  # fmt: skip
        plain, gated, shown = [], [], []
        for i in range(args.moves):
            version = (v2, v1)[i % 2].version
            for alias, times in (("dev", plain), ("prod", gated)):
                start = time.perf_counter()
                reg.alias("bench", alias, version)
                times.append(time.perf_counter() - start)
            start = time.perf_counter()
            (check,) = reg.gates("bench")
            shown.append(time.perf_counter() - start)
            assert check.passed
        reg.close()
    dialect = url.split(":", 1)[0]
    print(f"{dialect}, {args.findings:,} findings stored, {args.moves} moves each")
    print(f"  move, unprotected alias:        {_median_ms(plain):7.2f} ms (median)")
    print(f"  move, protected (6 audit targets + goldens): {_median_ms(gated):7.2f} ms")
    ratio = statistics.median(gated) / statistics.median(plain)
    print(f"  ratio protected / unprotected:  {ratio:7.2f}x")
    print(f"  Registry.gates (show's addition): {_median_ms(shown):7.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
