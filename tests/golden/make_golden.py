"""Writes the golden archives read by tests/test_golden.py.

Run once per released format version, from the repository root, and commit the output:

    python tests/golden/make_golden.py

Never regenerate the archive of a released version: it is what that release wrote, and the
test proves that newer readers still read it.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp

import jaxport


def golden_function(x, y):
    """sin(x) @ y, x: f32[b, 4], y: f32[4, 3] -> f32[b, 3]."""
    return {"out": jnp.sin(x) @ y, "sum": jnp.sum(x)}


def main() -> None:
    (b,) = jax.export.symbolic_shape("b", constraints=["b >= 1"])
    exp = jax.export.export(jax.jit(golden_function), platforms=("cpu", "cuda", "tpu"))(
        jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32)
    )
    out = Path(__file__).with_name(f"v{jaxport.FORMAT_VERSION}_poly_vjp1.jaxport")
    jaxport.save(exp, out, vjp_order=1, metadata={"golden": f"v{jaxport.FORMAT_VERSION}"})
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
