"""A ``bytes`` object filled in place: the one buffer a module's bytes are decompressed into.

jax keeps a module as ``bytes`` (``Exported.mlir_module_serialized``). Decompressing into a
``bytearray`` and converting it copies every byte once more (a 400 MB module: 0.2 s at this
machine's 1.9 GB/s memcpy). CPython's own way to fill a new ``bytes`` object is
``PyBytes_FromStringAndSize(NULL, n)``: uninitialized contents that its creator writes before
anyone else sees the object (https://docs.python.org/3/c-api/bytes.html). ``BytesWriter``
does that through ``ctypes`` and hands out a writable view of the contents, which its caller
fills and releases before the ``bytes`` object is used. Elsewhere than CPython it falls back
to a ``bytearray`` and a copy.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["BytesWriter"]

#: Below this size a plain ``bytes(bytearray)`` copy costs nothing worth avoiding.
_IN_PLACE_BYTES = 1 << 20


class BytesWriter:
    """``n`` bytes to fill through ``view`` (writable, format ``B``), then ``value()``.

    The view is the only way to the contents until ``value()`` (or ``release()``) releases it.
    The view (and every slice of it) does not keep the contents alive: whoever holds one holds
    the writer too (``Sha256Beside.update(piece, owner=writer)``).
    """

    def __init__(self, n: int):
        self._n = n
        self._bytes: bytes | None = None
        self._array: bytearray | None = None
        if n >= _IN_PLACE_BYTES and _API is not None:
            self._bytes = _API.new(n)
            self.view = memoryview((ctypes.c_char * n).from_address(_API.address(self._bytes)))
            self.view = self.view.cast("B")
        else:
            self._array = bytearray(n)
            self.view = memoryview(self._array)

    def value(self, length: int | None = None) -> bytes:
        """The first ``length`` bytes written (default all: the object itself, not a copy).

        Raises:
            ValueError: ``length`` is larger than the buffer.
        """
        length = self._n if length is None else length
        if length > self._n:
            raise ValueError(f"{length} bytes of a {self._n}-byte buffer")
        self.release()
        if self._bytes is not None and length == self._n:
            return self._bytes
        source: Any = self._bytes if self._bytes is not None else self._array
        return bytes(memoryview(source)[:length])

    def release(self) -> None:
        """Ends writing (the view is released); idempotent."""
        self.view.release()


class _CApi:
    """CPython's ``PyBytes_FromStringAndSize(NULL, n)`` and ``PyBytes_AsString``."""

    def __init__(self, pythonapi: Any):
        self._new = pythonapi.PyBytes_FromStringAndSize
        self._new.restype = ctypes.py_object
        self._new.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
        self._as_string = pythonapi.PyBytes_AsString
        self._as_string.restype = ctypes.c_void_p
        self._as_string.argtypes = (ctypes.py_object,)

    def new(self, n: int) -> bytes:
        data = self._new(None, n)
        assert isinstance(data, bytes) and len(data) == n
        return data

    def address(self, data: bytes) -> int:
        address = self._as_string(data)
        if not isinstance(address, int):
            raise MemoryError("PyBytes_AsString gave no address")
        return address


_API = _CApi(ctypes.pythonapi) if hasattr(ctypes, "pythonapi") else None
