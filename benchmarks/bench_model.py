"""Model benchmark: jaxport model archives against safetensors and Orbax, in one run.

    python benchmarks/bench_model.py [--size-mb 1024] [--tensors 16] [--repeat 3]

The parameters: ``--tensors`` float32 tensors of ``--size-mb / --tensors`` MB each, and a small
first tensor (16 floats) read alone for "first tensor". jaxport stores them as a model with one
trivial method (exported once, before timing). Each side writes to and reads from the same
temporary directory; nothing is dropped from the page cache: every file is read back right
after it was written, so all three read from a warm cache (the sizes fit in memory).

Measured, median of ``--repeat`` rounds after one warm-up round; in a round the saves take
turns, each after its file is removed and every dirty page written out (untimed):
- save: ``Model.save`` (writes the tensors, hashes them in threads while the disk writes them
  (fdatasync), writes the header, fsync, atomic rename) vs safetensors ``save_file`` (0.8: a
  temporary file renamed over the target, no digests, no fsync) vs Orbax
  ``PyTreeCheckpointer().save`` (a new directory each time; fsyncs).
- save vs safetensors + fsync: ``save_file`` then an fsync of the file, the durability
  ``Model.save`` gives.
- sha256 alone: every tensor's sha256 in threads, nothing written: what any writer of the
  format computes, the floor of a save that records digests on this machine.
- save after update_params: a model loaded from a file (every tensor verified) with one of its
  16 big tensors replaced; its 15 verified tensors are not hashed again.
- load: ``load_model(p).params`` (every tensor's sha256 checked; arrays are views of the map) vs
  safetensors ``load_file`` (copies, checks nothing) vs Orbax ``restore`` as numpy arrays.
- first tensor: ``load_model(p).tensor(path)`` of the small tensor (header, methods and one
  tensor read) vs safetensors ``safe_open(p, "np").get_tensor(key)``.

Prints ratios jaxport / peer: the machine is noisy, a ratio holds, a time does not.
Targets (issue #10): save <= 1.0x safetensors, load with digests <= 1.0x safetensors' load,
first tensor < 10 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import jaxport

FIRST = "a_first"  # sorts first: the first tensor of the archive and of the safetensors file


def _median_seconds(
    fn: Callable[[], object], repeat: int, before: Callable[[], object] = lambda: None
) -> float:
    return _interleaved({"": (fn, before)}, repeat)[""]


def _interleaved(
    sides: dict[str, tuple[Callable[[], object], Callable[[], object]]], repeat: int
) -> dict[str, float]:
    """Median seconds of each side's ``fn``, the sides taking turns (one warm-up round, then
    ``repeat`` rounds): each run follows its ``before`` (untimed), as do the others', so a
    slow moment of the machine falls on every side alike."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(repeat + 1):
        for name, (fn, before) in sides.items():
            before()
            t = time.perf_counter()
            fn()
            if round_:
                times[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) for name, v in times.items()}


def _fresh(path: Path) -> Callable[[], None]:
    """Before a save (untimed): removes the file it writes, so no save pays for freeing the
    last one's pages, and writes every dirty page out, so a save that does not fsync leaves
    no write-back for the next measured save to compete with."""

    def before() -> None:
        path.unlink(missing_ok=True)
        os.sync()

    return before


def make_params(size_mb: int, tensors: int) -> dict[str, np.ndarray]:
    rows = size_mb * 2**20 // tensors // (4 * 1024)
    rng = np.random.default_rng(0)
    params = {FIRST: rng.standard_normal(16).astype(np.float32)}
    for i in range(tensors):
        params[f"layer_{i:02d}"] = rng.standard_normal((rows, 1024), dtype=np.float32)
    return params


def make_model(params: dict[str, np.ndarray]) -> jaxport.Model:
    def apply(p: Any, x: Any) -> Any:
        return x + p[FIRST]

    return jaxport.Model(params, apply, [jax.ShapeDtypeStruct((16,), jnp.float32)])


class OrbaxSide:
    """Orbax save to a new directory each time (the old one removed, untimed); restore of the
    last one as numpy arrays."""

    def __init__(self, tmp: Path, params: dict[str, np.ndarray]):
        self.tmp, self.params, self.count = tmp, params, 0
        self.checkpointer = ocp.PyTreeCheckpointer()
        self.restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), params)

    @property
    def directory(self) -> Path:
        return self.tmp / f"orbax_{self.count}"

    def next_directory(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.count += 1

    def save(self) -> None:
        self.checkpointer.save(self.directory, self.params)

    def restore(self) -> Any:
        return self.checkpointer.restore(self.directory, restore_args=self.restore_args)


def bench(params: dict[str, np.ndarray], repeat: int, tmp: Path) -> list[tuple[str, ...]]:
    model = make_model(params)
    ours, theirs = tmp / "model.jaxport", tmp / "model.safetensors"
    orbax = OrbaxSide(tmp, params)
    path = f"[{FIRST!r}]"
    updated = _updated(model, tmp / "base.jaxport")

    def first_safetensors() -> np.ndarray:
        with safe_open(theirs, "np") as f:
            return f.get_tensor(FIRST)  # type: ignore[no-any-return]

    saves = _interleaved(
        {
            "ours": (lambda: model.save(ours), _fresh(ours)),
            "st": (lambda: save_file(params, theirs), _fresh(theirs)),
            "st_fsync": (lambda: _save_file_fsync(params, theirs), _fresh(theirs)),
            "orbax": (orbax.save, lambda: (orbax.next_directory(), os.sync())),
            "sha256": (lambda: _digests_only(params), lambda: None),
            "resave": (lambda: updated.save(tmp / "u.jaxport"), _fresh(tmp / "u.jaxport")),
        },
        repeat,
    )
    l_ours = _median_seconds(lambda: jaxport.load_model(ours).params, repeat)
    l_st = _median_seconds(lambda: load_file(theirs), repeat)
    l_ob = _median_seconds(orbax.restore, repeat)
    f_ours = _median_seconds(lambda: jaxport.load_model(ours).tensor(path), max(repeat, 20))
    f_st = _median_seconds(first_safetensors, max(repeat, 20))
    _check_same(params, jaxport.load_model(ours).params, load_file(theirs), orbax.restore())
    sizes = [ours.stat().st_size, theirs.stat().st_size, _tree_size(orbax.directory)]

    mb = [s / 2**20 for s in sizes]
    return [
        _row("size (MB)", mb[0], mb[1], mb[2], "{:.1f}"),
        _row("save (s)", saves["ours"], saves["st"], saves["orbax"]),
        _row("save; safetensors + fsync (s)", saves["ours"], saves["st_fsync"], None),
        _row("sha256 of every tensor alone (s)", saves["sha256"], saves["st"], None),
        _row("save after update_params of 1 tensor (s)", saves["resave"], saves["st"], None),
        _row("load, jaxport verifies every sha256 (s)", l_ours, l_st, l_ob),
        _row("first tensor, mapped (ms)", f_ours * 1e3, f_st * 1e3, None, "{:.2f}"),
    ]


def _save_file_fsync(params: dict[str, np.ndarray], path: Path) -> None:
    """safetensors' save, then an fsync of the file: the durability ``Model.save`` gives."""
    save_file(params, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digests_only(params: dict[str, np.ndarray]) -> None:
    """What any writer of the format must compute: every tensor's sha256 (in threads)."""
    from jaxport.export import _tensors

    _tensors.tensor_digests([_tensors.tensor_bytes(a) for a in params.values()])


def _updated(model: jaxport.Model, path: Path) -> jaxport.Model:
    """``model`` saved to ``path``, loaded back (every tensor verified), with its first big
    layer replaced through ``update_params``: a fine-tuning step's model."""
    model.save(path)
    loaded = jaxport.load_model(path)
    new = dict(loaded.params)
    new["layer_00"] = new["layer_00"] + np.float32(1)
    return loaded.update_params(new)


def _row(
    measure: str, ours: float, st: float, orbax: float | None, fmt: str = "{:.3f}"
) -> tuple[str, ...]:
    """A table row: the three values, then jaxport / safetensors and jaxport / Orbax."""
    cells = [fmt.format(v) if v is not None else "-" for v in (ours, st, orbax)]
    ratio_orbax = f"{ours / orbax:.2f}x" if orbax is not None else "-"
    return (measure, *cells, f"**{ours / st:.2f}x**", ratio_orbax)


def _check_same(params: dict[str, np.ndarray], *loaded: dict[str, np.ndarray]) -> None:
    for other in loaded:
        assert sorted(other) == sorted(params)
        for key, value in params.items():
            np.testing.assert_array_equal(other[key], value)


def _tree_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    params = make_params(args.size_mb, args.tensors)
    nbytes = sum(a.nbytes for a in params.values())
    print(
        f"jax {jax.__version__}, jaxport {jaxport.__version__}, "
        f"safetensors {_version('safetensors')}, orbax-checkpoint {_version('orbax-checkpoint')}; "
        f"{args.tensors} x {nbytes / args.tensors / 2**20:.0f} MB float32 + 1 small tensor, "
        f"repeat={args.repeat}, {os.cpu_count()} CPUs, page cache warm (nothing dropped)"
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        rows = bench(params, args.repeat, Path(tmp))
    print("| measure | jaxport | safetensors | Orbax | jaxport / safetensors | jaxport / Orbax |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
