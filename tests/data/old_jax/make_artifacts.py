"""Makes jax-native artifacts with an old jax release, for tests/test_audit_old_jax.py.

Run it once under jax 0.4.30 (a venv of its own) and commit the output beside this file:

    python3 -m venv /tmp/jax0430
    /tmp/jax0430/bin/pip install "jax==0.4.30" "jaxlib==0.4.30" "numpy<2" absl-py flatbuffers
    /tmp/jax0430/bin/python tests/data/old_jax/make_artifacts.py

For each function it writes ``<name>.jaxexport`` (``Exported.serialize()``) and
``<name>.npz``: the inputs and the outputs jax 0.4.30 computed, as raw bytes plus a JSON
``meta`` list of [key, dtype, shape] (bfloat16 has no numpy dtype of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export

OUT = Path(__file__).resolve().parent


def save(name, fun, *args):
    exp = jax_export.export(jax.jit(fun))(*args)
    (OUT / f"{name}.jaxexport").write_bytes(exp.serialize())
    outs = jax.tree.leaves(exp.call(*args))
    arrays, meta = {}, []
    for side, leaves in (("in", args), ("out", outs)):
        for j, leaf in enumerate(leaves):
            a = np.asarray(leaf)
            key = f"0_{side}_{j}"
            arrays[key] = np.frombuffer(a.tobytes(), np.uint8)
            meta.append([key, a.dtype.name, list(a.shape)])
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(OUT / f"{name}.npz", **arrays)
    print(f"{name}: {exp.fun_name}, jax {jax.__version__}")


key = jax.random.PRNGKey(0)
x = jax.random.normal(key, (4, 4), jnp.float32)
save("qr_f32", lambda a: tuple(jnp.linalg.qr(a)), x)
save("sin_f32", jnp.sin, x)
b = jax.random.normal(key, (64, 64), jnp.float32).astype(jnp.bfloat16)
save(
    "bf16_ops", lambda a: (jnp.tanh(a) @ jnp.exp(a * 0.1), jnp.sum(a, axis=1), jax.nn.softmax(a)), b
)
