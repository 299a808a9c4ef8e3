"""Blob stores: archives by sha256 digest, on local disk or any fsspec filesystem.

Both implement ``BlobStore``; ``tests/test_blob_stores.py`` runs one conformance suite on each.
Blobs live at ``<root>/sha256/<first two hex digits>/<digest>``; a digest is checked (64 lowercase
hex digits) before it becomes part of a path, so no name reaches outside the root. Temporary
files of writes in progress are ``.tmp-<digest>.<random>`` beside their blob (local) or
``<root>/tmp/<digest>.<random>`` (fsspec; none on S3, where a blob is one PUT), and the parts a
client uploads straight to S3 are ``<root>/staging/<upload>/<digest>`` (``_store_urls``), so
``gc`` can tell a push's from a killed write's; anything else under the root is *foreign*:
reported, never deleted. A store that can sign URLs has ``urls`` (``signing``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from jaxport import IntegrityError, JaxportError, RegistryError
from jaxport._files import open_regular_file
from jaxport._io import atomic_write, make_durable_dirs
from jaxport.registry._config import is_fsspec_url, safe_url
from jaxport.registry._masking import masked, masked_options, secret_values
from jaxport.registry._names import check_digest

if TYPE_CHECKING:
    from jaxport.registry._store_urls import StoreUrls

__all__ = [
    "BlobStore",
    "FsspecBlobStore",
    "LocalBlobStore",
    "Stray",
    "age_of",
    "open_blob_store",
    "read_verified",
    "signing",
    "verify",
]

_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Stray:
    """A file under a blob store's root that is not a blob: ``kind`` is ``"temp"`` (a write
    in progress or killed) or ``"foreign"``; ``age`` in seconds; ``digest``: the blob a
    temporary file is written for, as its name says (``gc`` keeps it while a push of that
    digest is in flight), else None."""

    path: str
    kind: str
    age: float
    digest: str | None = None


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
    if len(parts) == 3 and parts[0] == "staging" and _DIGEST.fullmatch(parts[2]):
        return "temp"  # a part uploaded straight to the store, not committed (yet)
    return "foreign"


def _temp_digest(relative: str) -> str | None:
    """The digest in a temporary file's name (``sha256/ab/.tmp-<digest>.<random>``,
    ``tmp/<digest>.<random>`` or ``staging/<upload>/<digest>``), or None."""
    name = relative.rsplit("/", 1)[-1].removeprefix(".tmp-")
    digest = name.split(".", 1)[0]
    return digest if _DIGEST.fullmatch(digest) else None


def _stray(relative: str, kind: str, age: float) -> Stray:
    return Stray(relative, kind, age, _temp_digest(relative) if kind == "temp" else None)


def _inside(root: str | os.PathLike[str], path: str, digest: str | None, *, link_ok: bool) -> str:
    """``path`` with its directory resolved, if that directory is ``root`` or under it (after
    following every symlink) and, unless ``link_ok``, ``path`` itself is no symlink.

    Resolving first and using the resolved path means a symlinked prefix directory (``ab/`` ->
    elsewhere) is followed only where it stays inside the root; a blob file that is a symlink
    is never read or written through (``link_ok``: removing the link itself is safe).

    Raises:
        IntegrityError: the path leads outside the root, or is a symlink.
    """
    real_root = os.path.realpath(root)
    parent = os.path.realpath(os.path.dirname(path))
    inside = parent == real_root or parent.startswith(real_root.rstrip(os.sep) + os.sep)
    if inside and (link_ok or not os.path.islink(path)):
        return os.path.join(parent, os.path.basename(path))
    why = "is a symlink" if inside else f"leads outside the blob store root {real_root}"
    what = f"blob {digest}" if digest else "a temporary file"
    raise IntegrityError(f"{what}: {path} {why}: refused", expected=digest)


class LocalBlobStore:
    """Blobs in a local directory, each written atomically and durably (``atomic_write``).

    Every path is resolved and checked to stay under the root (``_inside``): a prefix directory
    that is a symlink is followed only to a directory inside the root, a blob file that is a
    symlink is refused (``IntegrityError``); listings report symlinks as foreign files.
    """

    #: A local store signs no URLs: its bytes go through the server (``signing``).
    urls = None

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, digest: str, *, link_ok: bool = False) -> Path:
        path = str(self.root / _relative(digest))
        return Path(_inside(self.root, path, digest, link_ok=link_ok))

    def path(self, digest: str) -> Path:
        """The file of ``digest`` (which may not exist), e.g. to memory-map it.

        Raises:
            IntegrityError: the path leads outside the root or is a symlink.
        """
        return self._path(digest)

    def put(self, digest: str, data: bytes | memoryview, *, replace: bool = False) -> None:
        path = self._path(digest)
        if not replace and path.exists():
            return
        if not path.parent.is_dir():
            make_durable_dirs(path.parent)  # its entry fsynced too: once per prefix
            # Checked again now that the directory is there, whoever made it (a symlink made
            # between the first check and is_dir must not be written through); a directory
            # that was there was checked by the first.
            path = self._path(digest)
        atomic_write(path, [data], sync_dir=True)

    def open(self, digest: str) -> BinaryIO:
        """The blob's file, opened for reading (the caller closes it): a regular file only,
        opened without blocking, so a FIFO or device planted in the store is refused at once
        instead of blocking its reader (``jaxport._files.open_regular_file``).

        Raises:
            FileNotFoundError: no such blob.
            IntegrityError: the blob's path is not a regular file, is a symlink or leads
                outside the root.
        """

        def refused(_: str) -> IntegrityError:
            return IntegrityError(f"blob {digest} is not a regular file: refused", expected=digest)

        return open_regular_file(self._path(digest), refused)  # type: ignore[return-value]

    def get(self, digest: str) -> bytes:
        with self.open(digest) as f:
            return f.read()

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def delete(self, digest: str) -> None:
        self._path(digest, link_ok=True).unlink(missing_ok=True)

    def _files(self) -> Iterator[tuple[str, Path]]:
        """Every file under the root, and every symlink (to a directory too: never followed)."""
        if self.root.is_dir():
            for dirpath, dirs, names in sorted(os.walk(self.root)):
                links = [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]
                for n in sorted(names + links):
                    p = Path(dirpath) / n
                    yield p.relative_to(self.root).as_posix(), p

    def _kind(self, relative: str, p: Path) -> str:
        return "foreign" if p.is_symlink() else _classify(relative)

    def digests(self) -> Iterator[str]:
        for relative, p in self._files():
            if self._kind(relative, p) == "blob":
                yield p.name

    def strays(self) -> Iterator[Stray]:
        for relative, p in self._files():
            kind = self._kind(relative, p)
            if kind != "blob":
                try:
                    age = max(0.0, time.time() - p.lstat().st_mtime)
                except FileNotFoundError:
                    continue
                yield _stray(relative, kind, age)

    def remove_stray(self, stray: Stray) -> None:
        if stray.kind == "temp" and _classify(stray.path) == "temp":
            path = _inside(self.root, str(self.root / stray.path), None, link_ok=True)
            Path(path).unlink(missing_ok=True)

    def size(self, digest: str) -> int:
        return self._path(digest).stat().st_size

    def age(self, digest: str) -> float:
        return max(0.0, time.time() - self._path(digest).stat().st_mtime)


class FsspecBlobStore:
    """Blobs in any fsspec filesystem (``s3://bucket/prefix``, ``gcs://...``, ``memory://...``).

    Writes: on S3, which has no rename and shows an object only once it is whole (one PUT, or
    a multipart upload completed at once) and stored durably, a blob is written straight to
    its key; elsewhere, to a unique temporary name that is then moved into place. On S3 the
    listings cache is off unless ``use_listings_cache`` is given: other processes add and
    remove blobs, so every ``exists``, ``size`` and listing asks the store.

    ``storage_options`` go to fsspec as given (s3fs: ``endpoint_url``, ``key``, ``secret``,
    ``token``, ``client_kwargs``, ...); without credentials s3fs reads botocore's usual ones
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
    ``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``, ``~/.aws``). ``url`` and ``repr`` mask every
    credential (``safe_url``, ``masked_options``); the filesystem, which holds them, and the root
    are private. The filesystem's exceptions are translated at one boundary (``_errors``), their
    messages masked. On a local filesystem (``local://``) every path is checked to stay under the
    root, as ``LocalBlobStore`` does. On S3, ``urls`` signs URLs (``_store_urls.StoreUrls``;
    Signature Version 4 unless ``config_kwargs`` name another), elsewhere it is None.
    ``bytes_read`` and ``bytes_written`` count the blob bytes this object moved from and to
    the store (``get``, ``open``'s reads, ``put``): what a registry server's own process
    reads or writes of the archives it serves.

    Raises (every method):
        RegistryError: the store cannot be reached or refuses (credentials, permissions, a
            missing bucket, a network error), with any credential masked.
    """

    def __init__(self, url: str, **storage_options: object):
        """Opens the filesystem of ``url`` with ``storage_options``; connects to nothing yet.

        Raises:
            RegistryError: the URL's protocol is unknown or its package is missing (s3fs:
                ``pip install 'jaxport[s3]'``), or fsspec refuses the options.
        """
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.url = safe_url(url)
        self._secrets = secret_values(url, storage_options)
        self._shown_options = masked_options(storage_options)
        options = dict(storage_options)
        if _scheme(url) in _S3:
            options.setdefault("use_listings_cache", False)
            config = dict(options.get("config_kwargs") or {})  # type: ignore[call-overload]
            config.setdefault("signature_version", "s3v4")  # signs a PUT's checksum header
            options["config_kwargs"] = config
        try:
            self._fs, self._root = fsspec.core.url_to_fs(url, **options)
        except ImportError as e:
            raise RegistryError(_missing_package(url, self._masked(str(e)))) from None
        except ValueError as e:  # an unknown protocol
            raise RegistryError(
                f"unknown blob store protocol {_scheme(self.url)!r}: {self._masked(str(e))}"
            ) from None
        except Exception as e:  # the filesystem's own: options it refuses
            raise RegistryError(self._failed("opening", e)) from None
        self._root = self._root.rstrip("/")
        self._local = isinstance(self._fs, LocalFileSystem)
        protocols = self._fs.protocol
        self._s3 = bool(_S3 & set([protocols] if isinstance(protocols, str) else protocols))
        self.urls: StoreUrls | None = None
        self.bytes_read = self.bytes_written = 0
        self._count = threading.Lock()
        if self._s3:
            from jaxport.registry._store_urls import StoreUrls

            self.urls = StoreUrls(self._fs, self._root, self._errors)

    def __repr__(self) -> str:
        shown = f", **{self._shown_options!r}" if self._shown_options else ""
        return f"FsspecBlobStore({self.url!r}{shown})"

    def _masked(self, text: str) -> str:
        return masked(text, self._secrets)

    def _failed(self, doing: str, e: BaseException) -> str:
        return f"blob store {self.url}: {doing} failed: {type(e).__name__}: {self._masked(str(e))}"

    @contextlib.contextmanager
    def _errors(self, doing: str, *, lookup: bool = False) -> Iterator[None]:
        """The one boundary of the filesystem's exceptions (s3fs raises ``OSError``s, botocore
        its own, such as ``NoCredentialsError``): ``JaxportError`` passes; where ``lookup`` (a
        read of one blob), a blob that is not there is a ``FileNotFoundError`` (the
        ``BlobStore`` contract); anything else is a ``RegistryError``. Messages are masked."""
        try:
            yield
        except JaxportError:
            raise
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            if lookup:
                raise FileNotFoundError(f"{doing}: not in {self.url}") from None
            raise RegistryError(self._failed(doing, e)) from None
        except Exception as e:
            raise RegistryError(self._failed(doing, e)) from None

    def _path(self, digest: str, *, link_ok: bool = False, under: str = "") -> str:
        path = f"{self._root}/{under or _relative(digest)}"
        return _inside(self._root, path, digest, link_ok=link_ok) if self._local else path

    def _moved(self, *, read: int = 0, written: int = 0) -> None:
        with self._count:
            self.bytes_read += read
            self.bytes_written += written

    def put(self, digest: str, data: bytes | memoryview, *, replace: bool = False) -> None:
        path = self._path(digest)
        with self._errors(f"writing blob {digest}"):
            if not replace and self._fs.exists(path):
                return
            self._moved(written=len(data))
            if self._s3:  # no rename, no directories: one atomic PUT (or multipart upload)
                self._fs.pipe_file(path, bytes(data))
                return
            tmp = self._path(digest, under=f"tmp/{digest}.{uuid.uuid4().hex}")
            self._fs.makedirs(f"{self._root}/tmp", exist_ok=True)
            self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self._fs.pipe_file(tmp, bytes(data))
            self._fs.mv(tmp, path)

    def get(self, digest: str) -> bytes:
        path = self._path(digest)
        with self._errors(f"blob {digest}", lookup=True):
            data = bytes(self._fs.cat_file(path))
        self._moved(read=len(data))
        return data

    def open(self, digest: str) -> BinaryIO:
        """``digest``'s file opened for reading (ranges are fetched as they are read).

        Raises:
            FileNotFoundError: no such blob.
            RegistryError: the store cannot be reached or refuses.
        """
        path = self._path(digest)
        with self._errors(f"blob {digest}", lookup=True):
            return _Counted(self._fs.open(path, "rb"), self._moved)  # type: ignore[return-value]

    def exists(self, digest: str) -> bool:
        path = self._path(digest)
        with self._errors(f"looking for blob {digest}"):
            return bool(self._fs.exists(path))

    def delete(self, digest: str) -> None:
        path = self._path(digest, link_ok=True)
        with self._errors(f"deleting blob {digest}"), contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(path)

    def _files(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every file under the root, sorted: its path relative to the root and fsspec's
        details. S3's "folder" markers (keys ending in ``/``, which S3 consoles make) are left
        out; a missing root is an empty store, a missing bucket a ``RegistryError``."""
        with self._errors("listing"):
            try:
                found = self._fs.find(self._root, detail=True)
            except FileNotFoundError:
                if self._s3:
                    raise
                found = {}
        prefix = self._fs._strip_protocol(self._root).rstrip("/") + "/"
        for p, info in sorted(found.items()):
            p = str(p)
            if not p.endswith("/"):
                yield (p[len(prefix) :] if p.startswith(prefix) else p.rsplit("/", 1)[-1]), info

    def digests(self) -> Iterator[str]:
        for relative, _ in self._files():
            if _classify(relative) == "blob":
                yield relative.rsplit("/", 1)[-1]

    def strays(self) -> Iterator[Stray]:
        for relative, info in self._files():
            kind = _classify(relative)
            if kind != "blob":
                yield _stray(relative, kind, age_of(info))

    def remove_stray(self, stray: Stray) -> None:
        if stray.kind == "temp" and _classify(stray.path) == "temp":
            path = self._path("", link_ok=True, under=stray.path)  # local://: inside the root
            with self._errors("removing a temporary file"), contextlib.suppress(FileNotFoundError):
                self._fs.rm_file(path)

    def size(self, digest: str) -> int:
        path = self._path(digest)
        with self._errors(f"blob {digest}", lookup=True):
            return int(self._fs.size(path))

    def age(self, digest: str) -> float:
        path = self._path(digest)
        with self._errors(f"blob {digest}", lookup=True):
            return age_of(self._fs.info(path))


class _Counted:
    """A file opened for reading whose reads are counted (``FsspecBlobStore.bytes_read``)."""

    def __init__(self, file: Any, moved: Any) -> None:
        self._file, self._moved = file, moved

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._file.read(size)
        self._moved(read=len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        n: int = self._file.readinto(buffer)
        self._moved(read=n)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


#: fsspec protocols of S3 (s3fs): no rename, no directories, whole objects only.
_S3 = frozenset({"s3", "s3a"})
#: Where fsspec filesystems keep a file's modification time in its details: S3's
#: ``LastModified`` (a datetime), a local or SFTP ``mtime`` (seconds), Azure's ``last_modified``,
#: GCS's ``updated`` (ISO 8601), memory's ``created`` (seconds).
_MTIME_FIELDS = ("LastModified", "mtime", "last_modified", "updated", "created")


def age_of(info: Mapping[str, Any]) -> float:
    """Seconds since the file of fsspec's details ``info`` was modified; 0.0 when they do not
    say (so ``gc`` takes it for new)."""
    for field in _MTIME_FIELDS:
        value = info.get(field)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = datetime.datetime.fromisoformat(value)
        if isinstance(value, datetime.datetime):
            return max(0.0, time.time() - value.timestamp())
        if isinstance(value, int | float) and not isinstance(value, bool):
            return max(0.0, time.time() - float(value))
    return 0.0


def _scheme(url: str) -> str:
    return url.split("://", 1)[0]


def _missing_package(url: str, why: str) -> str:
    """The message of a blob store whose fsspec package is not installed (``why``: fsspec's,
    such as "Install s3fs to access S3")."""
    if _scheme(url) in _S3:
        return f"the blob store {_scheme(url)}:// needs s3fs: pip install 'jaxport[s3]' ({why})"
    return f"the blob store {_scheme(url)}:// needs a package: {why}"


def open_blob_store(
    location: str | os.PathLike[str] | BlobStore,
    storage_options: Mapping[str, object] | None = None,
) -> BlobStore:
    """A blob store for a local path, a ``file://`` URL or any other fsspec URL.

    Args:
        location: a directory, a URL, or a ``BlobStore`` (returned as it is).
        storage_options: given to fsspec for a URL (s3fs: ``endpoint_url``, ``key``,
            ``secret``, ``token``, ``client_kwargs``, ...). Without them, s3fs reads botocore's
            environment variables and files.

    Raises:
        RegistryError: an empty location, storage options for a local directory or a
            ``BlobStore``, the URL's protocol is unknown or its fsspec package is not installed.
    """
    if storage_options and not is_fsspec_url(location):
        raise RegistryError(
            "storage_options are for a blob store at an fsspec URL (s3://bucket/prefix), "
            "not a local directory or a BlobStore"
        )
    if not isinstance(location, str | os.PathLike):
        return location
    text = os.fspath(location)
    if not text.strip():
        raise RegistryError("the blob store location is empty: give a directory or an fsspec URL")
    if "://" not in text:
        return LocalBlobStore(text)
    if text.startswith("file://"):
        return LocalBlobStore(text.removeprefix("file://"))
    return FsspecBlobStore(text, **(storage_options or {}))


def signing(blobs: BlobStore) -> StoreUrls | None:
    """The presigned URLs of ``blobs`` if it can sign them (an S3 store), else None: the one
    place that asks (a ``BlobStore`` without ``urls`` cannot)."""
    urls: StoreUrls | None = getattr(blobs, "urls", None)
    return urls


def read_verified(blobs: BlobStore, digest: str, max_size: int | None = None) -> bytes:
    """A blob's bytes, verified against its digest.

    Args:
        max_size: the most bytes the blob may have, in bytes: a longer one is refused, read
            no further than that (None: no limit).

    Raises:
        IntegrityError: the blob is missing or over ``max_size`` (``found`` None), or corrupt.
    """
    try:
        data = blobs.get(digest) if max_size is None else _read_at_most(blobs, digest, max_size)
    except FileNotFoundError:
        raise IntegrityError(
            f"blob {digest} is missing from {blobs.url}", expected=digest
        ) from None
    return verify(digest, data)


def _read_at_most(blobs: BlobStore, digest: str, max_size: int) -> bytes:
    """The blob's bytes, ``max_size + 1`` at most read (another kind of store: all of them)."""
    if isinstance(blobs, LocalBlobStore | FsspecBlobStore):
        with blobs.open(digest) as f:
            data = f.read(max_size + 1)
    else:
        data = blobs.get(digest)
    if len(data) > max_size:
        raise IntegrityError(
            f"blob {digest} is over {max_size:,} bytes, the most it may have here",
            expected=digest,
        )
    return data
