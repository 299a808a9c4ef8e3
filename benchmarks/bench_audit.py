"""Audits at scale: static audits of 10,000 variants, re-audits with nothing new, and compile
audits on 2 workers against 1, in one run on SQLite.

    python benchmarks/bench_audit.py [--variants 10000] [--compile-variants 24]

- static: ``--variants`` variants, each its own archive digest (rows bulk-inserted beside one
  pushed template: a static audit reads the recorded facts, never the bytes), platforms,
  calling conventions and custom-call targets mixed; ``Registry.audit(level="static")``
  in-process, then the command ``jaxport audit static --json`` in a new process (its
  interpreter start, imports and the JSON of every finding included).
- re-audit: the same two again, every finding stored (nothing is measured, no worker starts).
- compile: ``--compile-variants`` distinct small functions pushed and audited at the full
  level (load, compile), ``workers=1`` then ``workers=2`` (``force=True``; worker start-up
  included: each worker imports jax once).

Targets (issue 16): static audit of 10,000 variants < 10 s; re-audit with nothing new < 2 s;
``-j 2`` >= 1.7x serial on the 2-core machine. Prints wall and CPU seconds (this process and
its children) and the load average before and after: on a shared machine the CPU seconds
say what the work costs, the wall seconds what the load left of the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.export
import jax.numpy as jnp
from sqlalchemy import insert

import jaxport
from jaxport.registry import _db
from jaxport.registry._models import BlobRow, NameRow, VariantPlatformRow, VariantRow, VersionRow

_PLATFORMS = [("cpu",), ("cuda",), ("tpu",), ("cpu", "cuda", "tpu")]
_TARGETS = ["[]", '["lapack_sgeqrf_ffi"]', '["lapack_sgeqrf"]', '["my_kernel"]']
_JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def prefill(reg: jaxport.Registry, n: int) -> None:
    """Bulk-inserts ``n`` variants (10 versions per name), each with a digest of its own."""
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
             for i in range(n // 10)],
        )  # fmt: skip
        conn.execute(
            insert(VersionRow),
            [{"id": 1000 + i, "model_id": 1000 + i // 10, "version": i % 10 + 1,
              "created_at": now, "metadata_json": "{}"} for i in range(n)],
        )  # fmt: skip
        rows, platforms = [], []
        for i in range(n):
            plats = _PLATFORMS[i % len(_PLATFORMS)]
            cc = template.calling_convention_version - (1 if i % 97 == 0 else 0)
            rows.append(
                {
                    "id": 1000 + i, "version_id": 1000 + i, "model_id": 1000 + i // 10,
                    "digest": digests[i], "fun_name": "f",
                    "platforms": ",".join(plats), "nr_devices": 1, "sharded": False,
                    "calling_convention_version": cc, "format_version": 3,
                    "jax_version": template.jax_version, "jaxlib_version": template.jaxlib_version,
                    "vjp_order": 0, "shape_polymorphic": False,
                    "custom_call_targets": _TARGETS[i % 7 % len(_TARGETS)],
                    "size_bytes": 1, "in_signature": template.in_signature,
                    "out_signature": template.out_signature, "created_at": now,
                    "metadata_json": "{}",
                }
            )  # fmt: skip
            platforms += [{"variant_id": 1000 + i, "platform": p} for p in plats]
        conn.execute(insert(VariantRow), rows)
        conn.execute(insert(VariantPlatformRow), platforms)


_CPU: dict[str, float] = {}  # label -> CPU seconds (this process and its children)


def _cpu() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(fn, label=""):
    t, c = time.perf_counter(), _cpu()
    out = fn()
    _CPU[label] = _cpu() - c
    return time.perf_counter() - t, out


def _cli(env: dict[str, str], label: str, *args: str) -> float:
    t, c = time.perf_counter(), _cpu()
    subprocess.run([_JAXPORT, *args], env=env, stdout=subprocess.DEVNULL, check=False)
    _CPU[label] = _cpu() - c
    return time.perf_counter() - t


def bench_static(tmp: Path, n: int) -> dict[str, float]:
    url, blobs = f"sqlite:///{tmp / 'static.db'}", tmp / "static-blobs"
    reg = jaxport.Registry(url, blobs=blobs)
    prefill(reg, n)
    first, findings = _timed(lambda: reg.audit(level="static"), "static, in-process (s)")
    again, reused = _timed(lambda: reg.audit(level="static"), "re-audit, in-process (s)")
    assert all(f.reused for f in reused) and len(reused) == len(findings)
    statuses: dict[str, int] = {}
    for f in findings:
        statuses[f.status] = statuses.get(f.status, 0) + 1
    print(f"static: {len(findings):,} findings ({statuses})")
    reg.close()
    env = {**os.environ, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": str(blobs)}
    cli_again = _cli(env, "re-audit, CLI (s)", "audit", "static", "--json")
    cli_forced = _cli(
        env, "static --force, CLI (s)", "audit", "static", "--force", "--json", "--no-store"
    )
    return {
        "static, in-process (s)": first,
        "re-audit, in-process (s)": again,
        "static --force, CLI (s)": cli_forced,
        "re-audit, CLI (s)": cli_again,
        "findings": float(len(findings)),
    }


def bench_compile(tmp: Path, k: int) -> dict[str, float]:
    reg = jaxport.Registry(f"sqlite:///{tmp / 'compile.db'}", blobs=tmp / "compile-blobs")
    for i in range(k):
        fun = [jnp.sin, jnp.cos, jnp.tanh, jnp.exp][i % 4]
        exp = jax.export.export(jax.jit(lambda x, s=float(i), f=fun: f(x) * s + x @ x.T))(
            jax.ShapeDtypeStruct((16, 16), jnp.float32)
        )
        reg.push(exp, f"f{i}")
    serial, a = _timed(lambda: reg.audit(force=True, store=False, workers=1), "serial (s)")
    parallel, b = _timed(lambda: reg.audit(force=True, store=False, workers=2), "-j 2 (s)")
    assert [(f.status, f.reason) for f in a] == [(f.status, f.reason) for f in b]
    per = sum(f.seconds for f in a) / len(a)
    reg.close()
    return {"serial (s)": serial, "-j 2 (s)": parallel, "per variant in a worker (s)": per}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", type=int, default=10_000)
    parser.add_argument("--compile-variants", type=int, default=24)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        static = bench_static(Path(tmp), args.variants)
        print(f"  {'measure':32s} {'wall':>10s} {'CPU':>8s}")
        for k, v in static.items():
            print(f"  {k:32s} {v:10.3f} {_CPU.get(k, float('nan')):8.3f}")
        ratio = static["re-audit, in-process (s)"] / static["static, in-process (s)"]
        print(f"  ratio re-audit / static (in-process): {ratio:.3f}")
        compiled = bench_compile(Path(tmp), args.compile_variants)
        for k, v in compiled.items():
            print(f"  {k:32s} {v:10.3f} {_CPU.get(k, float('nan')):8.3f}")
        print(f"  speed-up -j 2 / serial: {compiled['serial (s)'] / compiled['-j 2 (s)']:.2f}x")
    print(f"load after: {os.getloadavg()}")
    json.dump({"static": static, "compile": compiled, "cpu": _CPU}, sys.stderr)


if __name__ == "__main__":
    main()
