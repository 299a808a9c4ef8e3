"""Archive benchmark: jaxport against jax.export's own serialize/deserialize, in one run.

    python benchmarks/bench_archive.py [--repeat 7]

Two inputs: a function with 40 MB of f32 constants (the weights baked into the module) and a
small MLP whose weights are arguments; both at vjp_order=1. Both sides start from the same
Exported (jax-native deserialized, so neither pays for re-exporting the VJP) and write to /
read from the same directory. Prints medians and the ratio jaxport / jax: the machine is
noisy, a ratio holds, a time does not. Targets (issue #2): size <= 0.55x with constants,
save <= 1x, load <= 1.5x, inspect < 1 ms at any size.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
import numpy as np

import jaxport


def _median_seconds(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def constants_40mb():
    w = np.random.RandomState(0).standard_normal((2500, 4000)).astype(np.float32)  # 40 MB
    return jax.export.export(jax.jit(lambda x: jnp.tanh(x @ w)))(
        jax.ShapeDtypeStruct((8, 2500), jnp.float32)
    )


def mlp_weights_as_args():
    sizes = [784, 512, 512, 10]
    params = [
        (jax.ShapeDtypeStruct((a, b), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32))
        for a, b in itertools.pairwise(sizes)
    ]

    def mlp(params, x):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return jax.nn.log_softmax(x @ w + b)

    return jax.export.export(jax.jit(mlp))(params, jax.ShapeDtypeStruct((32, 784), jnp.float32))


def bench(name: str, live, repeat: int, tmp: Path) -> list[tuple[str, str, str, str]]:
    native = bytes(live.serialize(vjp_order=1))
    exp = jax.export.deserialize(bytearray(native))  # same input for both sides
    native_path, ours_path = tmp / f"{name}.jaxexport", tmp / f"{name}.jaxport"

    def jax_save():
        native_path.write_bytes(exp.serialize(vjp_order=1))

    def jax_save_fsync():  # the durable peer: jaxport.save fsyncs before its atomic rename
        with native_path.open("wb") as f:
            f.write(exp.serialize(vjp_order=1))
            f.flush()
            os.fsync(f.fileno())

    def our_save():
        jaxport.save(exp, ours_path, vjp_order=1)

    def jax_load():
        return jax.export.deserialize(bytearray(native_path.read_bytes()))

    def our_load():
        return jaxport.load(ours_path)

    rows = []
    t_js, t_os = _median_seconds(jax_save, repeat), _median_seconds(our_save, repeat)
    t_jf = _median_seconds(jax_save_fsync, repeat)
    size_j, size_o = native_path.stat().st_size, ours_path.stat().st_size
    t_jl, t_ol = _median_seconds(jax_load, repeat), _median_seconds(our_load, repeat)
    t_jv = _median_seconds(lambda: jax_load().vjp(), repeat)
    t_ov = _median_seconds(lambda: our_load().vjp(), repeat)
    t_in = _median_seconds(lambda: jaxport.inspect(ours_path), max(repeat, 50))
    rows.append((name, "size (bytes)", f"{size_j:,} / {size_o:,}", f"{size_o / size_j:.2f}x"))
    rows.append((name, "save (s)", f"{t_js:.4f} / {t_os:.4f}", f"{t_os / t_js:.2f}x"))
    rows.append(
        (name, "save, jax side + fsync (s)", f"{t_jf:.4f} / {t_os:.4f}", f"{t_os / t_jf:.2f}x")
    )
    rows.append((name, "load (s)", f"{t_jl:.4f} / {t_ol:.4f}", f"{t_ol / t_jl:.2f}x"))
    rows.append((name, "load + vjp() (s)", f"{t_jv:.4f} / {t_ov:.4f}", f"{t_ov / t_jv:.2f}x"))
    rows.append((name, "inspect (ms)", f"- / {t_in * 1e3:.3f}", "-"))
    # Both load to the same numbers.
    ours, theirs = our_load(), jax_load()
    args = [np.ones(a.shape, a.dtype) for a in exp.in_avals]
    args_tree = jax.tree.unflatten(exp.in_tree, args)
    np.testing.assert_array_equal(ours.call(*args_tree[0]), theirs.call(*args_tree[0]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, jaxport {jaxport.__version__}, repeat={args.repeat}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += bench("40 MB constants", constants_40mb(), args.repeat, Path(tmp))
        rows += bench("MLP, weights as args", mlp_weights_as_args(), args.repeat, Path(tmp))
    print("| input | measure | jax.export / jaxport | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
