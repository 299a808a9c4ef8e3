"""Archive bytes do not depend on where ``dumps`` is called (issue 8).

A live Exported re-exports its VJP on each ``.vjp()``, and jax writes the Python call stack of
that moment into the module's locations. ``dumps`` stores those VJP modules with every
location ``loc(unknown)``; the primal module is stored exactly as jax made it.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport
from jaxport.export import _archive


def _dumps_from_here(exp, vjp_order):
    return jaxport.dumps(exp, vjp_order=vjp_order)


def _dumps_from_elsewhere(exp, vjp_order):
    def deeper():
        return [jaxport.dumps(exp, vjp_order=vjp_order)]

    (data,) = deeper()
    return data


def _sin():
    return export.export(jax.jit(lambda x: jnp.sin(x) * 2))(jnp.zeros((4, 4)))


def _mlp():
    @jax.jit
    def layer(w, x):
        with jax.named_scope("layer"):
            return jnp.tanh(x @ w)

    def mlp(params, x):
        for w in params:
            x = layer(w, x)
        return jnp.sum(x**2)

    shapes = [jax.ShapeDtypeStruct((a, b), jnp.float32) for a, b in itertools.pairwise([8, 6, 3])]
    return export.export(jax.jit(mlp))(shapes, jax.ShapeDtypeStruct((2, 8), jnp.float32))


def _mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))


def _sharded():
    f = jax.jit(
        lambda x: jnp.sin(x) @ x.T,
        in_shardings=NamedSharding(_mesh(), P("x", "y")),
        out_shardings=NamedSharding(_mesh(), P("x")),
    )
    return export.export(f)(jax.ShapeDtypeStruct((8, 4), jnp.float32))


def _poly():
    (b,) = export.symbolic_shape("b")
    return export.export(jax.jit(lambda x: jnp.cos(x) * x.shape[0]))(
        jax.ShapeDtypeStruct((b, 3), jnp.float32)
    )


_FUNCTIONS = {"sin": _sin, "mlp": _mlp, "sharded": _sharded, "poly": _poly}


@pytest.fixture(scope="module", params=sorted(_FUNCTIONS))
def live(request):
    return _FUNCTIONS[request.param]()


def _args(exp):
    leaves = [
        np.linspace(-1, 1, int(np.prod(s)), dtype=a.dtype).reshape(s)
        for a in exp.in_avals
        for s in [tuple(d if isinstance(d, int) else 5 for d in a.shape)]
    ]
    if exp.nr_devices > 1:
        leaves = jax.device_put(leaves, list(exp.in_shardings_jax(_mesh())))
    return jax.tree.unflatten(exp.in_tree, leaves)[0]


@pytest.mark.parametrize("vjp_order", [1, 2])
def test_two_call_sites_give_the_same_bytes(live, vjp_order):
    first = _dumps_from_here(live, vjp_order)
    assert _dumps_from_elsewhere(live, vjp_order) == first
    # ... and the loaded archive writes itself back byte for byte.
    assert _dumps_from_here(jaxport.loads(first), vjp_order) == first


def test_primal_module_is_jax_own_and_vjp_modules_have_no_source_locations(live):
    back = jaxport.loads(_dumps_from_here(live, 2))
    assert back.mlir_module_serialized == live.mlir_module_serialized
    assert live.vjp().mlir_module().count(".py") > 0  # what the archive must not carry
    for vjp in (back.vjp(), back.vjp().vjp()):
        text = vjp.mlir_module()
        assert ".py" not in text
        assert "loc(" not in text.replace("loc(unknown)", "").replace("loc(#loc)", "")


def _sum_leaves(tree):
    return sum(jnp.sum(leaf) for leaf in jax.tree.leaves(tree))


def _assert_trees_close(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_grad_through_the_loaded_archive(live):
    back = jaxport.loads(_dumps_from_elsewhere(live, 2))
    args = _args(live)

    def grad(call):
        return jax.grad(lambda *a: _sum_leaves(call(*a)))

    def grad2(call):
        return jax.grad(lambda *a: _sum_leaves(grad(call)(*a)))

    for g in (grad, grad2):
        _assert_trees_close(jax.jit(g(back.call))(*args), jax.jit(g(live.call))(*args))


def test_deserialized_vjp_modules_are_stored_unchanged():
    native = export.deserialize(_sin().serialize(vjp_order=1))
    assert _archive.stored_vjp(native).mlir_module_serialized == native.vjp().mlir_module_serialized
    back = jaxport.loads(_dumps_from_here(native, 1))
    assert back.vjp().mlir_module_serialized == native.vjp().mlir_module_serialized
