"""Model benchmark: jaxport model archives against safetensors and Orbax, in one run.

    python benchmarks/bench_model.py [--size-mb 1024] [--tensors 16] [--repeat 5]
        [--only save,load,first] [--no-orbax]

``BENCH_DIR`` picks the file system (the default temporary directory, or ``/dev/shm`` for
tmpfs, where fsync costs nothing and the save is all CPU).

The parameters: ``--tensors`` float32 tensors of ``--size-mb / --tensors`` MB each, and a small
first tensor (16 floats) read alone for "first tensor". jaxport stores them as a model with one
trivial method (exported once, before timing). Each side writes to and reads from the same
temporary directory; nothing is dropped from the page cache: every file is read back right
after it was written, so all three read from a warm cache (the sizes fit in memory).

Measured in ``--repeat`` rounds after one warm-up round, the sides taking turns in each
round (saves each after its file is removed and every dirty page written out, untimed):
- save: ``Model.save`` (one thread per core hashes and writes each tensor a megabyte at a
  time, an fdatasync every 64 MiB, the header written last, fsync, atomic rename) vs safetensors
  ``save_file`` (0.8: a temporary file renamed over the target, no digests, no fsync) vs Orbax
  ``PyTreeCheckpointer().save`` (a new directory each time; fsyncs), when installed.
- save vs safetensors + fsync: ``save_file`` then an fsync of the file, the durability
  ``Model.save`` gives.
- sha256 alone (against safetensors + fsync): every tensor's sha256 in threads, nothing
  written: what any writer of the format computes, the floor of a save that records digests
  on this machine.
- the floor on this machine's cores (against safetensors + fsync): the CPU seconds of
  safetensors + fsync and of sha256 alone, spread over every core with nothing else running:
  no save that writes what safetensors writes and hashes every tensor can be faster.
- save after update_params (against safetensors + fsync): a model loaded from a file (every
  tensor verified) with one of its 16 big tensors replaced; its 15 verified tensors are not
  hashed again.
- load: ``load_model(p).params`` (every tensor's sha256 checked in threads; arrays are views of
  the map) vs safetensors ``load_file`` (copies, checks nothing) vs Orbax ``restore`` as numpy
  arrays.
- first tensor: ``load_model(p).tensor(path)`` of the small tensor (header, methods and one
  tensor read) vs safetensors ``safe_open(p, "np").get_tensor(key)``, and vs that plus
  ``hashlib.sha256`` of the tensor's bytes (the check jaxport makes before use: like with like).
  Split in two: "open" (``load_model(p)``: the header's digest, every tensor's record, every
  method decoded and its module vetted, vs ``safe_open``'s JSON header) and "a tensor of an
  open file" (``.tensor(path)`` of a model just loaded vs ``get_tensor`` + sha256 on an open
  handle), for the small tensor and for ``layer_00`` (``--size-mb / --tensors`` MiB).

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


def bench(
    params: dict[str, np.ndarray], repeat: int, tmp: Path, only: set[str], with_orbax: bool
) -> list[tuple[str, ...]]:
    model = make_model(params)
    ours, theirs = tmp / "model.jaxport", tmp / "model.safetensors"
    orbax = _orbax(tmp, params) if with_orbax else None
    rows: list[tuple[str, ...]] = []
    if "save" in only:
        rows += _saves(model, params, repeat, tmp, orbax)
    model.save(ours)
    save_file(params, theirs)
    if orbax is not None and "save" not in only:
        orbax.save()
    if "load" in only:
        rows += _loads(ours, theirs, repeat, orbax)
    if "first" in only:
        rows += _firsts(ours, theirs, repeat)
    restored = [orbax.restore()] if orbax is not None else []
    _check_same(params, jaxport.load_model(ours).params, load_file(theirs), *restored)
    sizes = [ours.stat().st_size, theirs.stat().st_size]
    sizes.append(_tree_size(orbax.directory) if orbax is not None else 0)
    mb = [[s / 2**20] for s in sizes]
    return [_row("size (MB)", mb[0], mb[1], mb[2] if orbax else None, fmt="{:.1f}"), *rows]


def _saves(
    model: jaxport.Model,
    params: dict[str, np.ndarray],
    repeat: int,
    tmp: Path,
    orbax: OrbaxSide | None,
) -> list[tuple[str, ...]]:
    ours, theirs = tmp / "model.jaxport", tmp / "model.safetensors"
    updated = _updated(model, tmp / "base.jaxport")
    nothing: Callable[[], None] = lambda: None  # noqa: E731
    sides = {
        "ours": (lambda: model.save(ours), _fresh(ours)),
        "st": (lambda: save_file(params, theirs), _fresh(theirs)),
        "st_fsync": (lambda: _save_file_fsync(params, theirs), _fresh(theirs)),
        "sha256": (lambda: _digests_only(params), nothing),
        "resave": (lambda: updated.save(tmp / "u.jaxport"), _fresh(tmp / "u.jaxport")),
    }
    if orbax is not None:
        sides["orbax"] = (orbax.save, orbax.next_directory)
    cpu: dict[str, Times] = {}
    saves = interleaved(sides, repeat, cpu)
    cores = os.cpu_count() or 1
    saves["floor"] = [(a + b) / cores for a, b in zip(cpu["st_fsync"], cpu["sha256"], strict=True)]
    saves["floor"] = [max(f, t) for f, t in zip(saves["floor"], saves["st_fsync"], strict=True)]
    fsync = {"cpu": (cpu, "st_fsync")}
    return [
        _row("save (s)", saves["ours"], saves["st"], saves.get("orbax"), cpu=(cpu, "st")),
        _row("save; safetensors + fsync (s)", saves["ours"], saves["st_fsync"], None, **fsync),
        _row(
            "sha256 of every tensor alone (s)",
            saves["sha256"],
            saves["st_fsync"],
            None,
            ours_key="sha256",
            **fsync,
        ),
        _row(
            f"floor: safetensors + fsync and sha256, CPU s / {cores} cores (s)",
            saves["floor"],
            saves["st_fsync"],
            None,
        ),
        _row(
            "save after update_params of 1 tensor (s)",
            saves["resave"],
            saves["st_fsync"],
            None,
            ours_key="resave",
            **fsync,
        ),
    ]


def _loads(ours: Path, theirs: Path, repeat: int, orbax: OrbaxSide | None) -> list[tuple[str, ...]]:
    nothing: Callable[[], None] = lambda: None  # noqa: E731
    sides = {
        "ours": (lambda: jaxport.load_model(ours).params, nothing),
        "st": (lambda: load_file(theirs), nothing),
    }
    if orbax is not None:
        sides["orbax"] = (orbax.restore, nothing)
    cpu: dict[str, Times] = {}
    loads = interleaved(sides, repeat, cpu)
    return [
        _row(
            "load, jaxport verifies every sha256 (s)",
            loads["ours"],
            loads["st"],
            loads.get("orbax"),
            cpu=(cpu, "st"),
        )
    ]


class _Opened:
    """An opened file, made untimed before each timed read (``interleaved``'s ``before``)."""

    def __init__(self, open_: Callable[[], Any]):
        self._open, self.value = open_, None

    def __call__(self) -> None:
        self.value = self._open()


def _firsts(ours: Path, theirs: Path, repeat: int) -> list[tuple[str, ...]]:
    nothing: Callable[[], None] = lambda: None  # noqa: E731
    small, large = f"[{FIRST!r}]", "['layer_00']"

    def st_read(key: str, sha256: bool) -> np.ndarray:
        with safe_open(theirs, "np") as f:
            tensor: np.ndarray = f.get_tensor(key)
        if sha256:
            hashlib.sha256(tensor).digest()
        return tensor

    def st_open() -> None:
        with safe_open(theirs, "np"):
            pass

    model = _Opened(lambda: jaxport.load_model(ours))
    handle = _Opened(lambda: safe_open(theirs, "np"))

    def st_get(key: str) -> Callable[[], None]:
        return lambda: hashlib.sha256(handle.value.get_tensor(key)).digest()  # type: ignore[union-attr]

    sides = {
        "ours": (lambda: jaxport.load_model(ours).tensor(small), nothing),
        "st": (lambda: st_read(FIRST, False), nothing),
        "st_sha256": (lambda: st_read(FIRST, True), nothing),
        "ours_open": (lambda: jaxport.load_model(ours), nothing),
        "st_open": (st_open, nothing),
        "ours_get": (lambda: model.value.tensor(small), model),  # type: ignore[union-attr]
        "st_get": (st_get(FIRST), handle),
        "ours_large": (lambda: jaxport.load_model(ours).tensor(large), nothing),
        "st_large": (lambda: st_read("layer_00", True), nothing),
        "ours_get_large": (lambda: model.value.tensor(large), model),  # type: ignore[union-attr]
        "st_get_large": (st_get("layer_00"), handle),
    }
    t = interleaved(sides, max(repeat, 20))
    ms = {k: [v * 1e3 for v in vs] for k, vs in t.items()}
    size = f"layer_00, {jaxport.load_model(ours).tensor(large).nbytes / 2**20:.0f} MiB"
    return [
        _row("first tensor, mapped (ms)", ms["ours"], ms["st"], None),
        _row("first tensor; safetensors + its sha256 (ms)", ms["ours"], ms["st_sha256"], None),
        _row("open: load_model vs safe_open (ms)", ms["ours_open"], ms["st_open"], None),
        _row("a tensor of an open file; + sha256 (ms)", ms["ours_get"], ms["st_get"], None),
        _row(f"first tensor, {size}; + sha256 (ms)", ms["ours_large"], ms["st_large"], None),
        _row(
            f"{size} of an open file; + sha256 (ms)",
            ms["ours_get_large"],
            ms["st_get_large"],
            None,
        ),
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
    parser.add_argument("--only", default="save,load,first", help="comma-separated parts")
    parser.add_argument("--no-orbax", action="store_true", help="leave Orbax out")
    args = parser.parse_args()
    only = set(args.only.split(","))
    params = make_params(args.size_mb, args.tensors)
    nbytes = sum(a.nbytes for a in params.values())
    print(
        f"jax {jax.__version__}, jaxport {jaxport.__version__}, "
        f"safetensors {_version('safetensors')}, orbax-checkpoint {_version('orbax-checkpoint')}; "
        f"{args.tensors} x {nbytes / args.tensors / 2**20:.0f} MB float32 + 1 small tensor, "
        f"repeat={args.repeat}, page cache warm (nothing dropped), "
        f"in {os.environ.get('BENCH_DIR') or tempfile.gettempdir()}"
    )
    print(f"start: {load_average()}")
    print(describe())
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        rows = bench(params, args.repeat, Path(tmp), only, not args.no_orbax)
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
