"""Blob stores: archives by sha256 digest, on local disk or any fsspec filesystem.

Both implement ``BlobStore``; ``tests/test_blob_stores.py`` runs one conformance suite on each.
Blobs live at ``<root>/sha256/<first two hex digits>/<digest>``.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from jaxport._errors import IntegrityError
from jaxport._io import atomic_write

__all__ = ["BlobStore", "FsspecBlobStore", "LocalBlobStore", "open_blob_store", "verify"]


class BlobStore(Protocol):
    """Content-addressed storage of archive bytes."""

    url: str

    def put(self, digest: str, data: bytes) -> None:
        """Stores ``data`` under ``digest`` durably; a no-op if it is there already."""

    def get(self, digest: str) -> bytes:
        """The bytes stored under ``digest``. Raises ``FileNotFoundError`` if none."""

    def exists(self, digest: str) -> bool:
        """Whether ``digest`` is stored."""

    def delete(self, digest: str) -> None:
        """Removes ``digest``; a no-op if absent."""

    def digests(self) -> Iterator[str]:
        """Every stored digest."""

    def size(self, digest: str) -> int:
        """The stored size of ``digest`` in bytes."""

    def age(self, digest: str) -> float:
        """Seconds since ``digest`` was written (0.0 when the store cannot tell)."""


def verify(digest: str, data: bytes) -> bytes:
    """``data`` if its sha256 is ``digest``. Raises ``IntegrityError`` otherwise."""
    found = hashlib.sha256(data).hexdigest()
    if found != digest:
        raise IntegrityError(f"blob {digest} is corrupt", expected=digest, found=found)
    return data


def _relative(digest: str) -> str:
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"not a sha256 hex digest: {digest!r}")
    return f"sha256/{digest[:2]}/{digest}"


class LocalBlobStore:
    """Blobs in a local directory, each written atomically and durably (``atomic_write``)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, digest: str) -> Path:
        return self.root / _relative(digest)

    def put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, [data], sync_dir=True)

    def get(self, digest: str) -> bytes:
        return self._path(digest).read_bytes()

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)

    def digests(self) -> Iterator[str]:
        base = self.root / "sha256"
        if base.is_dir():
            for p in sorted(base.glob("??/*")):
                if not p.name.startswith("."):
                    yield p.name

    def size(self, digest: str) -> int:
        return self._path(digest).stat().st_size

    def age(self, digest: str) -> float:
        return max(0.0, time.time() - self._path(digest).stat().st_mtime)


class FsspecBlobStore:
    """Blobs in any fsspec filesystem (``s3://bucket/prefix``, ``gcs://...``, ``memory://...``).

    Writes go to a unique temporary name and are moved into place, where the filesystem can.
    """

    def __init__(self, url: str, **storage_options: object):
        import fsspec

        self.url = url
        self.fs, self.root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = self.root.rstrip("/")

    def _path(self, digest: str) -> str:
        return f"{self.root}/{_relative(digest)}"

    def put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if self.fs.exists(path):
            return
        tmp = f"{self.root}/tmp/{uuid.uuid4().hex}"
        self.fs.makedirs(f"{self.root}/tmp", exist_ok=True)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, path)

    def get(self, digest: str) -> bytes:
        path = self._path(digest)
        try:
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            raise
        except OSError as e:
            raise FileNotFoundError(path) from e

    def exists(self, digest: str) -> bool:
        return bool(self.fs.exists(self._path(digest)))

    def delete(self, digest: str) -> None:
        path = self._path(digest)
        if self.fs.exists(path):
            self.fs.rm_file(path)

    def digests(self) -> Iterator[str]:
        base = f"{self.root}/sha256"
        if not self.fs.exists(base):
            return
        for p in sorted(self.fs.find(base)):
            yield str(p).rsplit("/", 1)[-1]

    def size(self, digest: str) -> int:
        return int(self.fs.size(self._path(digest)))

    def age(self, digest: str) -> float:
        try:
            modified = self.fs.modified(self._path(digest))
        except (NotImplementedError, OSError):
            return 0.0
        return max(0.0, time.time() - modified.timestamp())


def open_blob_store(location: str | os.PathLike[str] | BlobStore) -> BlobStore:
    """A blob store for a local path, a ``file://`` URL or any other fsspec URL."""
    if not isinstance(location, str | os.PathLike):
        return location
    text = os.fspath(location)
    if "://" not in text:
        return LocalBlobStore(text)
    if text.startswith("file://"):
        return LocalBlobStore(text.removeprefix("file://"))
    return FsspecBlobStore(text)
