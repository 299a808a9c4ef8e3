"""The client side of transfers straight between a client and the server's blob store
(``server/_presign.py`` is the other end): ``send_parts`` for a push, ``fetch_archive`` for a
pull. Where the server offers no URLs (its store cannot sign, URLs are off, or an older
server), or the store cannot be reached from here, the bytes go through the server as before.

A part is PUT to its presigned URL with the headers the server gave (the part's sha256 as
``x-amz-checksum-sha256``: the store refuses other bytes), then completed at once (the server
moves it to its blob key while the next parts are PUT); parts a PUT did not store are sent
through the server. A pull GETs each part from its presigned URL, several at once
(``PARALLEL``), into one buffer, and returns it only if the whole archive's sha256 is its
digest. The registry token is never sent to the store: the URL's signature is the permission.
"""

from __future__ import annotations

import hashlib
import http.client
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from jaxport import (
    IntegrityError,
    NotFoundError,
    RegistryError,
    UnsupportedFeatureError,
)
from jaxport.registry._store_requests import StoreRequests

if TYPE_CHECKING:
    from jaxport.registry._http import Http
    from jaxport.registry._remote_push import LocalArchive

__all__ = ["PARALLEL", "fetch_archive", "send_parts"]

#: Parts transferred at once with the store.
PARALLEL = 4
#: Seconds to wait for the store's connection.
CONNECT_TIMEOUT = 10.0


def _no_route(error: RegistryError) -> bool:
    """Whether ``error`` is an answer of a server without this route (an older server)."""
    return type(error) in (RegistryError, NotFoundError)


def send_parts(
    api: Http,
    archives: Sequence[LocalArchive],
    extra: Mapping[str, bytes],
    name: str | None,
    sent: list[int],
) -> None:
    """Sends the parts of ``archives`` and the ``extra`` blobs (digest -> bytes) that the
    server asks for: straight to its store where it gives a URL, else through the server,
    each with the push's ``name`` (one the token may not push to is refused before any part
    is sent). ``sent`` gets the size of each part sent (either way).

    Raises:
        PermissionDeniedError: ``name`` is outside the token's prefixes.
        IntegrityError: the server refused a part's bytes.
        ServerUnavailableError: the server cannot be reached.
        RegistryError: the server's store refused to take an uploaded part.
    """
    data = {p.digest: a.chunks.view(p.offset, p.end) for a in archives for p in a.parts.parts}
    data |= {d: memoryview(b) for d, b in extra.items()}
    parts = [{"digest": d, "size": len(v)} for d, v in data.items()]
    try:
        answer = api.json("POST", "/uploads", json={"parts": parts, "name": name})
    except RegistryError as e:
        if not _no_route(e):
            raise
        missing = api.json("POST", "/blobs/missing", json={"digests": list(data), "name": name})
        answer = {"missing": missing["missing"], "upload": None, "urls": {}}
    urls: dict[str, Any] = answer["urls"]
    through = [d for d in answer["missing"] if d not in urls]

    def direct(digest: str) -> bool:
        """PUTs one part, then has the server move it (its copy overlaps the next PUTs)."""
        if not _put(store, urls[digest], data[digest]):
            return False
        body = {"upload": answer["upload"], "digests": [digest], "name": name}
        return digest in api.json("POST", "/uploads/complete", json=body)["stored"]

    if urls:
        timeout = httpx.Timeout(api.timeout, connect=CONNECT_TIMEOUT)
        with StoreRequests(timeout) as store, ThreadPoolExecutor(PARALLEL) as pool:
            stored = dict(zip(urls, pool.map(direct, urls), strict=True))
        sent += [len(data[d]) for d, ok in stored.items() if ok]
        through += [d for d, ok in stored.items() if not ok]
    params = {"name": name} if name is not None else None
    for digest in dict.fromkeys(through):
        api.json("PUT", f"/blobs/{digest}", content=bytes(data[digest]), params=params)
        sent.append(len(data[digest]))


def _put(store: StoreRequests, url: Mapping[str, Any], data: bytes | memoryview) -> bool:
    """Whether the store took ``data`` at the presigned ``url`` (a refusal, or a store this
    process cannot reach, is False: the part goes through the server)."""
    try:
        response = store.send(
            "PUT", str(url["url"]), content=bytes(data), headers=dict(url["headers"])
        )
        try:
            response.read()
        finally:
            response.close()
    except httpx.HTTPError:
        return False
    return response.status_code in (200, 201, 204)


def fetch_archive(api: Http, digest: str, size: int) -> bytes | None:
    """The archive (or blob) ``digest`` of ``size`` bytes, read straight from the server's
    store, verified against its digest; None where the server offers no URLs, or the store
    cannot be reached from here or refuses a URL (then stream it through the server).

    Raises:
        IntegrityError: the parts do not make ``digest``, or are not ``size`` bytes in all.
        PermissionDeniedError, NotFoundError: the token may not read it, or there is none.
    """
    try:
        where = api.json("GET", f"/blobs/{digest}/locations")
    except UnsupportedFeatureError:
        return None
    except RegistryError as e:
        if type(e) is not RegistryError:  # NotFoundError: streaming says so too
            raise
        return None
    if int(where["size"]) != size:
        raise IntegrityError(
            f"blob {digest}: the server says {where['size']} bytes, not {size:,}", expected=digest
        )
    buffer = bytearray(size)
    view = memoryview(buffer)
    parts = where["parts"]
    for p in parts:
        if not 0 <= int(p["offset"]) <= int(p["offset"]) + int(p["size"]) <= size:
            raise IntegrityError(f"blob {digest}: a part lies outside it", expected=digest)
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(lambda p: _get(p, view, api.timeout), parts))
    except _Unreachable:
        return None
    found = hashlib.sha256(view).hexdigest()
    if found != digest:
        raise IntegrityError(
            f"blob {digest}: the bytes read from the store do not match it",
            expected=digest, found=found,
        )  # fmt: skip
    return bytes(buffer)


def _get(part: Mapping[str, Any], view: memoryview, timeout: float) -> None:
    """Reads the part at its presigned URL into its place in ``view``."""
    start, length = int(part["offset"]), int(part["size"])
    url = urlsplit(str(part["url"]))
    target = url.path + (f"?{url.query}" if url.query else "")
    connection: http.client.HTTPConnection
    if url.scheme == "https":
        connection = http.client.HTTPSConnection(
            str(url.hostname), url.port, timeout=CONNECT_TIMEOUT, context=_tls()
        )
    else:
        connection = http.client.HTTPConnection(str(url.hostname), url.port, timeout=timeout)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        if response.status != 200:
            raise _Unreachable(response.status)
        got = 0
        while got < length:
            n = response.readinto(view[start + got : start + length])
            if not n:
                break
            got += n
    except (OSError, http.client.HTTPException) as e:
        raise _Unreachable(type(e).__name__) from None
    finally:
        connection.close()
    if got != length:
        raise IntegrityError(
            f"part {part['digest']}: the store sent {got:,} of {length:,} bytes",
            expected=str(part["digest"]),
        )


class _Unreachable(Exception):
    """The store refused a presigned read, or cannot be reached from here."""


def _tls() -> Any:
    return httpx.create_ssl_context()
