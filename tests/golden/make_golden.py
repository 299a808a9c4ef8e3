"""Writes the golden archives read by tests/test_golden.py.

Run once per released format version, from the repository root, and commit the output:

    python tests/golden/make_golden.py

It writes only the archives that are missing. Never regenerate the archive of a released
version: it is what that release wrote, and the test proves that newer readers still read it.
Version 1 is a function archive; version 2 a model archive (function archives are still
written as version 1); version 3 a model with a compressed tensor; version 4 a function
archive with VJPs (one section per VJP level, each level's frame against the module before).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jaxport

GOLDEN = Path(__file__).parent


def golden_function(x, y):
    """sin(x) @ y, x: f32[b, 4], y: f32[4, 3] -> f32[b, 3]."""
    return {"out": jnp.sin(x) @ y, "sum": jnp.sum(x)}


def golden_params() -> dict[str, object]:
    """The golden model's parameters: f32, bf16 and int8 tensors, and a scalar."""
    return {
        "dense": {
            "w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
            "b": np.arange(3, dtype=ml_dtypes.bfloat16),
        },
        "emb": (np.arange(10, dtype=np.int8) - 5).reshape(5, 2),
        "scale": np.float32(0.5),
    }


def golden_logits(p, x):
    """x: f32[b, 4] -> f32[b, 3]."""
    return (jnp.tanh(x @ p["dense"]["w"]) + p["dense"]["b"].astype(jnp.float32)) * p["scale"]


def golden_embed(p, i):
    """i: i32[n] -> f32[n, 2]."""
    return p["emb"][i].astype(jnp.float32) * p["scale"]


def write_v1() -> None:
    (b,) = jax.export.symbolic_shape("b", constraints=["b >= 1"])
    exp = jax.export.export(jax.jit(golden_function), platforms=("cpu", "cuda", "tpu"))(
        jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32)
    )
    _write(
        GOLDEN / "v1_poly_vjp1.jaxport",
        lambda out: jaxport.save(exp, out, vjp_order=1, metadata={"golden": "v1"}),
    )


def write_v2() -> None:
    (b,) = jax.export.symbolic_shape("b")
    model = jaxport.Model(
        golden_params(),
        {"logits": golden_logits, "embed": golden_embed},
        {
            "logits": [jax.ShapeDtypeStruct((b, 4), jnp.float32)],
            "embed": [jax.ShapeDtypeStruct((3,), jnp.int32)],
        },
        platforms=("cpu", "cuda", "tpu"),
        vjp_order={"logits": 1, "embed": 0},
        metadata={"golden": "v2"},
    )
    _write(GOLDEN / "v2_model_two_methods.jaxport", model.save)


def golden_table() -> np.ndarray:
    """The v3 golden model's compressed tensor: i32[64, 64], each row its index (16 KiB)."""
    return np.repeat(np.arange(64, dtype=np.int32), 64).reshape(64, 64)


def golden_lookup(p, i):
    """i: i32[n] -> i32[n] (p["table"][i, 0] + p["offset"])."""
    return p["table"][i, 0] + p["offset"]


def write_v3() -> None:
    model = jaxport.Model(
        {"table": golden_table(), "offset": np.int32(7)},
        {"lookup": golden_lookup},
        {"lookup": [jax.ShapeDtypeStruct((3,), jnp.int32)]},
        platforms=("cpu", "cuda", "tpu"),
        metadata={"golden": "v3"},
    )
    _write(GOLDEN / "v3_model_compressed.jaxport", lambda out: model.save(out, compress=True))


def write_v4() -> None:
    (b,) = jax.export.symbolic_shape("b", constraints=["b >= 1"])
    exp = jax.export.export(jax.jit(golden_function), platforms=("cpu", "cuda", "tpu"))(
        jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32)
    )
    _write(
        GOLDEN / "v4_poly_vjp2.jaxport",
        lambda out: jaxport.save(exp, out, vjp_order=2, metadata={"golden": "v4"}),
    )


def _write(out: Path, save: object) -> None:
    if out.exists():
        print(f"kept {out}")
        return
    save(out)  # type: ignore[operator]
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main() -> None:
    write_v1()
    write_v2()
    write_v3()
    write_v4()


if __name__ == "__main__":
    main()
