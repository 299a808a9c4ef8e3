"""A fleet rescue of one model archive: the child's memory against the model's size, and what
the registry stores.

    python benchmarks/bench_rescue_model.py [--gib 0.5] [--tensor-mib 64]

A model of ``--gib`` GiB (float32 tensors of ``--tensor-mib`` MiB, each of other values; two
methods) "written by jax 0.8.0" is pushed into a SQLite registry with a local blob directory,
then rescued (``Registry.rescue``) with this interpreter as the managed environment, once with
golden examples and once without (the own check runs the source too). Printed:

- the re-serialization alone (``_reexport_model_child.rewrite`` in a fresh process: the
  skeleton read, each tensor section copied a slice at a time): its peak RSS (``VmHWM``) less
  its RSS before, against the archive's size;
- each rescue's child (through a wrapper interpreter, so that ``ru_maxrss`` is the child's
  own): its peak RSS, against the archive's size (the check runs every method, so it holds
  the parameters as jax buffers);
- the bytes the blob store grew by for the rescued version, against the archive's size, and
  the wall time of the rescue against the push's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.export import _compat

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _machine import load_average

MIB = 1 << 20
DATE = "2026-12-01"


def _model(gib: float, tensor_mib: int) -> jaxport.Model:
    n = max(1, round(gib * 1024 / tensor_mib))
    side = tensor_mib * MIB // 4
    params = {f"w{i:03d}": np.full((side,), float(i), np.float32) for i in range(n)}
    spec = [jax.ShapeDtypeStruct((4,), jnp.float32)]
    fns = {
        "apply": lambda p, x: x * sum(w[:4] for w in p.values()),
        "head": lambda p, x: jnp.sin(x) + p["w000"][:4],
    }
    return jaxport.Model(params, fns, {name: spec for name in fns})


def _written_by_080(model: jaxport.Model, path: Path) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_compat, "jax_versions", lambda: ("0.8.0", "0.8.0"))
        model.save(path)


def _store_bytes(blobs: Path) -> int:
    return sum(p.stat().st_size for p in blobs.rglob("*") if p.is_file())


REWRITE = """
import sys
from pathlib import Path
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
import jax
from jaxport._reexport_model_child import rewrite
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
rewrite(Path(sys.argv[1]), Path(sys.argv[2]), [], {"bench": "1"})
print(status("VmHWM") - before)
"""

WRAPPER = """#!{python}
import resource, subprocess, sys
rc = subprocess.call([{python!r}, *sys.argv[1:]])
with open({out!r}, "a") as f:
    f.write(f"{{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}}\\n")
sys.exit(rc)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=0.5)
    parser.add_argument("--tensor-mib", type=int, default=64)
    args = parser.parse_args()
    print(f"load average {load_average()}; jax {jax.__version__}")
    with tempfile.TemporaryDirectory(prefix="bench-rescue-model-") as tmp:
        work = Path(tmp)
        model = _model(args.gib, args.tensor_mib)
        src = work / "model.jaxport"
        _written_by_080(model, src)
        size = src.stat().st_size
        print(f"model: {len(model.tensors)} tensors, archive {size / MIB:.0f} MiB")

        out = work / "rewritten.jaxport"
        code = textwrap.dedent(REWRITE)
        said = subprocess.run([sys.executable, "-c", code, str(src), str(out)],
                              capture_output=True, text=True, check=True)  # fmt: skip
        peak = int(said.stdout.split()[-1])
        print(f"re-serialization alone: peak RSS +{peak / MIB:.1f} MiB for a "
              f"{size / MIB:.0f} MiB archive ({peak / size:.3f}x)")  # fmt: skip

        rss_file = work / "child-rss.txt"
        wrapper = work / "python"
        wrapper.write_text(WRAPPER.format(python=sys.executable, out=str(rss_file)))
        wrapper.chmod(0o755)
        x = np.linspace(-1, 1, 4, dtype=np.float32)
        methods = model.methods.items()
        golden = {n: [jaxport.Example((x,), {}, np.asarray(m(x)))] for n, m in methods}
        for label, examples in (("goldens", golden), ("own check", None)):
            blobs = work / f"blobs-{label[:3]}"
            with jaxport.Registry(f"sqlite:///{work / label[:3]}.db", blobs=blobs) as reg:
                start = time.perf_counter()
                reg.push(src, "mdl", examples=examples)
                pushed = time.perf_counter() - start
                stored = _store_bytes(blobs)
                start = time.perf_counter()
                report = reg.rescue(DATE, python=str(wrapper), timeout=3600)
                rescued = time.perf_counter() - start
                assert report.refusals == (), report.refusals
                grew = _store_bytes(blobs) - stored
            child = int(rss_file.read_text().split()[-1])
            print(f"rescue ({label}): child peak RSS {child / MIB:.0f} MiB "
                  f"({child / size:.2f}x the archive); store grew {grew / 1024:.1f} KiB "
                  f"({grew / size:.5f}x); {rescued:.1f} s, push {pushed:.1f} s "
                  f"({rescued / pushed:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
