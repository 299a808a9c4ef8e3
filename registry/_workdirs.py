"""Where a commit puts an archive together from its parts (``Registry.push_parts``), and how
what a killed process left there is found and removed (issue 24's F8).

Each commit works in a directory ``jaxport-commit-*`` under one root per blob store:
``<tempdir>/jaxport-commits-<sha256 of the store>[:16]``, owned by this user (``tempdir`` is
``tempfile.gettempdir()``: ``$TMPDIR``, else ``/tmp``). The directory holds a lock file that
its process keeps locked (``flock``) until it removes the directory; a process killed with
``kill -9`` drops the lock with its last file descriptor. ``sweep_commit_dirs`` removes every such
directory whose lock is free (and any older than ``MIN_AGE`` without one): ``jaxport serve``
sweeps when each server process starts, ``gc`` on every run (``GcReport.temp_files`` lists
them), so a commit in flight, in any process on this machine, is never touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from jaxport import RegistryError
from jaxport.registry._blobs import BlobStore, LocalBlobStore

__all__ = ["COMMIT_PREFIX", "MIN_AGE", "commit_dir", "sweep_commit_dirs", "workdir_root"]

#: The name of each commit's directory starts with this.
COMMIT_PREFIX = "jaxport-commit-"
#: Seconds a directory without its lock file is left alone (it may be being made).
MIN_AGE = 60.0
_LOCK = ".lock"


def workdir_root(blobs: BlobStore) -> Path:
    """The root of the commit directories of ``blobs`` (which may not exist yet)."""
    key = os.path.realpath(blobs.root) if isinstance(blobs, LocalBlobStore) else blobs.url
    tag = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"jaxport-commits-{tag}"


def _own_root(blobs: BlobStore) -> Path:
    """``workdir_root``, made if need be, checked to be this user's own directory.

    Raises:
        RegistryError: it is a symlink, not a directory, or another user's.
    """
    root = workdir_root(blobs)
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    info = os.lstat(root)
    if not stat.S_ISDIR(info.st_mode) or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
        raise RegistryError(f"{root} is not a directory of this user's: commits refused")
    return root


@contextlib.contextmanager
def commit_dir(blobs: BlobStore) -> Iterator[Path]:
    """A fresh commit directory, locked while the ``with`` block runs, then removed.

    Raises:
        RegistryError: see ``_own_root``.
    """
    path = Path(tempfile.mkdtemp(prefix=COMMIT_PREFIX, dir=_own_root(blobs)))
    # The lock file gets its name only once it is locked: a sweep sees a young directory
    # without one (left alone) or a held lock, never a free lock in a live commit's directory.
    fd, making = tempfile.mkstemp(prefix=_LOCK + "-", dir=path)
    try:
        _lock(fd, wait=True)
        os.replace(making, path / _LOCK)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def sweep_commit_dirs(blobs: BlobStore, *, dry_run: bool = False) -> list[str]:
    """Removes (unless ``dry_run``) the commit directories that no process holds: their lock
    is free, or they have none and are older than ``MIN_AGE`` seconds. Returns their paths."""
    root = workdir_root(blobs)
    if not root.is_dir() or root.is_symlink():
        return []
    left = []
    for path in sorted(root.glob(COMMIT_PREFIX + "*")):
        if path.is_dir() and not path.is_symlink() and _abandoned(path):
            left.append(str(path))
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
    return left


def _abandoned(path: Path) -> bool:
    try:
        fd = os.open(path / _LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            return time.time() - os.lstat(path).st_mtime >= MIN_AGE
        except FileNotFoundError:
            return False
    except OSError:
        return False
    try:
        return _lock(fd, wait=False)
    finally:
        os.close(fd)


def _lock(fd: int, *, wait: bool) -> bool:
    """Takes an exclusive ``flock`` on ``fd``: whether it was free (``wait``: waits for it).
    Where there is no ``fcntl`` (Windows), every directory counts as held."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True
