"""The bytes of ``OciRepository``'s blobs and answers (``registry/_oci_client.py``): a blob
gathered or re-chunked for upload and checked against its size and digest, a blob read
streamed with one chunk held back until both match (hashed on a second core, at
``MIN_RATE`` or faster: ``registry/_oci_pace.py``), a request body sent in ``READ_CHUNK``
pieces, and a JSON answer read raw, at most a limit and whole within the client's timeout."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import httpx

from jaxport import IntegrityError, OciError
from jaxport.registry._deadline import within
from jaxport.registry._oci_auth import check_identity
from jaxport.registry._oci_hash import BackgroundSha256
from jaxport.registry._oci_limits import READ_CHUNK
from jaxport.registry._oci_pace import paced

__all__ = [
    "ChunkedBody",
    "check_hash",
    "gather_blob",
    "read_limited",
    "rechunk",
    "sha256_digest",
    "verified_chunks",
]


def sha256_digest(data: bytes) -> str:
    """``"sha256:" + hex`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def gather_blob(chunks: Iterable[bytes], size: int, digest: str) -> bytes:
    parts, total = [], 0
    for chunk in chunks:
        total += len(chunk)
        if total > size:
            raise IntegrityError(f"blob {digest[:19]}: more than its {size} bytes", expected=digest)
        parts.append(chunk)
    data = b"".join(parts)
    check_hash(digest, size, len(data), sha256_digest(data))
    return data


def check_hash(digest: str, size: int, count: int, found: str) -> None:
    if count != size:
        raise IntegrityError(
            f"blob {digest[:19]}: {count} bytes, not {size}", expected=digest, found=found
        )
    if found != digest:
        raise IntegrityError(
            f"blob {digest[:19]}: the bytes are {found[:19]}", expected=digest, found=found
        )


def rechunk(chunks: Iterable[bytes], size: int) -> Iterator[bytes]:
    """``chunks`` regrouped into pieces of ``size`` bytes (the last shorter): each byte
    copied once."""
    parts: list[bytes | memoryview] = []
    held = 0
    for chunk in chunks:
        view = memoryview(chunk)
        while held + len(view) >= size:
            cut = size - held
            parts.append(view[:cut])
            yield b"".join(parts)
            parts, held, view = [], 0, view[cut:]
        if len(view):
            parts.append(view)
            held += len(view)
    if held:
        yield b"".join(parts)


class ChunkedBody:
    """A request body sent in pieces of ``READ_CHUNK`` bytes (httpcore copies what a
    ``send`` left over, so one large piece would be copied over and over); iterable again,
    so an auth flow can send it twice."""

    def __init__(self, data: bytes):
        self._data: bytes | None = data

    def __iter__(self) -> Iterator[bytes]:
        view = memoryview(self._data or b"")
        for start in range(0, len(view), READ_CHUNK):
            yield bytes(view[start : start + READ_CHUNK])

    def release(self) -> None:
        """Drops the bytes (once the request is answered)."""
        self._data = None


def verified_chunks(
    response: httpx.Response, digest: str, size: int, seconds: float
) -> Iterator[bytes]:
    """The body's chunks, one held back until the size and digest are checked (the hash
    computed on another thread as the chunks arrive), at least ``MIN_RATE`` bytes a second
    over each window of ``seconds``."""
    hasher, count, held = BackgroundSha256(), 0, b""
    try:
        for chunk in paced(response.iter_raw(), seconds):  # as stored: never decoded
            count += len(chunk)
            if count > size:
                raise IntegrityError(
                    f"blob {digest[:19]}: more than its {size} bytes", expected=digest
                )
            hasher.update(chunk)
            if held:
                yield held
            held = chunk
        response.close()
        check_hash(digest, size, count, "sha256:" + hasher.hexdigest())
    except httpx.HTTPError as e:
        raise IntegrityError(
            f"blob {digest[:19]}: the read broke off after {count} bytes ({type(e).__name__})",
            expected=digest,
        ) from None
    finally:  # also when the caller stops early
        response.close()
        hasher.close()
    if held:
        yield held


def read_limited(
    response: httpx.Response, limit: int, what: str, seconds: float, *, cut: bool = False
) -> bytes:
    """The body, at most ``limit`` bytes (more: an ``OciError``, or cut with ``cut``), whole
    within ``seconds``; the response closed."""
    announced = response.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > limit and not cut:
        raise OciError(f"{what}: {announced} bytes, over the {limit}-byte limit")
    if not cut:
        check_identity(response, what)
    body = bytearray()
    try:
        for chunk in within(response.iter_raw(), seconds):
            body += chunk
            if len(body) > limit:
                if cut:
                    break
                raise OciError(f"{what}: over the {limit}-byte limit")
    except httpx.HTTPError as e:
        raise OciError(f"{what}: the read broke off ({type(e).__name__})") from None
    finally:
        response.close()
    return bytes(body[:limit])
