"""Archive benchmark: jaxport against jax.export's own serialize/deserialize, in one run.

    python benchmarks/bench_archive.py [--constants-mb 400] [--repeat 5] [--big]

Inputs, at vjp_order=1: a function with ``--constants-mb`` MB of random float32 constants (the
weights baked into the module; each VJP module repeats them) and a small MLP whose weights are
arguments. Both sides start from the same Exported (jax-native deserialized, so neither pays
for re-exporting the VJP) and write to / read from the same directory; the sides take turns
in every round, each save after its file is removed and every dirty page written out
(untimed). Prints the best and the median of ``--repeat`` rounds, the ratios jaxport / jax of
both (the machine is shared and noisy: a ratio holds, a time does not) and the CPU seconds
each side used (all its threads: what counts when other work takes the cores), after a line
with the machine's load average and its memcpy, zstd, sha256 and blake3 throughput measured in
the same run.

- save: ``jaxport.save`` (compress, hash, write, fsync, atomic rename) vs
  ``path.write_bytes(exp.serialize(vjp_order=1))``; "jax + fsync" adds the fsync jaxport does.
- load: ``jaxport.load(path)`` (every digest checked, the primal module decompressed and vetted
  through the sandbox's cached verdict) vs ``jax.export.deserialize(path.read_bytes())``.
- load + vjp(): the same, then ``.vjp()`` (jaxport reads the VJP module then).
- inspect: ``jaxport.inspect(path)`` (the header only).
- digests: what sha256 (the format's) and blake3 cost on the archive's modules section, for
  the decision recorded in README's "Benchmarks" section.

``--big`` adds a function with 2.5 GiB of constants (vjp_order=0; about 12 GB of memory):
jax's own ``serialize`` fails past 2 GiB (a FlatBuffer's limit), jaxport saves and loads it
(``trusted=True``: parsing it needs more than the module sandbox's 8 GiB address space).

Targets (issue 18): size <= 0.55x, save <= 0.5x, load <= 0.5x, inspect < 1 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
import numpy as np

import jaxport

sys.path.insert(0, str(Path(__file__).parent))
from _machine import best_and_median, describe, interleaved, load_average

Row = tuple[str, ...]


def constants(mb: int) -> jax.export.Exported:
    """``tanh(x @ w)`` with ``w`` a constant of ``mb`` MB of random float32 (4000 columns)."""
    rows = max(1, mb * 10**6 // (4 * 4000))
    w = np.random.RandomState(0).standard_normal((rows, 4000)).astype(np.float32)
    return jax.export.export(jax.jit(lambda x: jnp.tanh(x @ w)))(
        jax.ShapeDtypeStruct((8, rows), jnp.float32)
    )


def mlp_weights_as_args() -> jax.export.Exported:
    sizes = [784, 512, 512, 10]
    params = [
        (jax.ShapeDtypeStruct((a, b), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32))
        for a, b in itertools.pairwise(sizes)
    ]

    def mlp(params, x):  # type: ignore[no-untyped-def]
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return jax.nn.log_softmax(x @ w + b)

    return jax.export.export(jax.jit(mlp))(params, jax.ShapeDtypeStruct((32, 784), jnp.float32))


def _fresh(path: Path) -> Callable[[], None]:
    """Before a save (untimed): its file removed, every dirty page written out, so that no
    save pays for the last one's pages."""

    def before() -> None:
        path.unlink(missing_ok=True)
        os.sync()

    return before


def _fsync_write(path: Path, data: bytes | bytearray) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def bench(name: str, live: jax.export.Exported, repeat: int, tmp: Path) -> list[Row]:
    native = bytes(live.serialize(vjp_order=1))
    exp = jax.export.deserialize(bytearray(native))  # same input for both sides
    del native
    theirs, ours = tmp / f"{name}.jaxexport", tmp / f"{name}.jaxport"
    nothing: Callable[[], None] = lambda: None  # noqa: E731

    def jax_load() -> jax.export.Exported:
        return jax.export.deserialize(bytearray(theirs.read_bytes()))

    cpu_save: dict[str, list[float]] = {}
    cpu_load: dict[str, list[float]] = {}
    saves = interleaved(
        {
            "jax": (lambda: theirs.write_bytes(exp.serialize(vjp_order=1)), _fresh(theirs)),
            "jax+fsync": (lambda: _fsync_write(theirs, exp.serialize(vjp_order=1)), _fresh(theirs)),
            "ours": (lambda: jaxport.save(exp, ours, vjp_order=1), _fresh(ours)),
        },
        repeat,
        cpu_save,
    )
    loads = interleaved(
        {
            "jax": (jax_load, nothing),
            "ours": (lambda: jaxport.load(ours), nothing),
            "jax vjp": (lambda: jax_load().vjp(), nothing),
            "ours vjp": (lambda: jaxport.load(ours).vjp(), nothing),
        },
        repeat,
        cpu_load,
    )
    inspect = interleaved({"ours": (lambda: jaxport.inspect(ours), nothing)}, max(repeat, 50))
    _check_same(exp, jaxport.load(ours), jax_load())
    size_j, size_o = theirs.stat().st_size, ours.stat().st_size
    rows = [
        (name, "size (kB)", f"{size_j / 1e3:,.1f}", f"{size_o / 1e3:,.1f}", *_ratio(size_o, size_j))
    ]
    for measure, times, cpu, theirs_key, ours_key in [
        ("save (s)", saves, cpu_save, "jax", "ours"),
        ("save vs jax + fsync (s)", saves, cpu_save, "jax+fsync", "ours"),
        ("load (s)", loads, cpu_load, "jax", "ours"),
        ("load + vjp() (s)", loads, cpu_load, "jax vjp", "ours vjp"),
    ]:
        rows.append(
            _row(name, measure, times[theirs_key], times[ours_key])
            + _cpu(cpu[theirs_key], cpu[ours_key])
        )
    t_in = best_and_median(inspect["ours"])
    inspected = f"{t_in[0] * 1e3:.3f} / {t_in[1] * 1e3:.3f}"
    rows.append((name, "inspect (ms)", "-", inspected, "-", "-", "-"))
    rows.append(_digests(name, ours))
    return rows


def _ratio(ours: float, theirs: float) -> tuple[str, str, str]:
    return f"**{ours / theirs:.2f}x**", "-", "-"


def _cpu(theirs: list[float], ours: list[float]) -> Row:
    """The median CPU seconds (all threads) of each side, and their ratio."""
    t, o = best_and_median(theirs)[1], best_and_median(ours)[1]
    return (f"{t:.3f} / {o:.3f} ({o / t:.2f}x)",)


def _row(name: str, measure: str, theirs: list[float], ours: list[float]) -> Row:
    """Best / median of each side, then the ratios of the bests and of the medians."""
    (tb, tm), (ob, om) = best_and_median(theirs), best_and_median(ours)
    return (
        name,
        measure,
        f"{tb:.4f} / {tm:.4f}",
        f"{ob:.4f} / {om:.4f}",
        f"**{ob / tb:.2f}x**",
        f"{om / tm:.2f}x",
    )


def _digests(name: str, path: Path) -> Row:
    """sha256 (one thread, the format's) and blake3 (one thread; all CPUs) of the archive's
    stored modules section, the digest ``load`` checks (ms, best of 5)."""
    data = memoryview(path.read_bytes())
    cells = [f"sha256 {_best_ms(lambda: hashlib.sha256(data).digest()):.3f}"]
    try:
        import blake3

        cells.append(f"blake3 {_best_ms(lambda: blake3.blake3(data).digest()):.3f}")
        auto = blake3.blake3.AUTO
        all_cpus = _best_ms(lambda: blake3.blake3(data, max_threads=auto).digest())
        cells.append(f"blake3 (all CPUs) {all_cpus:.3f}")
    except ImportError:
        cells.append("blake3 not installed")
    return (name, "digest of the archive (ms)", "-", ", ".join(cells), "-", "-", "-")


def _best_ms(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def _check_same(exp: jax.export.Exported, *loaded: jax.export.Exported) -> None:
    """Every side computes the same numbers."""
    args = [np.ones(a.shape, a.dtype) for a in exp.in_avals]
    positional = jax.tree.unflatten(exp.in_tree, args)[0]
    expected = exp.call(*positional)
    for other in loaded:
        np.testing.assert_array_equal(other.call(*positional), expected)


def big(tmp: Path) -> list[Row]:
    """2.5 GiB of constants, vjp_order=0: jax's serialize fails, jaxport saves and loads."""
    name = "2.5 GiB constants"
    exp = constants(int(2.5 * 2**30 / 1e6))
    try:
        exp.serialize()
        said = "serialized"
    except Exception as e:  # flatbuffers refuses buffers over 2 GiB
        said = f"fails: {type(e).__name__}: {str(e)[:80]}"
    path = tmp / "big.jaxport"
    t_save = _seconds(lambda: jaxport.save(exp, path))
    # trusted: the module sandbox's workers have an 8 GiB address-space limit, which parsing a
    # 2.5 GiB module exceeds (the default load refuses it, "MLIR cannot read it")
    t_load = _seconds(lambda: jaxport.load(path, trusted=True))
    size = path.stat().st_size
    return [
        (name, "jax serialize", said, "-", "-", "-", "-"),
        (name, "save (s)", "-", f"{t_save:.2f}", "-", "-", "-"),
        (name, "load(trusted=True) (s)", "-", f"{t_load:.2f}", "-", "-", "-"),
        (name, "size (MB)", "-", f"{size / 1e6:.1f}", "-", "-", "-"),
    ]


def _seconds(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--constants-mb", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--big", action="store_true", help="add the 2.5 GiB case (~12 GB RAM)")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, jaxport {jaxport.__version__}, repeat={args.repeat}")
    print(f"start: {load_average()}")
    print(describe())
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        live = constants(args.constants_mb)
        rows += bench(f"{args.constants_mb} MB constants", live, args.repeat, Path(tmp))
        del live
        rows += bench("MLP, weights as args", mlp_weights_as_args(), args.repeat, Path(tmp))
        if args.big:
            rows += big(Path(tmp))
    print(f"end: {load_average()}")
    print(
        "| input | measure | jax.export (best / median) | jaxport (best / median) "
        "| ratio of bests | ratio of medians | CPU s, jax / jaxport (medians) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
