"""Reading an archive on a registry server a piece at a time (``HttpBackend.model`` and
``write_file``): a model's skeleton now and each tensor when the model first uses it
(``lazy_model``), or a whole archive streamed to a file (``write_streamed``).

Where the bytes come from, in order of preference:

- the server's blob store, where it signs URLs (``GET /blobs/{digest}/locations``,
  ``server/_presign.py``): each part (the skeleton, each tensor) is an object of its own, read
  with a presigned GET; the registry token is never sent there. A URL that fails (expired,
  refused, a store this process cannot reach) falls back to the next way for that part;
- HTTP ranges of the archive through the server (``GET /blobs/{digest}``, ``Range:
  bytes=A-B``, 206), a redirect followed with its ``Range`` (S3 honours ranges on presigned
  GETs). Without part digests from the server, the layout is read from the archive's own
  header (``ranged_layout``: two small ranges), and the skeleton is checked as any archive is
  (the header's digest, then section 0's when the modules are read).

Every byte is checked before it is used: a part of known digest against it as soon as it
arrives (the skeleton), a tensor against its sha256 by the model before any array is made
(``jaxport.export._internal.model_from_parts``), a whole archive against the variant's digest
before the
file is renamed into place. ``RemoteArchive.bytes_fetched`` counts the body bytes received.
A function archive is read a module at a time where the server has the module route
(``registry/_remote_function.py``: the server checks section 0's digest and sends one module
with its sha256), else whole: its modules share section 0, whose one digest must be checked
before any module is given out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

import httpx

from jaxport import (
    CorruptArchiveError,
    IntegrityError,
    RegistryError,
    ServerUnavailableError,
    UnsupportedFeatureError,
)
from jaxport.registry._download import connection_to, direct_ok
from jaxport.registry._store_requests import StoreRequests

if TYPE_CHECKING:
    import os

    from jaxport.export import Model
    from jaxport.registry._http import Http
    from jaxport.registry._types import VariantInfo

__all__ = ["RemoteArchive", "lazy_model", "write_streamed"]

#: Seconds to wait for a store's connection (a read then waits the client's timeout).
CONNECT_TIMEOUT = 10.0
#: Bytes read from the socket at a time by ``http.client`` (``RemoteArchive.chunks``).
_DIRECT_CHUNK = 1 << 20
#: Zero bytes yielded at a time between the parts of a streamed archive.
_ZEROS = bytes(64 * 1024)


@dataclasses.dataclass(frozen=True)
class Located:
    """A part of an archive: ``offset`` and ``size`` in bytes, the sha256 (hex) of its bytes,
    and a presigned GET ``url`` (None: read it through the server)."""

    offset: int
    size: int
    digest: str
    url: str | None

    @property
    def end(self) -> int:
        """The offset just after the part."""
        return self.offset + self.size


class RemoteArchive:
    """The archive (or blob) ``digest`` of ``size`` bytes on the server behind ``http``.

    Attributes:
        bytes_fetched: body bytes received so far, from the server and the store.
    """

    def __init__(self, http: Http, digest: str, size: int):
        self._http, self.digest, self.size = http, digest, size
        self.bytes_fetched = 0
        self._lock = threading.Lock()  # guards bytes_fetched
        self._store: StoreRequests | None = None

    def __repr__(self) -> str:
        return f"RemoteArchive({self.digest[:12]}, {self.size:,} bytes, {self._http.url!r})"

    def locate(self) -> list[Located] | None:
        """The archive's parts with presigned URLs, in order; None where the server's store
        signs none (or the server is older).

        Raises:
            IntegrityError: parts that overlap or lie outside the archive.
            NotFoundError, PermissionDeniedError: no such archive, or not for this token.
        """
        try:
            where = self._http.json("GET", f"/blobs/{_seg(self.digest)}/locations")
        except UnsupportedFeatureError:
            return None
        except RegistryError as e:
            if type(e) is not RegistryError:  # typed: NotFoundError, PermissionDeniedError
                raise
            return None  # a server without the route
        try:
            parts = [
                Located(int(p["offset"]), int(p["size"]), str(p["digest"]), str(p["url"]))
                for p in where["parts"]
            ]
            size = int(where["size"])
        except (KeyError, TypeError, ValueError):
            raise IntegrityError(
                f"blob {self.digest}: the server's locations are malformed", expected=self.digest
            ) from None
        _check_parts(parts, size, self.size, self.digest)
        return parts

    def read(self, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` through the server, read-only (``chunks``). Raises: as it."""
        buffer = bytearray(end - start)
        position = 0
        for chunk in self.chunks(start, end):
            buffer[position : position + len(chunk)] = chunk
            position += len(chunk)
        return memoryview(buffer).toreadonly()

    def chunks(self, start: int, end: int) -> Iterator[bytes | memoryview]:
        """Bytes ``[start, end)`` through the server as they arrive: the whole archive with a
        plain GET, a part of it with a ``Range`` (a redirect followed with it); a chunk may
        be a view valid until the next is asked for (copy what you keep).

        Raises:
            IntegrityError: the answer is another range, or ends early or late.
            ServerUnavailableError: the server cannot be reached.
            JaxportError: the server's error answer, typed.
        """
        if not 0 <= start <= end <= self.size:
            raise ValueError(f"[{start}, {end}) is outside the {self.size} bytes")
        if start == end:
            return
        whole = start == 0 and end == self.size
        if direct_ok(self._http.base):
            direct = self._direct(start, end, whole)
            if direct is not None:
                yield from direct
                return
        headers = None if whole else {"Range": f"bytes={start}-{end - 1}"}
        path = f"/blobs/{_seg(self.digest)}"
        try:
            with self._http.stream(path, headers=headers, follow_redirects=True) as response:
                if response.status_code != (200 if whole else 206) or not _range_is(
                    response, start, end, self.size, whole
                ):
                    raise IntegrityError(
                        f"blob {self.digest}: the server sent another range than [{start}, {end})",
                        expected=self.digest,
                    )
                yield from self._body(response, end - start)
        except RuntimeError:  # httpx: "the client has been closed"
            raise RegistryError(
                f"blob {self.digest}: the registry {self._http.url} was closed before it was read"
            ) from None

    def _direct(self, start: int, end: int, whole: bool) -> Iterator[memoryview] | None:
        """``chunks`` by ``http.client`` (``registry/_download.py`` says when it may): the
        body read into one reused buffer of ``_DIRECT_CHUNK`` bytes, each chunk valid until
        the next is asked for; None where the answer is not the one asked for, or no
        connection was made (then httpx, which retries, raises the server's error or
        follows a redirect)."""
        url = urlsplit(f"{self._http.base}/blobs/{_seg(self.digest)}")
        connection = connection_to(url.scheme, str(url.hostname), url.port)
        try:
            connection.connect()
            if connection.sock is not None:  # each read may wait this long
                connection.sock.settimeout(self._http.timeout)
            headers = dict(self._http.headers)
            if not whole:
                headers["Range"] = f"bytes={start}-{end - 1}"
            connection.request("GET", url.path, headers=headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException):
            connection.close()
            return None
        said = response.getheader("Content-Range")
        expected = (
            (said is None or said == f"bytes 0-{self.size - 1}/{self.size}")
            if whole
            else (said is not None and said.startswith(f"bytes {start}-{end - 1}/"))
        )
        if response.status != (200 if whole else 206) or not expected:
            connection.close()
            return None
        return self._read_into(connection, response, end - start)

    def _read_into(
        self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
        length: int,
    ) -> Iterator[memoryview]:  # fmt: skip
        view = memoryview(bytearray(min(length, _DIRECT_CHUNK)))
        got = 0
        try:
            while got < length:
                n = response.readinto(view[: min(len(view), length - got)])
                if not n:
                    break
                got += n
                with self._lock:
                    self.bytes_fetched += n
                yield view[:n]
        except (OSError, http.client.HTTPException):
            pass
        finally:
            connection.close()
        if got != length:
            raise IntegrityError(
                f"blob {self.digest}: the server's answer ended early (a corrupt part is not "
                "sent whole)",
                expected=self.digest,
            )

    def part_chunks(self, part: Located) -> Iterator[bytes | memoryview]:
        """``part``'s bytes as they arrive: from its presigned URL, else (no URL, or the
        store refuses it or cannot be reached before a byte arrives) through the server.
        Raises: as ``chunks``."""
        if part.url is not None and part.size > 0:
            response = self._store_get(part.url)
            if response is not None:
                try:
                    yield from self._body(response, part.size)
                finally:
                    response.close()
                return
        yield from self.chunks(part.offset, part.end)

    def part(self, part: Located) -> memoryview:
        """``part``'s bytes, read-only (``part_chunks``). Raises: as ``chunks``."""
        buffer = bytearray(part.size)
        position = 0
        for chunk in self.part_chunks(part):
            buffer[position : position + len(chunk)] = chunk
            position += len(chunk)
        return memoryview(buffer).toreadonly()

    def _store_get(self, url: str) -> httpx.Response | None:
        """The open answer of a presigned GET, or None where it failed (see ``part_chunks``)."""
        store = self._store_client()
        try:
            response = store.send("GET", url)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            response.close()
            return None
        return response

    def _store_client(self) -> StoreRequests:
        with self._lock:
            if self._store is None:
                timeout = httpx.Timeout(self._http.timeout, connect=CONNECT_TIMEOUT)
                self._store = StoreRequests(timeout)
                weakref.finalize(self, self._store.close)
            return self._store

    def _body(self, response: httpx.Response, length: int) -> Iterator[bytes]:
        """The body's chunks, exactly ``length`` bytes in all (counted in ``bytes_fetched``)."""
        got = 0
        try:
            for chunk in response.iter_raw():
                got += len(chunk)
                if got > length:
                    break
                with self._lock:
                    self.bytes_fetched += len(chunk)
                yield chunk
        except httpx.TimeoutException:
            raise ServerUnavailableError(
                f"blob {self.digest}: the answer stalled for {self._http.timeout:g} s"
            ) from None
        except httpx.HTTPError:
            got = -1
        if got != length:
            raise IntegrityError(
                f"blob {self.digest}: an answer of another length than the {length:,} bytes "
                "asked for (a corrupt part is not sent whole)",
                expected=self.digest,
            )


def lazy_model(http: Http, chosen: VariantInfo, allow_custom_calls: Sequence[str]) -> Model:
    """The model of the variant ``chosen``: its skeleton read now, each tensor when the model
    first uses it (see the module's doc).

    Raises:
        IntegrityError: the skeleton does not match its digest, or is not all sent.
        CorruptArchiveError: the archive is no model archive, or a malformed one.
        NotFoundError, PermissionDeniedError, ServerUnavailableError: from the server.
        UnsupportedVersionError, UnsupportedFeatureError, UnsafeArchiveError: see
            ``jaxport.loads_model``.
    """
    from jaxport.export._internal import model_from_parts

    archive = RemoteArchive(http, chosen.digest, chosen.size_bytes)
    parts = archive.locate()
    if parts:
        skeleton: bytes | memoryview = archive.part(parts[0])
        _verify(skeleton, parts[0].digest)
        tensors = {p.digest: p for p in parts[1:]}
    else:
        skeleton, tensors = _skeleton_by_ranges(archive)

    def read(digest: str) -> memoryview:
        part = tensors.get(digest)
        if part is None:
            raise FileNotFoundError(digest)
        return archive.part(part)

    return model_from_parts(
        skeleton, chosen.size_bytes, read, where=f"{chosen.name}:{chosen.version}",
        store=http.url, allow_custom_calls=tuple(allow_custom_calls),
    )  # fmt: skip


def _skeleton_by_ranges(archive: RemoteArchive) -> tuple[memoryview, dict[str, Located]]:
    """The skeleton and each tensor's part (by its section's digest) read from the archive's
    header by ranges. Raises: as ``lazy_model``."""
    from jaxport.export._internal import ranged_layout

    layout, prefix = ranged_layout(archive.read, archive.size)
    if layout.kind != "model":
        raise CorruptArchiveError(f"blob {archive.digest}: a function archive, not a model")
    end = layout.skeleton_end
    skeleton = bytearray(prefix)
    skeleton += archive.read(len(prefix), end)
    start = end - layout.sections[0].offset - layout.sections[0].length  # the payload's start
    tensors = {}
    for t in layout.tensors:
        s = layout.sections[t.section]
        tensors[s.sha256] = Located(start + s.offset, s.length, s.sha256, None)
    return memoryview(skeleton).toreadonly(), tensors


def write_streamed(
    http: Http, digest: str, size: int, path: str | os.PathLike[str]
) -> RemoteArchive:
    """Writes the archive ``digest`` of ``size`` bytes to ``path`` as it arrives (its parts
    from the store where the server signs URLs, else one GET through the server), hashing it
    on the way; the file is renamed into place only once the whole matches ``digest`` (else
    nothing is left behind). Memory: a few chunks of about 64 KiB, whatever the size.

    Raises:
        IntegrityError: the bytes do not make ``digest``, or not ``size`` of them.
        OSError: the directory is missing or not writable.
        NotFoundError, PermissionDeniedError, ServerUnavailableError: from the server.
    """
    from jaxport._io import atomic_write

    archive = RemoteArchive(http, digest, size)
    parts = archive.locate()
    atomic_write(path, _verified(archive, parts))
    return archive


def _verified(archive: RemoteArchive, parts: list[Located] | None) -> Iterator[bytes | memoryview]:
    """The archive's bytes (its ``parts`` in order, zero padding between; else the whole
    through the server); the generator raises at its end if they do not make the digest, so
    ``atomic_write`` renames nothing into place."""
    digest = hashlib.sha256()
    written = 0
    for chunk in _assembled(archive, parts):
        digest.update(chunk)
        written += len(chunk)
        yield chunk
    found = digest.hexdigest()
    if written != archive.size or found != archive.digest:
        raise IntegrityError(
            f"blob {archive.digest}: the {written:,} bytes received do not match it",
            expected=archive.digest,
            found=found,
        )


def _assembled(archive: RemoteArchive, parts: list[Located] | None) -> Iterator[bytes | memoryview]:
    if parts is None:
        yield from archive.chunks(0, archive.size)
        return
    position = 0
    for part in parts:
        while position < part.offset:
            n = min(len(_ZEROS), part.offset - position)
            yield _ZEROS[:n]
            position += n
        yield from archive.part_chunks(part)
        position = part.end
    while position < archive.size:
        n = min(len(_ZEROS), archive.size - position)
        yield _ZEROS[:n]
        position += n


def _check_parts(parts: Sequence[Located], said: int, size: int, digest: str) -> None:
    """Parts in order, not overlapping, inside an archive the server says has ``size``
    bytes. Raises: IntegrityError."""
    if said != size:
        raise IntegrityError(
            f"blob {digest}: the server says {said:,} bytes, not {size:,}", expected=digest
        )
    position = 0
    for p in parts:
        if p.offset < position or p.size < 0 or p.end > size:
            raise IntegrityError(f"blob {digest}: a part lies outside it", expected=digest)
        position = p.end


def _verify(data: bytes | memoryview, digest: str) -> None:
    found = hashlib.sha256(data).hexdigest()
    if found != digest:
        raise IntegrityError(
            f"blob {digest}: the bytes received do not match it", expected=digest, found=found
        )


def _range_is(response: httpx.Response, start: int, end: int, size: int, whole: bool) -> bool:
    """Whether the answer's ``Content-Range`` (or, for a whole read, its absence) is the
    range asked for."""
    said = response.headers.get("Content-Range")
    if whole:
        return said is None or said == f"bytes 0-{size - 1}/{size}"
    return isinstance(said, str) and said.startswith(f"bytes {start}-{end - 1}/")


def _seg(text: str) -> str:
    return quote(str(text), safe="")
