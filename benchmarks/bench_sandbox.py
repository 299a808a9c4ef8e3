"""The module sandbox's cost on a first load, against ``load(trusted=True)``, in one run.

    python benchmarks/bench_sandbox.py [--repeat 9] [--large-mb 400]

Inputs: a small MLP (weights as arguments) and a function with ``--large-mb`` MB of f32
constants in its module, each saved once. For each it measures (medians of ``--repeat``):

- ``trusted``: ``jaxport.load(path, trusted=True)``, no sandbox;
- ``cold``: a new pool (no worker yet) and an empty verdict cache: start a worker, parse;
- ``warm``: a running worker, an empty verdict cache: the module is parsed;
- ``cached``: the verdict cached (the module's sha256 is still computed).

Also the pool's start alone (spawn a worker until it reports its jaxlib) and the warm parse
of one small module in the worker (the per-module cost). Targets (issue 15): cold start of
the pool <= 0.3 s, <= 1 ms per small module warm; a module's bytes are copied once on the
way to the worker (the parent writes them to the worker's scratch file, which it maps).
The machine is noisy: compare within a run.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.export
import jax.numpy as jnp
import numpy as np

import jaxport
from jaxport.export import _sandbox, _verdicts, _vetting


def _median(fn: Callable[[], object], repeat: int, setup: Callable[[], object] = lambda: None):
    times = []
    for _ in range(repeat):
        setup()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def mlp() -> jax.export.Exported:
    sizes = [784, 512, 512, 10]
    params = [
        (jax.ShapeDtypeStruct((a, b), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32))
        for a, b in itertools.pairwise(sizes)
    ]

    def f(params, x):
        for w, b in params:
            x = jnp.tanh(x @ w + b)
        return x

    return jax.export.export(jax.jit(f))(params, jax.ShapeDtypeStruct((8, 784), jnp.float32))


def constants(mb: int) -> jax.export.Exported:
    n = mb * (1 << 20) // 4 // 1000
    w = np.random.RandomState(0).standard_normal((n, 1000)).astype(np.float32)
    return jax.export.export(jax.jit(lambda x: jnp.tanh(x @ w)))(
        jax.ShapeDtypeStruct((8, n), jnp.float32)
    )


def _new_pool() -> None:
    """Stops the process's pool: the next load starts a worker (as a fresh process would)."""
    if _sandbox._DEFAULT is not None:
        _sandbox._DEFAULT.close()
    _sandbox._DEFAULT = None


def measure(name: str, path: Path, repeat: int, tmp: Path) -> None:
    caches = (_verdicts.LocalVerdictCache(tmp / f"{name}-{i}") for i in itertools.count())
    state: dict[str, _verdicts.LocalVerdictCache] = {}

    def load() -> None:
        jaxport.load(path, verdicts=state["cache"])

    def empty_cache() -> None:
        state["cache"] = next(caches)

    def cold() -> None:
        _new_pool()
        empty_cache()

    trusted = _median(lambda: jaxport.load(path, trusted=True), repeat)
    figures = [
        ("cold pool, no verdict", _median(load, repeat, cold)),
        ("warm pool, no verdict", _median(load, repeat, empty_cache)),
        ("verdict cached", _median(load, repeat)),
    ]
    print(f"{name} ({path.stat().st_size / 1e6:.1f} MB archive)")
    print(f"  load(trusted=True)     {trusted * 1e3:9.2f} ms")
    for label, t in figures:
        print(f"  {label:22} {t * 1e3:9.2f} ms   {t / trusted:6.2f}x trusted")


def pool_figures(repeat: int) -> None:
    module = bytes(mlp().mlir_module_serialized)

    def start() -> None:
        pool = _sandbox.Sandbox(size=1)
        pool.jaxlib_version()
        pool.close()

    started = _median(start, repeat)
    pool = _sandbox.Sandbox(size=1)
    pool.parse(module, timeout=60)
    per_module = _median(lambda: pool.parse(module, timeout=60), repeat * 20)
    pool.close()
    print(f"pool cold start (one worker ready)   {started * 1e3:8.1f} ms   target <= 300 ms")
    print(f"small module ({len(module)} B) warm parse {per_module * 1e3:8.3f} ms   target <= 1 ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--large-mb", type=int, default=400)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, jaxlib {_vetting.jaxlib_version()}")
    pool_figures(args.repeat)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, exp in (("small MLP", mlp()), (f"{args.large_mb} MB constants", None)):
            path = tmp / f"{name.split()[0]}.jaxport"
            jaxport.save(exp if exp is not None else constants(args.large_mb), path)
            measure(name, path, args.repeat if exp is not None else max(3, args.repeat // 3), tmp)


if __name__ == "__main__":
    main()
