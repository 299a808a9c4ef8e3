"""Atomic, durable file writes, shared by ``jaxport.save`` and the local blob store."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(
    target: str | os.PathLike[str], chunks: Iterable[bytes], *, sync_dir: bool = False
) -> None:
    """Writes ``chunks`` to ``target`` so that a reader sees the old file or the whole new one.

    The bytes go to a unique temporary file in the same directory (``.tmp-<name>.*``), which is
    flushed, fsynced and renamed over ``target``; ``sync_dir`` also fsyncs the directory, so the
    rename itself survives a crash. On any error the temporary file is removed.

    Raises:
        OSError: the directory is missing or not writable.
    """
    path = Path(target)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".tmp-{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
