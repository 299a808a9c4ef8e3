"""Lazy model reads through a registry server: bytes transferred calling one method of a
model, against the archive's size, and the time against pulling the whole.

    python benchmarks/bench_lazy_remote.py [--mib 64] [--repeat 3]

A model of two methods, ``f`` and ``g``, each using ``--mib`` MiB of tensors of its own (8
tensors each), is pushed into a SQLite registry with a local blob directory, served by
``jaxport serve`` on 127.0.0.1 (every byte through the server, as the bytes are counted
there: its ``GET /api/v1/transfer``, HTTP bodies sent).

- lazy: ``Registry(url).pull_model(...)``, then ``f(x)`` (its tensors fetched by HTTP ranges,
  each verified);
- whole (the peer): ``Registry(url).pull_bytes(...)`` (the archive downloaded and verified),
  ``jaxport.loads_model``, then ``f(x)``.

Printed: bytes the server sent for each over the archive's size, and the best-of-``--repeat``
times (interleaved) with their ratio. Target (issue 25 §3): one method of two with disjoint
tensors transfers < 55 % of the archive.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np

import jaxport

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _machine import load_average
from _server import admin_token, serving

MIB = 1 << 20
TENSORS = 8  # per method


def _model(mib: int) -> tuple[jaxport.Model, int]:
    side = int((mib * MIB // TENSORS // 4) ** 0.5)
    rng = np.random.default_rng(0)
    params = {
        m: [rng.standard_normal((side, side)).astype(np.float32) for _ in range(TENSORS)]
        for m in ("f", "g")
    }

    def chain(ws, x):
        for w in ws:
            x = x @ w
        return x

    spec = [jax.ShapeDtypeStruct((1, side), jnp.float32)]
    fns = {"f": lambda p, x: chain(p["f"], x), "g": lambda p, x: chain(p["g"], x)}
    return jaxport.Model(params, fns, {"f": spec, "g": spec}), side


def _sent(url: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return int(httpx.get(f"{url}/api/v1/transfer", headers=headers, timeout=60).json()["http_sent"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64, help="MiB of tensors per method")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(load_average())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db_url, blobs = f"sqlite:///{root / 'registry.db'}", str(root / "blobs")
        model, side = _model(args.mib)
        with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
            size = reg.push(model, "two").variants[0].size_bytes
        x = np.ones((1, side), np.float32)
        expected = np.asarray(model.f(x))
        del model
        token = admin_token(db_url, blobs)
        with serving(db_url, blobs, root / "serve.log") as server:
            client = jaxport.Registry(server.url, token=token)

            def lazy() -> int:
                m = client.pull_model("two", platform="cpu")
                np.testing.assert_allclose(m.f(x), expected, rtol=1e-4)
                return m.bytes_read

            def whole() -> int:
                m = jaxport.loads_model(client.pull_bytes("two", platform="cpu"))
                np.testing.assert_allclose(m.f(x), expected, rtol=1e-4)
                return m.bytes_read

            times: dict[str, list[float]] = {"lazy": [], "whole": []}
            sent: dict[str, int] = {}
            read: dict[str, int] = {}
            for _ in range(args.repeat):
                for name, fn in (("lazy", lazy), ("whole", whole)):
                    before = _sent(server.url, token)
                    t = time.perf_counter()
                    read[name] = fn()
                    times[name].append(time.perf_counter() - t)
                    sent[name] = _sent(server.url, token) - before
            client.close()
    lazy_t, whole_t = min(times["lazy"]), min(times["whole"])
    print(f"archive {size / MIB:,.1f} MiB: 2 methods x {TENSORS} tensors of {side}x{side} f32")
    print(
        f"lazy pull_model + f(x): server sent {sent['lazy'] / MIB:,.1f} MiB = "
        f"{sent['lazy'] / size:.3f}x the archive (target < 0.55); Model.bytes_read "
        f"{read['lazy'] / MIB:,.1f} MiB; best {lazy_t:.2f} s"
    )
    print(
        f"whole pull_bytes + loads_model + f(x) (peer): server sent {sent['whole'] / MIB:,.1f} "
        f"MiB = {sent['whole'] / size:.3f}x; best {whole_t:.2f} s"
    )
    print(f"time lazy / whole: {lazy_t / whole_t:.2f}")


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
