"""Bundle and mirror benchmark (issue 28): a model's bundle export and import against the
registry's own whole-archive write and push of the same model, and a fine-tune's mirror in
bytes, in one run.

    python benchmarks/bench_bundle.py [--size-mb 256] [--tensors 16] [--repeat 3]

The model: ``--tensors`` float32 tensors of ``--size-mb / --tensors`` MB each, pushed once to a
SQLite registry (blobs in a temporary directory) before timing. Measured in ``--repeat``
rounds, the sides taking turns (who goes first alternating):

- export: ``bundle_export(reg, ["m:1"], tar)`` (the parts streamed from the blob store into an
  image layout, then the tar written) vs ``reg.pull_file("m:1", path)`` (the archive put
  together from its parts, each verified, written atomically): the same bytes read, one
  more copy written by the bundle.
- import: ``bundle_import(fresh, tar)`` (the tar read member by member, every blob verified,
  the archive assembled, verified, then pushed) vs ``fresh.push(path)`` of the archive file
  (validated in full and stored in parts), each into an empty registry.

Then a fine-tune (one tensor changed) is mirrored registry -> registry and registry -> image
layout after the base version: the bytes sent, as a fraction of the archive (``CopyReport``).
Ratios are per round (bundle / peer); the machine may be shared: compare ratios, not times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxport
from jaxport.registry import Registry, bundle_export, bundle_import, mirror


def _model(size_mb: int, tensors: int, seed: int) -> jaxport.Model:
    rows = size_mb * (1 << 20) // tensors // 4 // 256
    rng = np.random.default_rng(0)
    params = {f"t{i:02d}": rng.standard_normal((rows, 256), np.float32) for i in range(tensors)}
    params["t00"] = params["t00"] + np.float32(seed)
    spec = [jax.ShapeDtypeStruct((2, 256), jnp.float32)]
    return jaxport.Model(params, lambda p, x: x @ p["t00"][:256], spec)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-bundle-", dir=os.environ.get("BENCH_DIR")))
    reg = Registry(f"sqlite:///{root / 'src.db'}", blobs=root / "src-blobs")
    reg.push(_model(args.size_mb, args.tensors, 0), "m")
    size = reg.get("m:1").variants[0].size_bytes
    print(f"model: {size / 2**20:.0f} MiB in {args.tensors} tensors; {args.repeat} rounds")
    ratios: dict[str, list[float]] = {"export": [], "import": []}
    for r in range(args.repeat):
        tar, path = root / f"b{r}.tar", root / f"a{r}.jaxport"
        sides = [partial(bundle_export, reg, ["m:1"], tar), partial(reg.pull_file, "m:1", path)]
        order = [0, 1] if r % 2 == 0 else [1, 0]
        t = {i: _timed(sides[i]) for i in order}
        ratios["export"].append(t[0] / t[1])
        a = Registry(f"sqlite:///{root / f'i{r}.db'}", blobs=root / f"i{r}-blobs")
        b = Registry(f"sqlite:///{root / f'p{r}.db'}", blobs=root / f"p{r}-blobs")
        sides = [partial(bundle_import, a, tar), partial(b.push, path, "m")]
        t = {i: _timed(sides[i]) for i in order}
        ratios["import"].append(t[0] / t[1])
        print(f"round {r}: export {ratios['export'][-1]:.2f}x pull_file, "
              f"import {ratios['import'][-1]:.2f}x push")  # fmt: skip
    for k, v in ratios.items():
        print(f"{k}: median {statistics.median(v):.2f}x (min {min(v):.2f}, max {max(v):.2f})")
    dst = Registry(f"sqlite:///{root / 'dst.db'}", blobs=root / "dst-blobs")
    mirror(reg, dst)
    layout = f"oci:{root / 'layout'}"
    mirror(reg, layout)
    reg.push(_model(args.size_mb, args.tensors, 1), "m")  # one tensor changed
    for where, to in (("registry", dst), ("image layout", layout)):
        sent = mirror(reg, to).bytes
        print(f"fine-tune mirror to a {where}: {sent} bytes, {100 * sent / size:.2f} % of the "
              "archive")  # fmt: skip


if __name__ == "__main__":
    main()
