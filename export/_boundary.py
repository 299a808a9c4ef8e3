"""The one place where the errors of the libraries under the reader become jaxport errors.

A hostile header reaches code that was never meant to see one: the FlatBuffers runtime
(``struct.error``, ``IndexError``, ``UnicodeDecodeError``), jax's symbolic-shape parser
(``tokenize.TokenError``, ``RecursionError``), its shape arithmetic
(``InconclusiveDimensionOperation``, ``ZeroDivisionError``, ``NotImplementedError``), its
sharding checks (``DuplicateSpecError``, ``AssertionError``), jaxlib's C++ bindings
(``RuntimeError: std::bad_cast``) and zstandard (``ZstdError``). Every reader of an archive runs
inside ``translating_read_errors``, which turns each of ``TRANSLATED_ERRORS`` into a
``CorruptArchiveError`` naming the original type, and the field where it happened.

jax's own two are looked up only once jax is loaded (they cannot be raised before): reading an
archive's header (a push of a file through a registry server) imports no jax.
"""

from __future__ import annotations

import functools
import struct
import sys
import tokenize
from types import TracebackType

import zstandard

from jaxport import CorruptArchiveError, JaxportError, UnsupportedFeatureError

__all__ = ["translating_read_errors"]  # and TRANSLATED_ERRORS, made on first use (__getattr__)

#: What a malformed header can make the libraries under the reader raise, but jax's own.
_LIBRARY_ERRORS: tuple[type[Exception], ...] = (
    struct.error,  # FlatBuffers: a read past the buffer
    LookupError,  # FlatBuffers, tables: IndexError, KeyError
    UnicodeError,  # strings that are not UTF-8
    RecursionError,  # jax's recursive parsers
    ArithmeticError,  # OverflowError, ZeroDivisionError
    TypeError,
    AttributeError,
    ValueError,  # also jax's parse errors
    MemoryError,
    AssertionError,  # jax's internal checks
    NotImplementedError,  # jax: repeated equality constraints
    RuntimeError,  # jaxlib's C++ (std::bad_cast, XLA status errors)
    tokenize.TokenError,  # jax's symbolic-shape tokenizer
    zstandard.ZstdError,
)


@functools.cache
def _jax_errors() -> tuple[type[Exception], ...]:
    """jax's shape arithmetic's and sharding checks' errors (imports jax)."""
    from jaxport.export._jax import core as jax_core
    from jaxport.export._jax import named_sharding

    return (jax_core.InconclusiveDimensionOperation, named_sharding.DuplicateSpecError)


def __getattr__(name: str) -> tuple[type[Exception], ...]:
    """``TRANSLATED_ERRORS``: every error ``translating_read_errors`` translates (imports jax)."""
    if name == "TRANSLATED_ERRORS":
        return _LIBRARY_ERRORS + _jax_errors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _translated(exc: BaseException) -> bool:
    if isinstance(exc, _LIBRARY_ERRORS):
        return True
    return "jax" in sys.modules and isinstance(exc, _jax_errors())


_MAX_DETAIL = 300


class translating_read_errors:
    """Turns third-party errors raised while reading into ``CorruptArchiveError``.

    ``where`` names what is being read (``"in_avals[3]"``); nested uses build a path
    (``"VJP order 1: in_avals[3]: ..."``). jaxport's own ``CorruptArchiveError`` and
    ``UnsupportedFeatureError`` raised inside get the same prefix, and ``path`` if they lack
    one; other jaxport errors pass through unchanged.

    Args:
        path: the file being read, for messages.
        where: the field being read.
        index: the element of that field being read, if any (formatted only on error).
    """

    __slots__ = ("index", "path", "where")

    def __init__(self, path: str | None = None, where: str = "", index: int | None = None):
        self.path = path
        self.where = where
        self.index = index

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        if isinstance(exc, JaxportError):
            located = self._locate(exc)
            if located is not exc:
                raise located from exc.__cause__
            return
        if _translated(exc):
            detail = str(exc)
            if len(detail) > _MAX_DETAIL:
                detail = detail[:_MAX_DETAIL] + "..."
            message = f"{_type_name(exc)}: {detail}"
            if not self.where:
                message = f"malformed header: {message}"
            raise CorruptArchiveError(self._prefixed(message), path=self.path) from exc

    def _prefixed(self, message: str) -> str:
        where = self.where if self.index is None else f"{self.where}[{self.index}]"
        return f"{where}: {message}" if where else message

    def _locate(self, exc: JaxportError) -> JaxportError:
        if not self.where and self.path is None:
            return exc
        if type(exc) is CorruptArchiveError and exc.offset is None and exc.path is None:
            return CorruptArchiveError(self._prefixed(str(exc)), path=self.path)
        if type(exc) is UnsupportedFeatureError and self.where:
            return UnsupportedFeatureError(self._prefixed(str(exc)))
        return exc


def _type_name(exc: BaseException) -> str:
    """``ValueError`` for a built-in, else the qualified name (``struct.error``)."""
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
