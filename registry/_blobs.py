"""Blob stores: archives by sha256 digest, on local disk or any fsspec filesystem.

Both implement ``BlobStore``; ``tests/test_blob_stores.py`` runs one conformance suite on each.
Blobs live at ``<root>/sha256/<first two hex digits>/<digest>``; a digest is checked (64 lowercase
hex digits) before it becomes part of a path, so no name reaches outside the root. Temporary
files of writes in progress are ``.tmp-*`` beside their blob (local) or under ``<root>/tmp/``
(fsspec); anything else under the root is *foreign*: reported, never deleted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from jaxport._errors import IntegrityError, RegistryError
from jaxport._io import atomic_write
from jaxport.registry._names import check_digest

__all__ = [
    "BlobStore",
    "FsspecBlobStore",
    "LocalBlobStore",
    "Stray",
    "open_blob_store",
    "read_verified",
    "verify",
]

_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Stray:
    """A file under a blob store's root that is not a blob: ``kind`` is ``"temp"`` (a write
    in progress or killed) or ``"foreign"``; ``age`` in seconds."""

    path: str
    kind: str
    age: float


class BlobStore(Protocol):
    """Content-addressed storage of archive bytes."""

    url: str

    def put(self, digest: str, data: bytes | memoryview, *, replace: bool = False) -> None:
        """Stores ``data`` under ``digest`` durably and atomically; a no-op if it is there
        already, unless ``replace`` (which rewrites a corrupt blob)."""

    def get(self, digest: str) -> bytes:
        """The bytes stored under ``digest``. Raises ``FileNotFoundError`` if none."""

    def exists(self, digest: str) -> bool:
        """Whether ``digest`` is stored."""

    def delete(self, digest: str) -> None:
        """Removes ``digest``; a no-op if absent."""

    def digests(self) -> Iterator[str]:
        """Every stored digest (files that are not blobs are left out: see ``strays``)."""

    def strays(self) -> Iterator[Stray]:
        """Files under the root that are not blobs: temporaries and foreign files."""

    def remove_stray(self, stray: Stray) -> None:
        """Removes a temporary file that ``strays`` found; a no-op if it is gone."""

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
    return f"sha256/{check_digest(digest)[:2]}/{digest}"


def _classify(relative: str) -> str:
    """``blob``, ``temp`` or ``foreign`` for a path relative to the store's root.

    A path no listing produces (an empty, ``.`` or ``..`` component, a NUL) is ``foreign``, so
    ``remove_stray`` never follows one to a foreign file or out of the root.
    """
    parts = relative.split("/")
    if "\x00" in relative or any(p in ("", ".", "..") for p in parts):
        return "foreign"
    if len(parts) == 3 and parts[0] == "sha256":
        if _DIGEST.fullmatch(parts[2]) and parts[1] == parts[2][:2]:
            return "blob"
        if parts[2].startswith(".tmp-"):
            return "temp"
    if len(parts) == 2 and parts[0] == "tmp":
        return "temp"
    return "foreign"


class LocalBlobStore:
    """Blobs in a local directory, each written atomically and durably (``atomic_write``)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, digest: str) -> Path:
        return self.root / _relative(digest)

    def path(self, digest: str) -> Path:
        """The file of ``digest`` (which may not exist), e.g. to memory-map it."""
        return self._path(digest)

    def put(self, digest: str, data: bytes | memoryview, *, replace: bool = False) -> None:
        path = self._path(digest)
        if path.exists() and not replace:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, [data], sync_dir=True)

    def get(self, digest: str) -> bytes:
        return self._path(digest).read_bytes()

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)

    def _files(self) -> Iterator[tuple[str, Path]]:
        if self.root.is_dir():
            for dirpath, _, names in sorted(os.walk(self.root)):
                for n in sorted(names):
                    p = Path(dirpath) / n
                    yield p.relative_to(self.root).as_posix(), p

    def digests(self) -> Iterator[str]:
        for relative, p in self._files():
            if _classify(relative) == "blob":
                yield p.name

    def strays(self) -> Iterator[Stray]:
        for relative, p in self._files():
            kind = _classify(relative)
            if kind != "blob":
                try:
                    age = max(0.0, time.time() - p.lstat().st_mtime)
                except FileNotFoundError:
                    continue
                yield Stray(relative, kind, age)

    def remove_stray(self, stray: Stray) -> None:
        if stray.kind == "temp" and _classify(stray.path) == "temp":
            (self.root / stray.path).unlink(missing_ok=True)

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
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url, **storage_options)
        except ImportError as e:
            # fsspec names the package: "Install s3fs to access S3"
            raise RegistryError(f"the blob store {_scheme(url)}:// needs a package: {e}") from None
        except ValueError as e:  # an unknown protocol
            raise RegistryError(f"unknown blob store protocol {_scheme(url)!r}: {e}") from None
        self.root = self.root.rstrip("/")

    def _path(self, digest: str) -> str:
        return f"{self.root}/{_relative(digest)}"

    def put(self, digest: str, data: bytes | memoryview, *, replace: bool = False) -> None:
        path = self._path(digest)
        if not replace and self.fs.exists(path):
            return
        tmp = f"{self.root}/tmp/{uuid.uuid4().hex}"
        self.fs.makedirs(f"{self.root}/tmp", exist_ok=True)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(tmp, bytes(data))
        self.fs.mv(tmp, path)

    def get(self, digest: str) -> bytes:
        path = self._path(digest)
        try:
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            raise
        except OSError as e:
            raise FileNotFoundError(path) from e

    def open(self, digest: str) -> BinaryIO:
        """``digest``'s file opened for reading (ranges are fetched as they are read).

        Raises:
            FileNotFoundError: no such blob.
        """
        path = self._path(digest)
        try:
            return self.fs.open(path, "rb")  # type: ignore[no-any-return]
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

    def _files(self) -> Iterator[str]:
        if not self.fs.exists(self.root):
            return
        prefix = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        for p in sorted(self.fs.find(self.root)):
            p = str(p)
            yield p[len(prefix) :] if p.startswith(prefix) else p.rsplit("/", 1)[-1]

    def digests(self) -> Iterator[str]:
        for relative in self._files():
            if _classify(relative) == "blob":
                yield relative.rsplit("/", 1)[-1]

    def strays(self) -> Iterator[Stray]:
        for relative in self._files():
            kind = _classify(relative)
            if kind != "blob":
                yield Stray(relative, kind, self._age(f"{self.root}/{relative}"))

    def remove_stray(self, stray: Stray) -> None:
        path = f"{self.root}/{stray.path}"
        if stray.kind == "temp" and _classify(stray.path) == "temp" and self.fs.exists(path):
            self.fs.rm_file(path)

    def size(self, digest: str) -> int:
        return int(self.fs.size(self._path(digest)))

    def age(self, digest: str) -> float:
        return self._age(self._path(digest))

    def _age(self, path: str) -> float:
        try:
            modified = self.fs.modified(path)
        except (NotImplementedError, OSError):
            return 0.0
        return max(0.0, time.time() - float(modified.timestamp()))


def _scheme(url: str) -> str:
    return url.split("://", 1)[0]


def open_blob_store(location: str | os.PathLike[str] | BlobStore) -> BlobStore:
    """A blob store for a local path, a ``file://`` URL or any other fsspec URL.

    Raises:
        RegistryError: the URL's protocol is unknown or its fsspec package is not installed.
    """
    if not isinstance(location, str | os.PathLike):
        return location
    text = os.fspath(location)
    if not text.strip():
        raise RegistryError("the blob store location is empty: give a directory or an fsspec URL")
    if "://" not in text:
        return LocalBlobStore(text)
    if text.startswith("file://"):
        return LocalBlobStore(text.removeprefix("file://"))
    return FsspecBlobStore(text)


def read_verified(blobs: BlobStore, digest: str) -> bytes:
    """A blob's bytes, verified against its digest.

    Raises:
        IntegrityError: the blob is missing (``found`` None) or corrupt.
    """
    try:
        data = blobs.get(digest)
    except FileNotFoundError:
        raise IntegrityError(
            f"blob {digest} is missing from {blobs.url}", expected=digest
        ) from None
    return verify(digest, data)
