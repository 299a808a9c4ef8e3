"""Small helpers around the FlatBuffers builder and generated readers.

Python's FlatBuffers runtime has no verifier: these readers bound every vector length by the
size of the buffer it lies in, decode strings strictly, and charge what they read to the
header's work budget (``_limits.Budget``), so that shared vectors cannot make a small header
expensive to read. Any other fault of a corrupt buffer surfaces as a third-party exception,
which ``translating_read_errors`` (``_boundary``) turns into ``CorruptArchiveError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import flatbuffers
import numpy as np

from jaxport import CorruptArchiveError
from jaxport.export import _limits
from jaxport.export._boundary import translating_read_errors
from jaxport.export._fb_builder import Builder

__all__ = [
    "bytes_vector",
    "count",
    "field_offsets",
    "read_bytes",
    "read_ints",
    "read_node_header",
    "read_str",
    "read_strs",
    "read_tables",
    "read_uint8",
    "str_vector",
    "table_at",
    "table_positions",
    "table_vector",
    "translating_read_errors",
    "uint32_vector",
]

T = TypeVar("T")


def _offsets_vector(builder: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    if isinstance(builder, Builder):  # the same bytes, in one step
        return int(builder.offsets_vector(offsets))
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return int(builder.EndVector())


def str_vector(builder: flatbuffers.Builder, strings: Iterable[str]) -> int:
    """A vector of strings."""
    return _offsets_vector(builder, [builder.CreateString(s) for s in strings])


def table_vector(
    builder: flatbuffers.Builder,
    encode_one: Callable[[flatbuffers.Builder, T], int],
    items: Iterable[T],
) -> int:
    """A vector of tables, each built by ``encode_one``."""
    return _offsets_vector(builder, [encode_one(builder, x) for x in items])


def uint32_vector(builder: flatbuffers.Builder, values: Sequence[int]) -> int:
    """A vector of uint32."""
    return int(builder.CreateNumpyVector(np.asarray(values, dtype=np.uint32)))


def int64_vector(builder: flatbuffers.Builder, values: Sequence[int]) -> int:
    """A vector of long."""
    return int(builder.CreateNumpyVector(np.asarray(values, dtype=np.int64)))


def bytes_vector(builder: flatbuffers.Builder, data: bytes) -> int:
    """A vector of ubyte."""
    return int(builder.CreateByteVector(data))


def count(n: int, table: Any, itemsize: int = 4) -> int:
    """A vector length, checked against the size of the buffer ``table`` lies in, and charged.

    Raises:
        CorruptArchiveError: ``n`` items of ``itemsize`` bytes cannot fit in the buffer, or the
            header's work budget is spent.
    """
    if n * itemsize > len(table._tab.Bytes):
        raise CorruptArchiveError(f"vector length {n} exceeds the header size")
    _limits.charge(n * itemsize)
    return n


def read_str(value: bytes | None) -> str:
    """A FlatBuffers string field as str; an absent one as "". Charged to the budget."""
    if value is None:
        return ""
    _limits.charge(len(value))
    return value.decode("utf-8")


def read_strs(table: Any, name: str) -> tuple[str, ...]:
    """The vector of strings field ``name`` (generated accessors ``Name(i)`` / ``NameLength()``)."""
    get = getattr(table, name)
    n = count(getattr(table, name + "Length")(), table)
    return tuple(read_str(get(i)) for i in range(n))


def read_tables(table: Any, name: str) -> list[Any]:
    """The vector of tables field ``name`` (accessors ``Name(i)`` / ``NameLength()``)."""
    get = getattr(table, name)
    return [get(i) for i in range(count(getattr(table, name + "Length")(), table))]


#: vtable slots of the vectors of tables that ``table_positions`` reads in bulk. Fields are
#: only ever appended (schema/jaxport.fbs), so these never change; a test checks them against
#: the generated readers.
SLOTS = {
    "Exported.InAvals": 3,
    "Exported.OutAvals": 4,
    "Exported.InShardings": 7,
    "Exported.OutShardings": 8,
    "Model.Tensors": 1,
    "PyTreeDef.Nodes": 0,
}


def table_positions(table: Any, field: str) -> list[int]:
    """Where the tables of the vector field ``field`` (``"Exported.InAvals"``) start.

    Read in bulk, with the length checked and charged as by ``read_tables``, which makes a
    table object per element: that costs microseconds per element, and shared tables (many
    positions alike) need to be read only once. ``table_at`` makes the table at a position.

    Raises:
        CorruptArchiveError: the vector does not fit in the header.
        ValueError, struct.error: its elements lie outside the buffer.
    """
    tab = table._tab
    o = tab.Offset(4 + 2 * SLOTS[field])
    if o == 0:
        return []
    start = tab.Vector(o)
    n = count(tab.VectorLen(o), table)
    if n <= _FEW:  # numpy's fixed cost is most of a short vector's
        few = struct.unpack_from(f"<{n}I", tab.Bytes, _checked(start))
        return [r + start + 4 * i for i, r in enumerate(few)]
    relative = np.frombuffer(tab.Bytes, dtype="<u4", count=n, offset=start).astype(np.int64)
    positions: list[int] = (relative + start + 4 * np.arange(n, dtype=np.int64)).tolist()
    return positions


_FEW = 64


def table_at(cls: type[T], table: Any, position: int) -> T:
    """The table of generated class ``cls`` at ``position`` in ``table``'s buffer."""
    obj = cls()
    obj.Init(table._tab.Bytes, position)  # type: ignore[attr-defined]
    return obj


def read_bytes(table: Any, name: str) -> bytes | None:
    """The ubyte vector field ``name`` as bytes, or None when absent."""
    if getattr(table, name + "IsNone")():
        return None
    array = getattr(table, name + "AsNumpy")()
    count(len(array), table, 1)
    return bytes(array.tobytes())


def read_ints(table: Any, name: str) -> list[int]:
    """The numeric vector field ``name`` as ints; an absent one as []."""
    if getattr(table, name + "IsNone")():
        return []
    array = getattr(table, name + "AsNumpy")()
    count(len(array), table, array.itemsize)
    return [int(x) for x in array.tolist()]


_SOFFSET = struct.Struct("<i")
_VOFFSET = struct.Struct("<H")
_UINT8 = struct.Struct("<B")
_UINT32 = struct.Struct("<I")


def field_offsets(table: Any, count: int) -> tuple[int, ...]:
    """The vtable entries of ``table``'s first ``count`` fields (0: absent), read at once, as
    the generated readers' ``Offset`` reads them one at a time (three checked reads each).

    Raises:
        struct.error: a read outside the buffer, as the generated readers raise it.
    """
    tab = table._tab
    buf, position = tab.Bytes, tab.Pos
    vtable = position - _SOFFSET.unpack_from(buf, _checked(position))[0]
    size = _VOFFSET.unpack_from(buf, _checked(vtable))[0]
    return tuple(
        _VOFFSET.unpack_from(buf, vtable + 4 + 2 * i)[0] if 4 + 2 * i < size else 0
        for i in range(count)
    )


def read_uint8(table: Any, offset: int) -> int:
    """The uint8 (or bool) field at vtable entry ``offset`` (``field_offsets``); 0 if absent.

    Raises:
        struct.error: a read outside the buffer.
    """
    if not offset:
        return 0
    return int(_UINT8.unpack_from(table._tab.Bytes, table._tab.Pos + offset)[0])


def read_node_header(table: Any, position: int) -> tuple[int, int]:
    """``(Kind(), NumChildren())`` of the ``fb.PyTreeNode`` at ``position`` in ``table``'s
    buffer, as the generated readers return them (0 for an absent field), its vtable read
    once: a pytree's nodes are read by the hundred, and the generated readers cost three
    checked reads per field.

    Raises:
        struct.error: a read outside the buffer (a negative position included), as the
            generated readers raise it (``translating_read_errors`` makes it a
            ``CorruptArchiveError``).
    """
    buf = table._tab.Bytes
    vtable = position - _SOFFSET.unpack_from(buf, _checked(position))[0]
    size = _VOFFSET.unpack_from(buf, _checked(vtable))[0]
    kind_at = _VOFFSET.unpack_from(buf, vtable + 4)[0] if size > 4 else 0
    count_at = _VOFFSET.unpack_from(buf, vtable + 6)[0] if size > 6 else 0
    kind = _UINT8.unpack_from(buf, position + kind_at)[0] if kind_at else 0
    n = _UINT32.unpack_from(buf, position + count_at)[0] if count_at else 0
    return int(kind), int(n)


def _checked(position: int) -> int:
    # struct counts a negative offset from the buffer's end; FlatBuffers refuses it.
    if not 0 <= position < 2**32:
        raise struct.error(f"offset {position} outside the buffer")
    return position
