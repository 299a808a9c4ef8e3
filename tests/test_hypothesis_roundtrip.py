"""Hypothesis round trips: random pytrees of random avals, with symbolic dims and metadata."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import export

import jaxport
from _helpers import roundtrip

_DTYPES = ["float32", "int32", "bool", "bfloat16", "float16", "int8", "uint8", "complex64"]

_leaves = st.builds(
    lambda shape, dtype, weak: jax.ShapeDtypeStruct(
        tuple(shape), getattr(jnp, dtype), weak_type=weak
    ),
    st.lists(st.integers(0, 4), max_size=3),
    st.sampled_from(_DTYPES),
    st.booleans(),
)
_trees = st.recursive(
    _leaves | st.none(),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text("abcxyz_", min_size=1, max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree=_trees,
    metadata=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3),
)
def test_random_pytrees_round_trip(tree, metadata):
    exp = export.export(jax.jit(lambda t: jax.tree.map(lambda x: x, t)))(tree)
    back = roundtrip(exp, metadata=metadata)
    assert jaxport.inspect(jaxport.dumps(exp, metadata=metadata)).metadata == metadata
    args = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), tree)
    out = back.call(args)
    assert jax.tree.structure(out) == jax.tree.structure(args)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    extra=st.integers(0, 3),
    factor=st.integers(1, 3),
    constraint=st.sampled_from(["a >= 2", "a <= 64", "b >= a", "a >= b + 1"]),
)
def test_random_symbolic_shapes_round_trip(extra, factor, constraint):
    a, b = export.symbolic_shape("a, b", constraints=[constraint])
    exp = export.export(jax.jit(lambda x, y: (jnp.tile(x, factor), y[:extra] if extra else y)))(
        jax.ShapeDtypeStruct((a + extra, 2), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.int32)
    )
    back = roundtrip(exp)
    assert str(back.out_avals[0].shape) == str(exp.out_avals[0].shape)
