"""Opening input files that may not be what their name says: only regular files, within a size.

``Path.read_bytes`` on a FIFO blocks until a writer comes, on ``/dev/zero`` reads until memory
runs out. Every reader of a user-named file (``load``, ``load_model``, ``inspect``, ``push``,
``jaxport run``'s inputs) opens it here: without blocking (``O_NONBLOCK``, so opening a FIFO
returns at once), then checks the open file itself (``fstat``: no race with a file swapped
after a check by name) is a regular file of at most ``max_size`` bytes.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from typing import IO

from jaxport._errors import JaxportError

__all__ = [
    "DEFAULT_MAX_READ",
    "check_regular_file",
    "open_regular",
    "open_regular_file",
    "read_regular",
]

#: The default limit of ``read_regular``: larger files are refused before a byte is read.
DEFAULT_MAX_READ = 64 << 30

ErrorFactory = Callable[[str], JaxportError]


def open_regular_file(
    path: str | os.PathLike[str], error: ErrorFactory, *, max_size: int | None = None
) -> IO[bytes]:
    """``path`` opened for reading (the caller closes it), once it is known to be a regular
    file within ``max_size`` bytes; opening never blocks (a FIFO with no writer is refused).

    Raises:
        FileNotFoundError, PermissionError, OSError: as ``open``.
        JaxportError: ``error(message)``: a FIFO, device, socket or directory, or a file
            larger than ``max_size`` bytes.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise error(f"{os.fspath(path)} is a directory, not a file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{os.fspath(path)} is not a regular file ({_kind(info.st_mode)})")
        if max_size is not None and info.st_size > max_size:
            raise error(f"{os.fspath(path)} has {info.st_size} bytes, over the limit of {max_size}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_regular(
    path: str | os.PathLike[str], error: ErrorFactory, *, max_size: int | None = None
) -> Iterator[IO[bytes]]:
    """``open_regular_file`` as a context manager that closes the file.

    Raises:
        FileNotFoundError, PermissionError, OSError: as ``open``.
        JaxportError: ``error(message)``: a FIFO, device, socket or directory, or a file
            larger than ``max_size`` bytes.
    """
    with open_regular_file(path, error, max_size=max_size) as f:
        yield f


def read_regular(
    path: str | os.PathLike[str], error: ErrorFactory, *, max_size: int = DEFAULT_MAX_READ
) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_size``). Raises: ``open_regular``."""
    with open_regular(path, error, max_size=max_size) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(size + 1)
    if len(data) > size:  # it grew after the check
        raise error(f"{os.fspath(path)} grew while it was read")
    return data


def check_regular_file(path: str | os.PathLike[str], error: ErrorFactory) -> None:
    """Raises ``error`` unless ``path`` is a regular file (see ``open_regular``)."""
    with open_regular(path, error):
        pass


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"
