"""Abstract values: ``jax.core.ShapedArray`` <-> ``jaxport.fb.AbstractValue``.

Shapes may hold symbolic dimensions (https://docs.jax.dev/en/latest/export/shape_poly.html).
All symbolic dimensions of one Exported share one ``SymbolicScope``; its explicit constraints
(``"a >= b"``) are stored beside the avals, so after a round trip a bad shape still fails with
the constraint that it breaks, not just "Error refining shapes".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import flatbuffers
import jax
import numpy as np
from jax import export as jax_export
from jax._src import core

from jaxport._errors import CorruptArchiveError
from jaxport.export import _compat, _fb, _shardings
from jaxport.export._dtypes import decode_dtype, encode_dtype
from jaxport.schema import fb

__all__ = [
    "AvalTables",
    "decode_aval",
    "decode_symbolic_scope",
    "encode_aval",
    "symbolic_constraints",
]

_MEMORY_SPACES = {
    "Device": fb.MemorySpace.Device,
    "Host": fb.MemorySpace.Host,
    "Any": fb.MemorySpace.Any,
}
_MEMORY_SPACE_NAMES = {v: k for k, v in _MEMORY_SPACES.items()}


def encode_aval(builder: flatbuffers.Builder, aval: Any, meshes: _shardings.MeshTable) -> int:
    """An ``fb.AbstractValue`` for ``aval``, with its own sharding if it names a mesh."""
    symbolic = not all(core.is_constant_dim(d) for d in aval.shape)
    shape = builder.CreateNumpyVector(
        np.array([int(d) if core.is_constant_dim(d) else -1 for d in aval.shape], dtype=np.int64)
    )
    dim_exprs = None
    if symbolic:
        exprs = ("" if core.is_constant_dim(d) else str(d) for d in aval.shape)
        dim_exprs = _fb.str_vector(builder, exprs)
    dtype, prng_impl = encode_dtype(aval.dtype)
    prng = builder.CreateString(prng_impl) if prng_impl else None
    vma_names = _compat.vma_of(aval)
    vma = _fb.str_vector(builder, vma_names) if vma_names else None
    memory_space = _compat.memory_space_name(aval)
    sharding = getattr(aval, "sharding", None)
    sharding_off = None
    if isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh.axis_names:
        sharding_off = _shardings.encode_named_sharding(builder, sharding, meshes)

    fb.AbstractValueStart(builder)
    fb.AbstractValueAddShape(builder, shape)
    if dim_exprs is not None:
        fb.AbstractValueAddDimExprs(builder, dim_exprs)
    fb.AbstractValueAddDtype(builder, dtype)
    if prng is not None:
        fb.AbstractValueAddPrngImpl(builder, prng)
    fb.AbstractValueAddWeakType(builder, bool(aval.weak_type))
    if memory_space is not None:
        fb.AbstractValueAddMemorySpace(builder, _MEMORY_SPACES[memory_space])
    if vma is not None:
        fb.AbstractValueAddVma(builder, vma)
    if sharding_off is not None:
        fb.AbstractValueAddSharding(builder, sharding_off)
    return fb.AbstractValueEnd(builder)


class AvalTables:
    """Encodes avals into one header, storing each static, mesh-free aval once.

    FlatBuffers lets several vectors point at one table; the primal's and each VJP's avals
    repeat, so sharing them makes the header smaller and faster to write.
    """

    def __init__(self) -> None:
        self._offsets: dict[Any, int] = {}

    def encode(self, builder: flatbuffers.Builder, aval: Any, meshes: _shardings.MeshTable) -> int:
        """The offset of an ``fb.AbstractValue`` for ``aval``, shared where possible."""
        key = _shareable_key(aval)
        if key is None:
            return encode_aval(builder, aval, meshes)
        if key not in self._offsets:
            self._offsets[key] = encode_aval(builder, aval, meshes)
        return self._offsets[key]


def _shareable_key(aval: Any) -> Any:
    sharding = getattr(aval, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh.axis_names:
        return None
    if not all(core.is_constant_dim(d) for d in aval.shape):
        return None
    return (
        tuple(aval.shape),
        aval.dtype,
        bool(aval.weak_type),
        _compat.memory_space_name(aval),
        tuple(_compat.vma_of(aval)),
    )


def decode_aval(table: fb.AbstractValue, scope: Any, meshes: Sequence[Any]) -> Any:
    """The ``ShapedArray`` of an ``fb.AbstractValue``; symbolic dimensions parse in ``scope``.

    Its sharding, when stored, is built over ``meshes`` (the Exported's abstract meshes).

    Raises:
        CorruptArchiveError: a malformed shape or dimension expression.
        UnsupportedFeatureError: a dtype the running jax does not define.
    """
    dims = table.ShapeAsNumpy().tolist() if not table.ShapeIsNone() else []
    exprs = _fb.read_strs(table, "DimExprs")
    if exprs and len(exprs) != len(dims):
        raise CorruptArchiveError("an aval's dim_exprs and shape differ in length")
    if any(d < -1 for d in dims) or (-1 in dims and not exprs):
        raise CorruptArchiveError(f"invalid shape {dims}")
    shape: tuple[Any, ...] = tuple(dims)
    if exprs:
        shape = _symbolic_shape(
            [e if d == -1 else str(d) for d, e in zip(dims, exprs, strict=True)], scope
        )
    dtype = decode_dtype(table.Dtype(), _fb.read_str(table.PrngImpl()) or None)
    space = _MEMORY_SPACE_NAMES.get(table.MemorySpace())
    sharding_table = table.Sharding()
    sharding = None
    if sharding_table is not None:
        sharding = _shardings.decode_named_sharding(sharding_table, meshes)
    return _compat.make_shaped_array(
        shape,
        dtype,
        weak_type=table.WeakType(),
        memory_space=space,
        vma=frozenset(_fb.read_strs(table, "Vma")),
        sharding=sharding,
    )


def _symbolic_shape(dims: Sequence[str], scope: Any) -> tuple[Any, ...]:
    if scope is None:
        raise CorruptArchiveError("a symbolic dimension in an Exported without symbolic scope")
    try:
        return tuple(jax_export.symbolic_shape(",".join(dims), scope=scope))
    except ValueError as e:
        raise CorruptArchiveError(f"invalid symbolic shape ({', '.join(dims)}): {e}") from None


def symbolic_constraints(avals: Iterable[Any]) -> tuple[bool, tuple[str, ...]]:
    """``(has_symbolic_dims, constraints)`` of the scope the avals' symbolic dims share."""
    for aval in avals:
        for d in aval.shape:
            if not core.is_constant_dim(d):
                scope = d.scope
                return True, tuple(c.debug_str for c in scope._explicit_constraints)
    return False, ()


def decode_symbolic_scope(table: fb.Exported) -> Any:
    """A fresh ``SymbolicScope`` with the Exported's constraints.

    Raises:
        CorruptArchiveError: a constraint that does not parse.
    """
    constraints = _fb.read_strs(table, "SymbolicConstraints")
    try:
        return jax_export.SymbolicScope(constraints)
    except ValueError as e:
        raise CorruptArchiveError(
            f"invalid symbolic constraints {list(constraints)}: {e}"
        ) from None
