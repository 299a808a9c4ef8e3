"""Module-level campaign (issue 15): hostile module bytes through every reader entry point.

Cases, generated from a seed: seeded byte mutants (1-8 bytes) of several real modules (a
``sin``, an MLP with ``tanh``, a ``while`` loop, a LAPACK QR with custom calls, a model
method), MLIR text modules (valid ones and attributes nested up to 20,000 deep), and
jax-native ``Exported.serialize()`` bytes with mutated bytes. Each case goes through one entry
point, in turn: ``loads``, ``load`` (a file), ``module_custom_calls``, ``load_model`` (the
module as a model method), ``Registry.push`` (a file; every 20th case) and, for jax-native
bytes, ``Registry.push`` of the bytes. This process is the caller: it must end alive, having
seen only ``JaxportError`` s or normal loads, and each case must end within the sandbox's time
limit. The sandbox workers' deaths are counted and listed (``UnsafeModuleError.what``).

    python tests/reliability/module_campaign.py --cases 100000 --seed 1 [--json out.json]

``JAXPORT_SANDBOX_TIMEOUT`` (default here 5 s) bounds a hanging parse.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAXPORT_SANDBOX_TIMEOUT", "5")

import jax
import jax.numpy as jnp
import numpy as np

import jaxport
from jaxport.export import _modules, _sandbox, module_custom_calls

F32 = jnp.float32


def _bases() -> dict[str, Any]:
    x = jax.ShapeDtypeStruct((4, 8), F32)
    w = jax.ShapeDtypeStruct((8, 3), F32)

    def loop(x: Any) -> Any:
        return jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + i, x)

    return {
        "sin": jax.export.export(jax.jit(jnp.sin))(x),
        "mlp": jax.export.export(jax.jit(lambda x, w: jnp.tanh(x @ w).sum(0)))(x, w),
        "while": jax.export.export(jax.jit(loop))(x),
        "qr": jax.export.export(jax.jit(lambda a: jnp.linalg.qr(a)[1]))(
            jax.ShapeDtypeStruct((4, 4), F32)
        ),
    }


_PARAMS = {"w": np.ones((8, 3), np.float32)}


def _model_base() -> Any:
    return jax.export.export(jax.jit(lambda p, x: x @ p["w"]))(
        _PARAMS, jax.ShapeDtypeStruct((4, 8), F32)
    )


def mutant(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(4, len(b))] = rng.randrange(256)
    return bytes(b)


def text_module(rng: random.Random) -> bytes:
    depth = rng.choice([1, 10, 1000, 7000, 10_000, 20_000])
    attr = "[" * depth + "]" * depth
    return (
        f"module {{ func.func public @main(%arg0: tensor<4x8xf32>) -> (tensor<4x8xf32>) "
        f"attributes {{x = {attr}}} {{ return %arg0 : tensor<4x8xf32> }} }}"
    ).encode()


class Campaign:
    def __init__(self, tmp: Path, seed: int):
        self.tmp, self.rng = tmp, random.Random(seed)
        self.bases = _bases()
        self.model_base = _model_base()
        self.native = {k: v.serialize() for k, v in self.bases.items()}
        self.registry = jaxport.Registry(f"sqlite:///{tmp}/r.db", blobs=tmp / "blobs")
        self.outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.deaths: collections.Counter[str] = collections.Counter()
        self.slowest = 0.0
        self.cases = 0

    def run(self, n: int) -> None:
        entries = ["loads", "load", "module_custom_calls", "load_model"]
        for i in range(n):
            kind = self.rng.random()
            if kind < 0.01:
                entry, make = "push native", self._native_case
            else:
                entry = "push" if i % 20 == 19 else entries[i % len(entries)]
                make = self._text_case if kind < 0.03 else self._mutant_case
            self._one(entry, make)

    def _mutant_case(self) -> tuple[str, Any, bytes]:
        name = self.rng.choice([*self.bases, "model"])
        base = self.model_base if name == "model" else self.bases[name]
        return name, base, mutant(bytes(base.mlir_module_serialized), self.rng)

    def _text_case(self) -> tuple[str, Any, bytes]:
        return "text", self.bases["sin"], text_module(self.rng)

    def _native_case(self) -> tuple[str, Any, bytes]:
        name = self.rng.choice(list(self.native))
        return f"native {name}", None, mutant(self.native[name], self.rng)

    def _one(self, entry: str, make: Any) -> None:
        source, base, module = make()
        start = time.perf_counter()
        try:
            self._read(entry, base, module)
            outcome = "read"
        except jaxport.UnsafeModuleError as e:
            outcome = "UnsafeModuleError"
            self.deaths[f"{source}: {e.what}"] += 1
        except jaxport.JaxportError as e:
            outcome = type(e).__name__
        self.slowest = max(self.slowest, time.perf_counter() - start)
        self.outcomes[(entry, outcome)] += 1
        self.cases += 1

    def _read(self, entry: str, base: Any, module: bytes) -> None:
        if entry == "push native":
            self.registry.push(module, "native")
            return
        if entry == "load_model" and base is self.model_base:
            exp = dataclasses.replace(base, mlir_module_serialized=module)
            path = self.tmp / "m.jaxport"
            jaxport.Model.from_exported(_PARAMS, {"f": exp}).save(path)
            jaxport.load_model(path).exported["f"]
            return
        data = jaxport.dumps(dataclasses.replace(base, mlir_module_serialized=module))
        if entry == "loads" or entry == "load_model":
            jaxport.loads(data)
        elif entry == "module_custom_calls":
            module_custom_calls(data)
        else:
            path = self.tmp / "f.jaxport"
            path.write_bytes(data)
            if entry == "load":
                jaxport.load(path)
            else:
                self.registry.push(path, "f")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    # The writer does not look into modules here: a hostile author's writer does not either.
    _modules.custom_call_targets = lambda ms, path=None: [() for _ in ms]  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as d:
        os.environ["JAXPORT_CACHE"] = str(Path(d) / "cache")
        campaign = Campaign(Path(d), args.seed)
        start = time.perf_counter()
        campaign.run(args.cases)
        seconds = time.perf_counter() - start
    summary = {
        "cases": campaign.cases,
        "seconds": round(seconds, 1),
        "jax": jax.__version__,
        "workers_started": _sandbox.default_sandbox().started,
        "slowest_case_s": round(campaign.slowest, 2),
        "outcomes": {f"{e} -> {o}": n for (e, o), n in sorted(campaign.outcomes.items())},
        "worker_deaths": dict(campaign.deaths.most_common()),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print("the calling process is alive", file=sys.stderr)


if __name__ == "__main__":
    main()
