"""The platform and device rules are written once, as SQL and as Python reasons: they agree."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def _variants():
    spec = jax.ShapeDtypeStruct((8, 2), jnp.float32)
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
    sharded = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x")))
    mesh4 = Mesh(np.array(jax.devices()[:4]).reshape(4), ("x",))
    sharded4 = jax.jit(lambda x: x * 3, in_shardings=NamedSharding(mesh4, P("x")))
    one = jax.jit(lambda x: x * 4, in_shardings=NamedSharding(mesh4, P()))
    return [
        jax.export.export(jax.jit(jnp.sin), platforms=("cpu",))(spec),
        jax.export.export(jax.jit(jnp.cos), platforms=("tpu", "cuda"))(spec),
        jax.export.export(sharded)(spec),
        jax.export.export(sharded4, platforms=("cpu", "tpu"))(spec),
        # 4 devices like sharded4, so not for cpu: push refuses two variants that a pull for
        # the same platform and device count could not choose between
        jax.export.export(one, platforms=("cuda",))(spec),
    ]


def test_sql_predicates_and_python_reasons_agree(registry):
    ref = registry.push(_variants(), "rules")
    assert len(ref.variants) == 5
    for platform, devices in itertools.product(
        [None, "cpu", "tpu", "cuda", "rocm"], [None, 1, 2, 4, 8]
    ):
        by_sql = {v.digest for v in registry.search(platform=platform, nr_devices=devices)}
        by_python = {v.digest for v in ref.variants if v.runs_on(platform, devices) is None}
        assert by_sql == by_python, (platform, devices)
        resolution = registry.resolve("rules", platform=platform, nr_devices=devices)
        rejected = {r.variant.digest for r in resolution.rejected if "earlier" not in r.reason}
        assert rejected == {v.digest for v in ref.variants} - by_python, (platform, devices)
