"""Peak memory of ``Registry.pull_file`` through a registry server, against the archive's size.

    python benchmarks/bench_pull_file_memory.py [--gib 4] [--tensor-mib 64] [--peer]

A model of ``--gib`` GiB (tensors of ``--tensor-mib`` MiB, each of other bytes) is pushed
straight into a SQLite registry with a local blob directory, which ``jaxport serve`` then
serves on 127.0.0.1. A fresh Python process (no jax imported: the thin client) resolves the
name, then ``pull_file``s it; its peak RSS (``VmHWM``, reset just before) less its RSS
before the pull is the figure, printed against the archive's size and against issue 25's bound
(< 200 MB + the largest tensor). ``--peer`` measures ``pull_bytes`` (the whole archive in
memory) the same way, in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxport

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _machine import load_average
from _server import admin_token, serving

MIB = 1 << 20

#: The process's peak RSS, measured by Linux for this process's memory alone (``VmHWM``,
#: reset by ``clear_refs`` 5): ``ru_maxrss`` would start at the forking parent's size.
PEAK_RSS = """
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS")
""".replace("\n", "\n        ")


def _model(gib: float, tensor_mib: int) -> jaxport.Model:
    n = max(1, round(gib * 1024 / tensor_mib))
    side = tensor_mib * MIB // 4
    params = {f"w{i:03d}": np.full((side,), float(i), np.float32) for i in range(n)}
    spec = [jax.ShapeDtypeStruct((side,), jnp.float32)]
    return jaxport.Model(params, lambda p, x: x * p["w000"], spec)


def _measure(url: str, token: str, target: Path, call: str) -> dict[str, float]:
    """Peak RSS growth (bytes) and seconds of ``call`` in a fresh process."""
    script = textwrap.dedent(f"""
        import json, sys, time
        import jaxport
        {PEAK_RSS}
        reg = jaxport.Registry({url!r}, token={token!r})
        reg.resolve("big", platform="cpu")
        before = reset_peak()
        t = time.perf_counter()
        {call}
        seconds = time.perf_counter() - t
        after = status("VmHWM")
        print(json.dumps({{"grew": after - before, "peak": after, "seconds": seconds,
                          "jax": "jax" in sys.modules}}))
    """).replace("TARGET", repr(str(target)))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="/"
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--tensor-mib", type=int, default=64)
    parser.add_argument("--peer", action="store_true", help="also measure pull_bytes")
    args = parser.parse_args()
    print(load_average())
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        root = Path(tmp)
        db_url, blobs = f"sqlite:///{root / 'registry.db'}", str(root / "blobs")
        model = _model(args.gib, args.tensor_mib)
        t = time.perf_counter()
        with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
            pushed = reg.push(model, "big")
        size = pushed.variants[0].size_bytes
        seconds = time.perf_counter() - t
        n = len(model.tensors)
        print(f"archive {size / MIB:,.0f} MiB ({n} tensors of {args.tensor_mib} MiB), pushed "
              f"direct in {seconds:.1f} s")  # fmt: skip
        del model
        token = admin_token(db_url, blobs)
        target = root / "pulled.jxp"
        with serving(db_url, blobs, root / "serve.log") as server:
            got = _measure(
                server.url, token, target, 'reg.pull_file("big", TARGET, platform="cpu")'
            )
            digest = hashlib.sha256()
            with target.open("rb") as f:
                while chunk := f.read(16 * MIB):
                    digest.update(chunk)
            assert digest.hexdigest() == pushed.variants[0].digest, "the file differs"
            target.unlink()
            bound = 200e6 + args.tensor_mib * MIB
            print(
                f"pull_file: peak RSS grew {got['grew'] / MIB:,.1f} MiB (process peak "
                f"{got['peak'] / MIB:,.0f} MiB) for {size / MIB:,.0f} MiB: "
                f"{got['grew'] / size:.4f}x the archive; bound 200 MB + largest tensor = "
                f"{bound / MIB:,.0f} MiB: {'met' if got['grew'] < bound else 'NOT met'}; "
                f"{got['seconds']:.1f} s ({size / got['seconds'] / 1e6:,.0f} MB/s); "
                f"jax imported: {got['jax']}"
            )
            if args.peer:
                peer = _measure(server.url, token, target, 'reg.pull_bytes("big", platform="cpu")')
                print(
                    f"pull_bytes (peer, whole in memory): peak RSS grew "
                    f"{peer['grew'] / MIB:,.1f} MiB: {peer['grew'] / size:.3f}x the archive; "
                    f"pull_file / pull_bytes peak growth: {got['grew'] / peer['grew']:.4f}"
                )


if __name__ == "__main__":
    main()
