"""Model benchmark: jaxport model archives against safetensors and Orbax, in one run.

    python benchmarks/bench_model.py [--size-mb 1024] [--tensors 16] [--repeat 5]

The parameters: ``--tensors`` float32 tensors of ``--size-mb / --tensors`` MB each, and a small
first tensor (16 floats) read alone for "first tensor". jaxport stores them as a model with one
trivial method (exported once, before timing). Each side writes to and reads from the same
temporary directory; nothing is dropped from the page cache: every file is read back right
after it was written, so all three read from a warm cache (the sizes fit in memory).

Measured in ``--repeat`` rounds after one warm-up round, the sides taking turns in each
round (saves each after its file is removed and every dirty page written out, untimed):
- save: ``Model.save`` (writes the tensors while threads hash them, hashes the rest while the
  disk writes them (fdatasync), writes the header, fsync, atomic rename) vs safetensors
  ``save_file`` (0.8: a temporary file renamed over the target, no digests, no fsync) vs Orbax
  ``PyTreeCheckpointer().save`` (a new directory each time; fsyncs), when installed.
- save vs safetensors + fsync: ``save_file`` then an fsync of the file, the durability
  ``Model.save`` gives.
- sha256 alone (against safetensors + fsync): every tensor's sha256 in threads, nothing
  written: what any writer of the format computes, the floor of a save that records digests
  on this machine.
- save after update_params (against safetensors + fsync): a model loaded from a file (every
  tensor verified) with one of its 16 big tensors replaced; its 15 verified tensors are not
  hashed again.
- load: ``load_model(p).params`` (every tensor's sha256 checked in threads; arrays are views of
  the map) vs safetensors ``load_file`` (copies, checks nothing) vs Orbax ``restore`` as numpy
  arrays.
- first tensor: ``load_model(p).tensor(path)`` of the small tensor (header, methods and one
  tensor read) vs safetensors ``safe_open(p, "np").get_tensor(key)``, and vs that plus
  ``hashlib.sha256`` of the tensor's bytes (the check jaxport makes before use: like with like).

Prints the best and the median of each, the ratios jaxport / peer of both (the machine is
shared and noisy: a ratio holds, a time does not) and the CPU seconds each side used (all its
threads: what counts when other work takes the cores), after a line with the load average and
the machine's memcpy, zstd, sha256 and blake3 throughput measured in the same run.
Targets (issue 18): save <= 1.0x safetensors + fsync, load with every digest checked <= 0.5x
safetensors' load, at 1 GB.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import jaxport

sys.path.insert(0, str(Path(__file__).parent))
from _machine import best_and_median, describe, interleaved, load_average

FIRST = "a_first"  # sorts first: the first tensor of the archive and of the safetensors file
Times = list[float]


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
        import orbax.checkpoint as ocp

        self.tmp, self.params, self.count = tmp, params, 0
        self.checkpointer = ocp.PyTreeCheckpointer()
        self.restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), params)

    @property
    def directory(self) -> Path:
        return self.tmp / f"orbax_{self.count}"

    def next_directory(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.count += 1
        os.sync()

    def save(self) -> None:
        self.checkpointer.save(self.directory, self.params)

    def restore(self) -> Any:
        return self.checkpointer.restore(self.directory, restore_args=self.restore_args)


def _orbax(tmp: Path, params: dict[str, np.ndarray]) -> OrbaxSide | None:
    try:
        return OrbaxSide(tmp, params)
    except ImportError:  # orbax-checkpoint is in the dev extra, not a dependency
        return None


def bench(params: dict[str, np.ndarray], repeat: int, tmp: Path) -> list[tuple[str, ...]]:
    model = make_model(params)
    ours, theirs = tmp / "model.jaxport", tmp / "model.safetensors"
    orbax = _orbax(tmp, params)
    path = f"[{FIRST!r}]"
    updated = _updated(model, tmp / "base.jaxport")
    nothing: Callable[[], None] = lambda: None  # noqa: E731

    def first_safetensors() -> np.ndarray:
        with safe_open(theirs, "np") as f:
            return f.get_tensor(FIRST)  # type: ignore[no-any-return]

    def first_safetensors_sha256() -> np.ndarray:
        with safe_open(theirs, "np") as f:
            tensor: np.ndarray = f.get_tensor(FIRST)
        hashlib.sha256(tensor).digest()
        return tensor

    save_sides = {
        "ours": (lambda: model.save(ours), _fresh(ours)),
        "st": (lambda: save_file(params, theirs), _fresh(theirs)),
        "st_fsync": (lambda: _save_file_fsync(params, theirs), _fresh(theirs)),
        "sha256": (lambda: _digests_only(params), nothing),
        "resave": (lambda: updated.save(tmp / "u.jaxport"), _fresh(tmp / "u.jaxport")),
    }
    load_sides = {
        "ours": (lambda: jaxport.load_model(ours).params, nothing),
        "st": (lambda: load_file(theirs), nothing),
    }
    if orbax is not None:
        save_sides["orbax"] = (orbax.save, orbax.next_directory)
        load_sides["orbax"] = (orbax.restore, nothing)
    cpu_save: dict[str, Times] = {}
    cpu_load: dict[str, Times] = {}
    saves = interleaved(save_sides, repeat, cpu_save)
    loads = interleaved(load_sides, repeat, cpu_load)
    firsts = interleaved(
        {
            "ours": (lambda: jaxport.load_model(ours).tensor(path), nothing),
            "st": (first_safetensors, nothing),
            "st_sha256": (first_safetensors_sha256, nothing),
        },
        max(repeat, 20),
    )
    restored = [orbax.restore()] if orbax is not None else []
    _check_same(params, jaxport.load_model(ours).params, load_file(theirs), *restored)
    sizes = [ours.stat().st_size, theirs.stat().st_size]
    sizes.append(_tree_size(orbax.directory) if orbax is not None else 0)
    mb = [[s / 2**20] for s in sizes]
    ms = [[t * 1e3 for t in firsts[k]] for k in ("ours", "st", "st_sha256")]
    return [
        _row("size (MB)", mb[0], mb[1], mb[2] if orbax else None, fmt="{:.1f}"),
        _row("save (s)", saves["ours"], saves["st"], saves.get("orbax"), cpu=(cpu_save, "st")),
        _row(
            "save; safetensors + fsync (s)",
            saves["ours"],
            saves["st_fsync"],
            None,
            cpu=(cpu_save, "st_fsync"),
        ),
        _row(
            "sha256 of every tensor alone (s)",
            saves["sha256"],
            saves["st_fsync"],
            None,
            cpu=(cpu_save, "st_fsync"),
            ours_key="sha256",
        ),
        _row(
            "save after update_params of 1 tensor (s)",
            saves["resave"],
            saves["st_fsync"],
            None,
            cpu=(cpu_save, "st_fsync"),
            ours_key="resave",
        ),
        _row(
            "load, jaxport verifies every sha256 (s)",
            loads["ours"],
            loads["st"],
            loads.get("orbax"),
            cpu=(cpu_load, "st"),
        ),
        _row("first tensor, mapped (ms)", ms[0], ms[1], None, fmt="{:.3f}"),
        _row("first tensor; safetensors + its sha256 (ms)", ms[0], ms[2], None, fmt="{:.3f}"),
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
    measure: str,
    ours: Times,
    st: Times,
    orbax: Times | None,
    *,
    fmt: str = "{:.3f}",
    cpu: tuple[dict[str, Times], str] | None = None,
    ours_key: str = "ours",
) -> tuple[str, ...]:
    """A table row: best / median of the three, jaxport / safetensors of the bests (and of
    the medians), jaxport / Orbax of the bests, and from ``cpu`` (CPU seconds by side, and
    the safetensors side's key) the median CPU seconds of jaxport and safetensors."""
    (ob, om), (sb, sm) = best_and_median(ours), best_and_median(st)
    cells = [f"{fmt.format(b)} / {fmt.format(m)}" for b, m in ((ob, om), (sb, sm))]
    cells.append(
        "-" if orbax is None else " / ".join(fmt.format(v) for v in best_and_median(orbax))
    )
    ratio_orbax = f"{ob / min(orbax):.2f}x" if orbax is not None else "-"
    used = "-"
    if cpu is not None:
        times, peer = cpu
        o, t = best_and_median(times[ours_key])[1], best_and_median(times[peer])[1]
        used = f"{o:.3f} / {t:.3f} ({o / t:.2f}x)"
    return (measure, *cells, f"**{ob / sb:.2f}x** ({om / sm:.2f}x)", ratio_orbax, used)


def _check_same(params: dict[str, np.ndarray], *loaded: dict[str, np.ndarray]) -> None:
    for other in loaded:
        assert sorted(other) == sorted(params)
        for key, value in params.items():
            np.testing.assert_array_equal(other[key], value)


def _tree_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    params = make_params(args.size_mb, args.tensors)
    nbytes = sum(a.nbytes for a in params.values())
    print(
        f"jax {jax.__version__}, jaxport {jaxport.__version__}, "
        f"safetensors {_version('safetensors')}, orbax-checkpoint {_version('orbax-checkpoint')}; "
        f"{args.tensors} x {nbytes / args.tensors / 2**20:.0f} MB float32 + 1 small tensor, "
        f"repeat={args.repeat}, page cache warm (nothing dropped)"
    )
    print(f"start: {load_average()}")
    print(describe())
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        rows = bench(params, args.repeat, Path(tmp))
    print(f"end: {load_average()}")
    print(
        "| measure | jaxport (best / median) | safetensors | Orbax "
        "| jaxport / safetensors, bests (medians) | jaxport / Orbax, bests "
        "| CPU s, jaxport / safetensors (medians) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    main()
