"""A function archive's VJP modules fetched when ``.vjp()`` asks, through a registry server:
bytes the server sends for ``pull`` + a call, then for ``.vjp()`` + its call, against the
archive's size.

    python benchmarks/bench_lazy_vjp.py [--mib 16]

Two functions of ``x`` (2 x N float32), pushed with ``vjp_order=1`` into a SQLite registry with
a local blob directory, served by ``jaxport serve`` on 127.0.0.1 (bytes counted there: its
``GET /api/v1/transfer``, HTTP bodies sent):

- ``custom-vjp``: ``sin(x)`` whose custom VJP multiplies the cotangent by an N x N random
  matrix of ``--mib`` MiB: the constant is in the VJP module only;
- ``matmul``: ``x @ w`` with the same matrix: the constant is in both modules (the archive
  stores it about once: one zstd section with long-distance matching; each module sent over
  the wire carries it).

Printed, per function: the archive's size, the bytes sent for pull + call, then for the VJP,
each over the archive's size. Also the whole download (``pull_bytes``) for comparison.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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


def _functions(mib: int) -> dict[str, jax.export.Exported]:
    side = int((mib * MIB // 4) ** 0.5)
    c = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: ((g * jnp.cos(x)) @ c,))
    spec = jax.ShapeDtypeStruct((2, side), jnp.float32)
    return {
        "custom-vjp": jax.export.export(jax.jit(f))(spec),
        "matmul": jax.export.export(jax.jit(lambda x: x @ c))(spec),
    }


def _sent(url: str, token: str) -> int:
    answer = httpx.get(f"{url}/api/v1/transfer", headers={"Authorization": f"Bearer {token}"})
    return int(answer.json()["http_sent"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    print(f"load average at start: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        db, blobs = f"sqlite:///{tmp}/r.db", f"{tmp}/blobs"
        token = admin_token(db, blobs)
        with serving(db, blobs, Path(tmp) / "serve.log") as server:
            reg = jaxport.Registry(server.url, token=token)
            for name, exp in _functions(args.mib).items():
                size = len(jaxport.dumps(exp, vjp_order=1))
                reg.push(exp, name, vjp_order=1)
                x = np.ones(exp.in_avals[0].shape, np.float32)
                start = _sent(server.url, token)
                pulled = reg.pull(name, platform="cpu")
                jax.block_until_ready(pulled.call(x))
                called = _sent(server.url, token) - start
                jax.block_until_ready(pulled.vjp().call(x, np.ones_like(x)))
                both = _sent(server.url, token) - start
                start = _sent(server.url, token)
                reg.pull_bytes(name, platform="cpu")
                whole = _sent(server.url, token) - start
                print(
                    f"{name}: archive {size / MIB:.2f} MiB; pull + call {called / MIB:.3f} MiB "
                    f"({called / size:.3f}x); + vjp {both / MIB:.2f} MiB ({both / size:.3f}x); "
                    f"pull_bytes {whole / MIB:.2f} MiB ({whole / size:.3f}x)"
                )
            reg.close()
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
