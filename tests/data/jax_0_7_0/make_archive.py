"""Writes ``sin.jaxport`` and ``sharded.jaxport`` with jaxport under jax 0.7.0, for
tests/test_window.py: archives whose header records a jax release outside jax's 6-month window
for every later jax. ``sharded`` is ``3 * x`` for x float32[8, 4] sharded P('x', 'y') over a
4 x 2 mesh (8 devices; jax 0.7.0 writes shardings in the HloSharding form only).

Run it once in the jax 0.7.0 venv of scripts/test_jax_versions.sh and commit the output:

    .jax-venvs/jax-0.7.0/bin/python -P tests/data/jax_0_7_0/make_archive.py
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

from pathlib import Path

import jax
import jax.export  # jax 0.7.0 does not import it with jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport

assert jax.__version__ == "0.7.0", jax.__version__
HERE = Path(__file__).resolve().parent
META = {"made-by": "tests/data/jax_0_7_0/make_archive.py"}

exp = jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2), platforms=("cpu",))(
    jax.ShapeDtypeStruct((4,), jnp.float32)
)
jaxport.save(exp, HERE / "sin.jaxport", metadata=META)

mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
sharded = jax.jit(lambda x: x * 3, in_shardings=NamedSharding(mesh, P("x", "y")))
exp = jax.export.export(sharded, platforms=("cpu",))(jax.ShapeDtypeStruct((8, 4), jnp.float32))
jaxport.save(exp, HERE / "sharded.jaxport", metadata=META)
print(f"sin.jaxport, sharded.jaxport: written by jax {jax.__version__}")
