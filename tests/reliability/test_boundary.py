"""The one translation boundary (export/_boundary.py) maps every third-party error.

The table lists each exception type the reader was seen to let out before issue 9 (from
``loads``, from ``.vjp()``, from ``inspect``), and the others the libraries under the reader
raise; each, raised inside the boundary, must come out as ``CorruptArchiveError`` naming the
original type, with the original as ``__cause__``.
"""

from __future__ import annotations

import struct
import tokenize

import pytest
import zstandard
from jax._src import core as jax_core
from jax._src.export import shape_poly
from jax._src.named_sharding import DuplicateSpecError

import jaxport
from jaxport.export._boundary import TRANSLATED_ERRORS, translating_read_errors


def _unicode_error() -> UnicodeDecodeError:
    return UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


def _xla_error() -> BaseException:
    from jax._src.lib import xla_client

    proto = xla_client.OpSharding()
    proto.type = xla_client.OpSharding.Type.OTHER
    proto.tile_assignment_dimensions = [2]
    try:
        xla_client.HloSharding.from_proto(proto)
    except Exception as e:  # jax.errors.JaxRuntimeError, a RuntimeError
        return e
    raise AssertionError("XLA accepted a tile assignment without devices")


#: (exception, the name the message must give it)
SEEN = [
    (DuplicateSpecError("duplicate", None, None), "DuplicateSpecError"),
    (NotImplementedError("equality constraints"), "NotImplementedError"),
    (jax_core.InconclusiveDimensionOperation("inconclusive"), "InconclusiveDimensionOperation"),
    (shape_poly.InconclusiveDimensionOperation("inconclusive"), "InconclusiveDimensionOperation"),
    (ZeroDivisionError("integer division or modulo by zero"), "ZeroDivisionError"),
    (AssertionError((0, "P('x',)")), "AssertionError"),
    (tokenize.TokenError("EOF in multi-line statement", (2, 0)), "tokenize.TokenError"),
    (RuntimeError("std::bad_cast"), "RuntimeError"),
    (struct.error("unpack_from requires a buffer"), "struct.error"),
    (_unicode_error(), "UnicodeDecodeError"),
    (TypeError("missing 1 required positional argument"), "TypeError"),
    (ValueError("invalid memory kind"), "ValueError"),
    (RecursionError("maximum recursion depth exceeded"), "RecursionError"),
    (IndexError("index out of range"), "IndexError"),
    (KeyError(7), "KeyError"),
    (OverflowError("int too big"), "OverflowError"),
    (AttributeError("no attribute"), "AttributeError"),
    (MemoryError(), "MemoryError"),
    (zstandard.ZstdError("corrupted block"), "ZstdError"),
]


@pytest.mark.parametrize("error, name", SEEN, ids=[n for _, n in SEEN])
def test_each_third_party_error_becomes_corrupt_archive_error(
    error: BaseException, name: str
) -> None:
    with (
        pytest.raises(jaxport.CorruptArchiveError) as e,
        translating_read_errors(where="in_avals", index=3),
    ):
        raise error
    assert "in_avals[3]: " in str(e.value)
    assert name in str(e.value)
    assert e.value.__cause__ is error


def test_xla_status_errors_are_translated() -> None:
    error = _xla_error()
    with (
        pytest.raises(jaxport.CorruptArchiveError, match="RuntimeError") as e,
        translating_read_errors(),
    ):
        raise error
    assert e.value.__cause__ is error


def test_the_table_covers_every_type_seen() -> None:
    for error, _ in SEEN:
        assert isinstance(error, TRANSLATED_ERRORS), type(error)


def test_nested_boundaries_build_the_location_and_add_the_path() -> None:
    with (
        pytest.raises(jaxport.CorruptArchiveError) as e,
        translating_read_errors(path="a.jaxport"),
        translating_read_errors(where="the VJP of order 2"),
        translating_read_errors(where="in_shardings", index=0),
    ):
        raise jaxport.CorruptArchiveError("a PartitionSpec of 3 entries for rank 1")
    assert str(e.value) == (
        "the VJP of order 2: in_shardings[0]: a PartitionSpec of 3 entries for rank 1 (a.jaxport)"
    )
    assert e.value.path == "a.jaxport"


def test_other_jaxport_errors_pass_unchanged() -> None:
    error = jaxport.UnsupportedVersionError("calling convention version", 99, (9, 10))
    with (
        pytest.raises(jaxport.UnsupportedVersionError) as e,
        translating_read_errors(where="in_avals"),
    ):
        raise error
    assert e.value is error


def test_long_messages_are_cut() -> None:
    with pytest.raises(jaxport.CorruptArchiveError) as e, translating_read_errors():
        raise ValueError("x" * 100_000)
    assert len(str(e.value)) < 400


def test_what_is_not_an_error_of_the_input_passes() -> None:
    with pytest.raises(KeyboardInterrupt), translating_read_errors():
        raise KeyboardInterrupt
