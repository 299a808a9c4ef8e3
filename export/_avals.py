"""Abstract values: ``jax.core.ShapedArray`` <-> ``jaxport.fb.AbstractValue``.

Shapes may hold symbolic dimensions (https://docs.jax.dev/en/latest/export/shape_poly.html).
All symbolic dimensions of one Exported share one ``SymbolicScope``; its explicit constraints
(``"a >= b"``) are stored beside the avals, so after a round trip a bad shape still fails with
the constraint that it breaks, not just "Error refining shapes".

Reading is bounded: each distinct aval table is decoded once (the writer shares them), and
expressions and constraints pass ``_symbolic``'s checks before jax parses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import flatbuffers
import jax
import numpy as np

from jaxport import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export import _compat, _fb, _limits, _shardings, _symbolic
from jaxport.export._dtypes import decode_dtype, encode_dtype
from jaxport.export._jax import core
from jaxport.schema import fb

__all__ = [
    "AvalDecoder",
    "AvalTables",
    "check_symbolic",
    "encode_aval",
    "read_constraints",
    "symbolic_constraints",
]

_MEMORY_SPACES = {
    "Device": fb.MemorySpace.Device,
    "Host": fb.MemorySpace.Host,
    "Any": fb.MemorySpace.Any,
}
_MEMORY_SPACE_NAMES = {v: k for k, v in _MEMORY_SPACES.items()}


def encode_aval(builder: flatbuffers.Builder, aval: Any, meshes: _shardings.MeshTable) -> int:
    """An ``fb.AbstractValue`` for ``aval``, with its own sharding if it names a mesh.

    Raises:
        UnsupportedFeatureError: more than ``_limits.MAX_RANK`` dimensions, or a dtype or
            sharding that cannot be stored.
    """
    if len(aval.shape) > _limits.MAX_RANK:
        raise UnsupportedFeatureError(
            f"an aval of rank {len(aval.shape)} cannot be stored (limit {_limits.MAX_RANK})"
        )
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
    return int(fb.AbstractValueEnd(builder))


class AvalTables:
    """Encodes avals into one header, storing each static, mesh-free aval once.

    FlatBuffers lets several vectors point at one table; the primal's and each VJP's avals
    repeat, so sharing them makes the header smaller and faster to write. Also counts the
    header's symbolic text against the reader's limit.
    """

    def __init__(self) -> None:
        self._offsets: dict[Any, int] = {}
        self._symbolic_chars = 0

    def add_symbolic_chars(self, n: int) -> None:
        """Counts the symbolic text of one more Exported (all VJP orders share one limit).

        Raises:
            UnsupportedFeatureError: over ``_limits.MAX_SYMBOLIC_CHARS`` in all.
        """
        self._symbolic_chars += n
        if self._symbolic_chars > _limits.MAX_SYMBOLIC_CHARS:
            raise UnsupportedFeatureError(
                f"more than {_limits.MAX_SYMBOLIC_CHARS} characters of distinct symbolic "
                "expressions and constraints cannot be stored"
            )

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
    shape = tuple(aval.shape)
    # ints first: a header has tens of avals, and is_constant_dim costs a call per dimension
    if not all(type(d) is int or core.is_constant_dim(d) for d in shape):
        return None
    vma = getattr(aval, "vma", None)
    return (
        shape,
        aval.dtype,
        bool(aval.weak_type),
        _compat.memory_space_name(aval),
        tuple(_compat.vma_of(aval)) if vma else (),
    )


class AvalDecoder:
    """Decodes the avals of one Exported, each distinct table once.

    Aval tables may be shared (``AvalTables``): a table already decoded is not decoded again,
    in this Exported or, for a static aval without sharding, in any (``shared``, keyed by the
    table's position in the header). Each distinct symbolic expression is parsed once.

    Args:
        constraints: the Exported's symbolic constraints, from ``read_constraints``.
        meshes: its abstract meshes, for avals with their own sharding.
        shared: decoded static, mesh-free avals of the whole header, by table position.

    Raises:
        ValueError, NotImplementedError: constraints that jax rejects (translated by the
            caller's ``translating_read_errors``).
    """

    def __init__(self, constraints: Sequence[str], meshes: Sequence[Any], shared: dict[int, Any]):
        self._expansion = _symbolic.expansion_of(constraints)
        # Built now when there are constraints (jax checks them), else at the first symbol.
        self._scope = _symbolic.make_scope(constraints) if constraints else None
        self._meshes = meshes
        self._shared = shared
        self._own: dict[int, Any] = {}
        self._dims: dict[str, Any] = {}

    def decode_at(self, exported: fb.Exported, position: int) -> Any:
        """The ``ShapedArray`` of the ``fb.AbstractValue`` at ``position`` in the header.

        Raises:
            CorruptArchiveError: a malformed shape, dimension expression, enum or sharding.
            UnsupportedFeatureError: a dtype the running jax does not define.
        """
        aval = self._shared.get(position)
        if aval is None:
            aval = self._own.get(position)
        if aval is None:
            aval, static = self._decode(_fb.table_at(fb.AbstractValue, exported, position))
            (self._shared if static else self._own)[position] = aval
        return aval

    def _decode(self, table: fb.AbstractValue) -> tuple[Any, bool]:
        # The common aval (static shape, no PRNG impl, vma or sharding) from one vtable read.
        _, exprs_at, dtype_at, prng_at, weak_at, space_at, vma_at, sharding_at = _fb.field_offsets(
            table, 8
        )
        if not (exprs_at or prng_at or vma_at or sharding_at):
            shape = self._shape(table, static=True)
            dtype = decode_dtype(_fb.read_uint8(table, dtype_at), None)
            space = _fb.read_uint8(table, space_at)
            if space != fb.MemorySpace.Missing and space not in _MEMORY_SPACE_NAMES:
                raise CorruptArchiveError(f"unknown memory space {space}")
            aval = _compat.make_shaped_array(
                shape,
                dtype,
                weak_type=bool(_fb.read_uint8(table, weak_at)),
                memory_space=_MEMORY_SPACE_NAMES.get(space),
                vma=frozenset(),
                sharding=None,
            )
            return aval, True
        shape = self._shape(table)
        dtype = decode_dtype(table.Dtype(), _fb.read_str(table.PrngImpl()) or None)
        space = table.MemorySpace()
        if space != fb.MemorySpace.Missing and space not in _MEMORY_SPACE_NAMES:
            raise CorruptArchiveError(f"unknown memory space {space}")
        sharding_table = table.Sharding()
        sharding = None
        if sharding_table is not None:
            sharding = _shardings.decode_named_sharding(sharding_table, self._meshes)
            _shardings.check_spec_rank(sharding.spec, len(shape))
        aval = _compat.make_shaped_array(
            shape,
            dtype,
            weak_type=table.WeakType(),
            memory_space=_MEMORY_SPACE_NAMES.get(space),
            vma=frozenset(_fb.read_strs(table, "Vma")),
            sharding=sharding,
        )
        return aval, sharding is None and table.DimExprsIsNone()

    def _shape(self, table: fb.AbstractValue, static: bool | None = None) -> tuple[Any, ...]:
        """The shape; ``static``: whether ``dim_exprs`` is absent, where the caller knows."""
        dims = _fb.read_ints(table, "Shape")
        if len(dims) > _limits.MAX_RANK:
            raise CorruptArchiveError(f"an aval of rank {len(dims)} (limit {_limits.MAX_RANK})")
        if static if static is not None else table.DimExprsIsNone():
            if any(d < 0 for d in dims):
                raise CorruptArchiveError(f"invalid shape {dims}")
            return tuple(dims)
        exprs = _fb.read_strs(table, "DimExprs")
        if len(exprs) != len(dims):
            raise CorruptArchiveError("an aval's dim_exprs and shape differ in length")
        if -1 not in dims:
            raise CorruptArchiveError("an aval with dim_exprs but no symbolic dimension")
        return tuple(self._dim(d, e, i) for i, (d, e) in enumerate(zip(dims, exprs, strict=True)))

    def _dim(self, size: int, expr: str, index: int) -> Any:
        if size != -1:
            if size < 0 or expr:
                raise CorruptArchiveError(
                    f"dimension {index}: size {size} with expression {expr!r}"
                )
            return size
        dim = self._dims.get(expr)
        if dim is None:
            problem = _symbolic.expression_problem(expr, self._expansion)
            if problem is not None:
                raise CorruptArchiveError(f"dimension {index}: expression {expr!r}: {problem}")
            _limits.charge_symbolic(len(expr))
            if self._scope is None:
                self._scope = _symbolic.make_scope(())
            dim = _symbolic.parse_dimension(expr, self._scope)
            if isinstance(dim, int) and dim < 0:
                raise CorruptArchiveError(f"dimension {index}: {expr!r} is negative")
            self._dims[expr] = dim
        return dim


def read_constraints(table: fb.Exported) -> tuple[str, ...]:
    """The Exported's symbolic constraints, each checked and charged to the budget.

    Raises:
        CorruptArchiveError: more than ``_limits.MAX_CONSTRAINTS``, or one that is not of the
            grammar or within the limits of ``_symbolic``.
    """
    constraints = _fb.read_strs(table, "SymbolicConstraints")
    problem = _constraints_problem(constraints)
    if problem is not None:
        raise CorruptArchiveError(problem)
    for c in constraints:
        _limits.charge_symbolic(len(c))
    return constraints


def _constraints_problem(constraints: Sequence[str]) -> str | None:
    if len(constraints) > _limits.MAX_CONSTRAINTS:
        return f"{len(constraints)} symbolic constraints (limit {_limits.MAX_CONSTRAINTS})"
    expansion = _symbolic.expansion_of(constraints)
    for i, c in enumerate(constraints):
        problem = _symbolic.constraint_problem(c, expansion)
        if problem is not None:
            return f"symbolic constraint {i} {c!r}: {problem}"
    return None


def check_symbolic(avals: Iterable[Any], constraints: Sequence[str]) -> int:
    """Checks that a reader accepts the symbolic dimensions of ``avals`` and ``constraints``.

    Returns:
        The characters of the distinct expressions and the constraints: the reader allows
        ``_limits.MAX_SYMBOLIC_CHARS`` over all VJP orders.

    Raises:
        UnsupportedFeatureError: a constraint or expression over the limits of ``_symbolic``.
    """
    problem = _constraints_problem(constraints)
    if problem is not None:
        raise UnsupportedFeatureError(f"cannot store {problem}")
    expansion = _symbolic.expansion_of(constraints)
    texts = {str(d) for a in avals for d in a.shape if not core.is_constant_dim(d)}
    for text in sorted(texts):
        problem = _symbolic.expression_problem(text, expansion)
        if problem is not None:
            raise UnsupportedFeatureError(
                f"cannot store the symbolic dimension {text!r}: {problem}"
            )
    return sum(len(t) for t in texts) + sum(len(c) for c in constraints)


def symbolic_constraints(avals: Iterable[Any]) -> tuple[bool, tuple[str, ...]]:
    """``(has_symbolic_dims, constraints)`` of the scope the avals' symbolic dims share."""
    for aval in avals:
        for d in aval.shape:
            if not core.is_constant_dim(d):
                scope = d.scope
                return True, tuple(c.debug_str for c in scope._explicit_constraints)
    return False, ()
