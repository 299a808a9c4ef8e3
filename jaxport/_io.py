"""Atomic, durable file writes, shared by ``jaxport.save`` and the local blob store."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["atomic_write", "create_temporary", "make_durable_dirs", "sync_directory"]


def atomic_write(
    target: str | os.PathLike[str],
    chunks: Iterable[bytes | memoryview],
    *,
    sync_dir: bool = False,
    head: Callable[[], bytes] | None = None,
) -> None:
    """Writes ``chunks`` to ``target`` so that a reader sees the old file or the whole new one.

    The bytes go to a unique temporary file in the same directory (``.tmp-<name>.*``), which is
    flushed, fsynced and renamed over ``target``; ``sync_dir`` also fsyncs the directory, so the
    rename itself survives a crash. On any error the temporary file is removed.

    ``head()``, when given, is called once every chunk is written, while the kernel writes
    those chunks to disk (``fdatasync`` in a thread): its bytes overwrite the start of the file
    (a header that depends on what follows it, e.g. on digests ``head`` computes; no longer
    than the chunks). The final fsync then has only the head left to write.

    The file gets the permissions of any new file (``0o666`` less the umask, or the directory's
    default ACL), as ``open(target, "wb")`` would give it: ``tempfile.mkstemp`` makes ``0o600``.

    Raises:
        OSError: the directory is missing or not writable, or ``target`` is a directory.
        ValueError: ``head()`` gave more bytes than the chunks (a caller's mistake).
    """
    path = Path(target)
    fd, tmp = create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            written = sum(f.write(chunk) for chunk in chunks)
            if head is not None:
                f.flush()
                first = _while_flushing(f.fileno(), head)
                if len(first) > written:
                    raise ValueError(f"a head of {len(first)} bytes over {written} written")
                f.seek(0)
                f.write(first)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        sync_directory(path.parent)


def sync_directory(directory: str | os.PathLike[str]) -> None:
    """fsyncs ``directory``, so that the entries made or renamed in it survive a crash.

    Raises:
        OSError: it cannot be opened (missing, not a directory, no permission).
    """
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def make_durable_dirs(directory: Path) -> None:
    """Makes ``directory`` and its missing parents, each new one fsynced into its parent
    (POSIX makes a new directory entry durable only by an fsync of the directory holding it:
    without it a crash could lose a directory whose files were each written durably). A
    directory another process makes meanwhile is taken as it is.

    Raises:
        FileExistsError: a component is a file.
        OSError: a parent is not writable.
    """
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
        sync_directory(made.parent)


def _while_flushing(fd: int, compute: Callable[[], bytes]) -> bytes:
    """``compute()``, called while another thread ``fdatasync``s ``fd``: the disk writes what is
    written so far while the CPU computes (e.g. digests). Raises what either raises."""
    with ThreadPoolExecutor(1) as pool:
        flushed = pool.submit(os.fdatasync if hasattr(os, "fdatasync") else os.fsync, fd)
        result = compute()  # on an error, leaving the block waits for the flush first
        flushed.result()
    return result


def create_temporary(path: Path) -> tuple[int, str]:
    """A new, unique ``.tmp-<name>.<random>`` beside ``path``, opened for writing.

    Created with ``O_EXCL`` and mode ``0o666``, so the kernel applies the umask (and a default
    ACL) atomically: reading the umask would mean setting it (``os.umask``), which races with
    other threads. 64 random bits make a clash (``FileExistsError``) practically impossible.
    """
    tmp = str(path.parent / f".tmp-{path.name}.{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    return os.open(tmp, flags, 0o666), tmp
