"""The jax-release watcher's static pass over 100,000 variants (issue 26 §2: < 30 s), against a
plain ``SELECT`` of the same rows in the same run.

    python benchmarks/bench_watch_static.py [--variants 100000] [--url DATABASE_URL]

Variant rows are written straight in SQL beside one pushed template (the pass reads recorded
facts, never an archive's bytes), each with a digest of its own, their facts mixed as a
registry's are: writers across 14 jax releases, two calling conventions, four platform sets,
four custom-call target lists, unsharded / sharded for 2 or 8 devices (several hundred
distinct sets of facts; 1 in 20 versions soft-deleted). Then, in one run:

- ``select``: ``registry/_releases.facts_select()`` executed and every row fetched;
- ``pass``: the static pass for one made-up release (jax 0.13.0, published 2027-01-20): that
  ``SELECT``, a verdict per distinct set of facts, the counts (``_static_pass``);
- ``watch``: ``Registry.watch_jax(dry_run=True)`` against a PEP 691 index served on 127.0.0.1
  (reading the index, the installed jax's capabilities, the pass).

Each is the best of 3 runs (the median printed beside it). Prints the figures, the ratio of
the pass to the ``SELECT`` and the load average: on a shared machine the ratio holds better
than the seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jax
import jax.export
import jax.numpy as jnp
from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).parent))
from _machine import load_average

import jaxport
from jaxport.audit._static import capabilities
from jaxport.audit._watch import IndexRelease
from jaxport.registry import _db
from jaxport.registry._models import (
    BlobRow,
    NameRow,
    VariantPlatformRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._releases import _static_pass, facts_select

_WRITERS = ["0.4.35", "0.5.3", "0.6.2", "0.7.0", "0.7.2", "0.8.1", "0.8.3", "0.9.0", "0.9.2",
            "0.10.0", "0.10.2", "0.11.0", "0.12.0", "0.12.0.1"]  # fmt: skip
_PLATFORMS = ["cpu", "cuda", "tpu", "cpu,cuda,tpu"]
_TARGETS = ["[]", '["lapack_sgeqrf_ffi"]', '["Sharding"]', '["my_kernel"]']
_SHARDING = [(False, 1), (True, 2), (True, 8)]
_RELEASE = IndexRelease("jax", "0.13.0", 1800439200.0, False, False)  # 2027-01-20


def prefill(reg: jaxport.Registry, n: int) -> None:
    """Writes ``n`` variants (10 versions per name), each with a digest of its own."""
    template = reg.push(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)), "template").variants[0]
    now = time.time()
    digests = [hashlib.sha256(f"variant {i}".encode()).hexdigest() for i in range(n)]
    with _db.write_transaction(reg._backend.engine) as conn:
        conn.execute(
            insert(BlobRow), [{"digest": d, "size": 1, "created_at": now} for d in digests]
        )
        conn.execute(
            insert(NameRow),
            [{"id": 1000 + i, "name": f"m{i}", "last_version": 10, "created_at": now}
             for i in range(n // 10 + 1)],
        )  # fmt: skip
        conn.execute(
            insert(VersionRow),
            [{"id": 1000 + i, "model_id": 1000 + i // 10, "version": i % 10 + 1,
              "created_at": now, "metadata_json": "{}",
              "deleted_at": now if i % 20 == 19 else None} for i in range(n)],
        )  # fmt: skip
        rows, platforms = [], []
        for i in range(n):
            plats = _PLATFORMS[i % len(_PLATFORMS)]
            sharded, devices = _SHARDING[i % 7 % len(_SHARDING)]
            rows.append({
                "id": 1000 + i, "version_id": 1000 + i, "model_id": 1000 + i // 10,
                "digest": digests[i], "fun_name": "f", "platforms": plats,
                "nr_devices": devices, "sharded": sharded,
                "calling_convention_version": 9 + i % 2, "format_version": 3,
                "jax_version": _WRITERS[i % 13 % len(_WRITERS)],
                "jaxlib_version": template.jaxlib_version, "vjp_order": 0,
                "shape_polymorphic": False, "custom_call_targets": _TARGETS[i % 5 % 4],
                "size_bytes": 1, "in_signature": template.in_signature,
                "out_signature": template.out_signature, "created_at": now,
                "metadata_json": "{}",
            })  # fmt: skip
            platforms += [{"variant_id": 1000 + i, "platform": p} for p in plats.split(",")]
        conn.execute(insert(VariantRow), rows)
        conn.execute(insert(VariantPlatformRow), platforms)


def serve_index() -> tuple[ThreadingHTTPServer, str]:
    """A PEP 691 index on 127.0.0.1 announcing jax and jaxlib 0.13.0 (2027-01-20)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            package = self.path.strip("/").split("/")[-1]
            files = [{"filename": f"{package}-0.13.0-py3-none-any.whl", "url": "/f", "hashes": {},
                      "upload-time": "2027-01-20T10:00:00Z"}]  # fmt: skip
            body = json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/simple/"


def _times(fn: Any, repeat: int = 3) -> tuple[float, float, Any]:
    """(best, median) seconds of ``repeat`` runs, and the last run's result."""
    seconds, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - t)
    return min(seconds), statistics.median(seconds), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=100_000)
    parser.add_argument("--url", help="a database URL (default: SQLite in a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/registry.db"
        reg = jaxport.Registry(url, blobs=f"{tmp}/blobs", upgrade=True)
        t = time.perf_counter()
        prefill(reg, args.variants)
        print(f"{args.variants:,} variant rows written in {time.perf_counter() - t:.1f} s "
              f"({reg._backend.engine.dialect.name})")  # fmt: skip
        print(load_average())
        engine = reg._backend.engine
        base = capabilities()  # imports jax once; the pass itself imports nothing

        def select() -> int:
            with engine.connect() as conn:
                return len(conn.execute(facts_select()).all())

        s_best, s_median, count = _times(select)
        p_best, p_median, (summary, jobs) = _times(
            lambda: _static_pass(engine, base, _RELEASE, time.time())
        )
        server, index = serve_index()
        w_best, w_median, report = _times(lambda: reg.watch_jax(index_url=index, dry_run=True))
        server.shutdown()
        print(f"select: {count:,} live rows, best {s_best:.2f} s (median {s_median:.2f} s)")
        print(f"pass:   best {p_best:.2f} s (median {p_median:.2f} s), "
              f"{p_best / s_best:.2f}x the select")  # fmt: skip
        print(f"watch --dry-run (index on 127.0.0.1, capabilities, pass): best {w_best:.2f} s "
              f"(median {w_median:.2f} s)")  # fmt: skip
        print(f"verdicts: ok {summary.ok}, expire {summary.expires}, refused {summary.refused}, "
              f"rescue {summary.rescue}; {len(jobs):,} full audit jobs would be enqueued; "
              f"window end dates {len(summary.expiring)}")  # fmt: skip
        assert report.releases[0].variants == count
        print(f"target (issue 26): pass < 30 s for 100,000 variants: "
              f"{'met' if p_best < 30 else 'NOT met'}")  # fmt: skip
        print(load_average())
        reg.close()


if __name__ == "__main__":
    main()
