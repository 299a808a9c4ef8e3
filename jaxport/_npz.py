"""Reading an untrusted ``.npz`` (``numpy.savez``) without believing what it declares.

``numpy.load`` allocates each array from the shape its ``.npy`` header declares before reading
a byte of data, so a 260-byte file declaring 2^40 bytes is a ``MemoryError``; and it reads a
member only when asked, after the caller may already have read others. Here every member's
header is read and checked first (``headers``), against the zip directory and the caller's
expectations, and data is read only afterwards (``read``), each array at most the size its
member can hold:

- a member is stored (its declared size equals its stored size) or deflated, with a declared
  size at most ``MAX_DEFLATE_RATIO`` x its stored size (deflate cannot do better: RFC 1951's
  longest match, 258 bytes, costs at least 2 bits); any other compression is refused;
- an array's bytes (shape x item size) fit in its member's declared size after the header;
- object arrays (pickles) are refused (``allow_pickle=False``, as ``numpy.load``).
"""

from __future__ import annotations

import dataclasses
import math
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from jaxport._errors import RunError

__all__ = ["MAX_DEFLATE_RATIO", "MAX_MEMBERS", "NpyHeader", "headers", "read"]

#: The largest ratio of declared to stored size a deflated member may claim (1032:1 is
#: deflate's limit; a little slack for the stream's end).
MAX_DEFLATE_RATIO = 1040
#: The most members an input file may have.
MAX_MEMBERS = 100_000


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """One array of an ``.npz``: its key (member name less ``.npy``), shape and dtype."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran_order: bool
    member: zipfile.ZipInfo

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def headers(archive: zipfile.ZipFile, path: Path) -> dict[str, NpyHeader]:
    """Every member's ``.npy`` header, checked against the zip directory; no data read.

    Raises:
        RunError: too many members, a member that is not ``KEY.npy``, a compression other
            than stored or deflate, declared sizes beyond what the member can hold, a header
            numpy cannot read, an object array.
    """
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise RunError(f"{path}: {len(members)} arrays (at most {MAX_MEMBERS})")
    found: dict[str, NpyHeader] = {}
    for member in members:
        key = _key(member, path)
        with archive.open(member) as f:
            shape, fortran, dtype = _npy_header(f, member, path)
        header = NpyHeader(key, shape, dtype, fortran, member)
        if header.nbytes > member.file_size:
            raise RunError(
                f"{path}: array {key!r} declares {header.nbytes} bytes, its member holds "
                f"{member.file_size}"
            )
        found[key] = header
    return found


def read(archive: zipfile.ZipFile, header: NpyHeader, path: Path) -> np.ndarray[Any, Any]:
    """The array of ``header``'s member (allocated at its checked size).

    Raises:
        RunError: the member ends early or is damaged.
    """
    try:
        with archive.open(header.member) as f:
            _read_header(f)
            data = f.read(header.nbytes + 1)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise RunError(f"{path}: array {header.key!r} cannot be read: {e}") from None
    if len(data) != header.nbytes:
        raise RunError(
            f"{path}: array {header.key!r} holds {len(data)} bytes, its header declares "
            f"{header.nbytes}"
        )
    array: np.ndarray[Any, Any] = np.frombuffer(data, dtype=header.dtype)
    return array.reshape(header.shape, order="F" if header.fortran_order else "C")


def _key(member: zipfile.ZipInfo, path: Path) -> str:
    if not member.filename.endswith(".npy") or member.is_dir():
        raise RunError(f"{path}: member {member.filename[:100]!r} is not an array (KEY.npy)")
    if member.compress_type == zipfile.ZIP_STORED:
        ok = member.file_size == member.compress_size
    elif member.compress_type == zipfile.ZIP_DEFLATED:
        ok = member.file_size <= MAX_DEFLATE_RATIO * max(member.compress_size, 1)
    else:
        raise RunError(f"{path}: member {member.filename[:100]!r} is compressed other than deflate")
    if not ok:
        raise RunError(
            f"{path}: member {member.filename[:100]!r} declares {member.file_size} bytes in "
            f"{member.compress_size} stored"
        )
    return member.filename[: -len(".npy")]


def _npy_header(
    f: IO[bytes], member: zipfile.ZipInfo, path: Path
) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    try:
        shape, fortran, dtype = _read_header(f)
    except (OSError, ValueError, SyntaxError, zipfile.BadZipFile, EOFError) as e:
        raise RunError(f"{path}: {member.filename[:100]!r} is not a .npy array: {e}") from None
    if dtype.hasobject:
        raise RunError(
            f"{path}: {member.filename[:100]!r} holds Python objects (a pickle); inputs are "
            f"read with allow_pickle=False"
        )
    return tuple(int(d) for d in shape), bool(fortran), dtype


def _read_header(f: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """The magic and header, with numpy's own readers (format 1.0 and 2.0, as ``numpy.savez``
    writes them; their ``max_header_size`` bounds the literal they parse)."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f".npy format version {version[0]}.{version[1]} is not read here")
    return shape, fortran, dtype
