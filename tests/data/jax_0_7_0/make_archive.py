"""Writes ``sin.jaxport`` with jaxport under jax 0.7.0, for tests/test_window.py: an archive
whose header records a jax release outside jax's 6-month window for every later jax.

Run it once in the jax 0.7.0 venv of scripts/test_jax_versions.sh and commit the output:

    .jax-venvs/jax-0.7.0/bin/python -P tests/data/jax_0_7_0/make_archive.py
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.export  # jax 0.7.0 does not import it with jax
import jax.numpy as jnp

import jaxport

assert jax.__version__ == "0.7.0", jax.__version__
exp = jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2), platforms=("cpu",))(
    jax.ShapeDtypeStruct((4,), jnp.float32)
)
out = Path(__file__).resolve().with_name("sin.jaxport")
jaxport.save(exp, out, metadata={"made-by": "tests/data/jax_0_7_0/make_archive.py"})
print(f"{out.name}: written by jax {jax.__version__}")
