"""Small helpers around the FlatBuffers builder and generated readers.

Python's FlatBuffers runtime has no verifier: these readers bound every vector length by the
size of the buffer it lies in, so a corrupt length cannot make a reader loop for long, and
decode strings strictly. Any other fault of a corrupt buffer surfaces as one of the exceptions
in ``READ_ERRORS``, which the archive reader turns into ``CorruptArchiveError``.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import flatbuffers
import numpy as np

from jaxport._errors import CorruptArchiveError, JaxportError

__all__ = [
    "READ_ERRORS",
    "bytes_vector",
    "count",
    "read_bytes",
    "read_str",
    "read_strs",
    "read_tables",
    "str_vector",
    "table_vector",
    "translating_read_errors",
    "uint32_vector",
]

T = TypeVar("T")

#: What the FlatBuffers runtime raises on a malformed buffer.
READ_ERRORS = (
    struct.error,
    IndexError,
    UnicodeDecodeError,
    RecursionError,
    OverflowError,
    TypeError,
    AttributeError,
    ValueError,
    MemoryError,
)


def _offsets_vector(builder: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return builder.EndVector()


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
    return builder.CreateNumpyVector(np.asarray(values, dtype=np.uint32))


def bytes_vector(builder: flatbuffers.Builder, data: bytes) -> int:
    """A vector of ubyte."""
    return builder.CreateByteVector(data)


def count(n: int, table: Any) -> int:
    """A vector length, checked against the size of the buffer ``table`` lies in."""
    if n > len(table._tab.Bytes):
        raise CorruptArchiveError(f"vector length {n} exceeds the header size")
    return n


def read_str(value: bytes | None) -> str:
    """A FlatBuffers string field as str; an absent one as ""."""
    return "" if value is None else value.decode("utf-8")


def read_strs(table: Any, name: str) -> tuple[str, ...]:
    """The vector of strings field ``name`` (generated accessors ``Name(i)`` / ``NameLength()``)."""
    get = getattr(table, name)
    n = count(getattr(table, name + "Length")(), table)
    return tuple(read_str(get(i)) for i in range(n))


def read_tables(table: Any, name: str) -> list[Any]:
    """The vector of tables field ``name`` (accessors ``Name(i)`` / ``NameLength()``)."""
    get = getattr(table, name)
    return [get(i) for i in range(count(getattr(table, name + "Length")(), table))]


def read_bytes(table: Any, name: str) -> bytes | None:
    """The ubyte vector field ``name`` as bytes, or None when absent."""
    if getattr(table, name + "IsNone")():
        return None
    return getattr(table, name + "AsNumpy")().tobytes()


@contextlib.contextmanager
def translating_read_errors(path: str | None = None) -> Iterator[None]:
    """Turns the FlatBuffers runtime's errors on a malformed buffer into CorruptArchiveError.

    jaxport's own errors pass through unchanged.
    """
    try:
        yield
    except JaxportError:
        raise
    except READ_ERRORS as e:
        raise CorruptArchiveError(f"malformed header: {type(e).__name__}: {e}", path=path) from None
