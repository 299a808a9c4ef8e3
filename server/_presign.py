"""Transfers straight between a client and the blob store, where the store signs URLs (S3 and
S3-compatible stores: ``registry/_store_urls.py``); the server decides who gets which URL.

Uploads (scope ``write``), besides ``PUT /blobs/{digest}`` through the server:

1. ``POST /uploads`` ``{"name", "parts": [{"digest", "size"}]}``: of the parts, those to send
   (as ``/blobs/missing`` says: the store lacks them, or a prefix-limited token does not reach
   them); for each that the store takes in one PUT, a presigned PUT URL to its staging key
   in a new upload, and the headers to send with it (the part's sha256 as
   ``x-amz-checksum-sha256``, its ``Content-Length``: the store refuses other bytes); the
   others go through the server. ``upload`` is null and no URL is given where the store
   cannot sign, or ``JAXPORT_PRESIGN_EXPIRES`` is 0.
2. The client PUTs each part to its URL (before ``expires_in`` seconds pass).
3. ``POST /uploads/complete`` ``{"upload", "name", "digests"}``: each staged part whose
   sha256 the store computed as its digest is moved to its blob key (a server-side copy:
   ``StoreUrls.take``; no byte through the server) and, for a prefix-limited token, recorded
   as its upload (``registry/_reach.py``); the answer lists those ``stored`` and those
   ``missing`` (never uploaded, or another body: send them through the server).
4. ``POST /versions`` commits as ever: a model whose tensor parts the store vouches for is
   validated from its skeleton, its tensors unread (``registry/_stored_push.py``).

An upload id is 32 hex digits, the first 8 from the token's name: a token completes its own
uploads only. Staged parts never completed are temporary files to ``gc`` (``--temp-age``)
and are swept when a server starts (``install``: those older than an hour).

Downloads (scope ``read``): ``GET /blobs/{digest}/locations`` gives a blob's or a model
archive's ``size`` and its ``parts`` (``offset``, ``size``, ``digest``, presigned GET ``url``),
for a token that may read it (as ``GET /blobs/{digest}``); 422 ``UnsupportedFeatureError``
where the store cannot sign (the client then streams ``GET /blobs/{digest}``). JSON, not a
redirect: a model archive is several objects, and any HTTP client (curl, httpx) reads it.

URLs last ``JAXPORT_PRESIGN_EXPIRES`` seconds (default ``DEFAULT_EXPIRES``, 15 minutes; at most
7 days, S3's limit; 0: no URLs, every byte through the server), or ``app.state.presign_expires``
where set.

What passes through this server process is counted (``install``): the bytes of every HTTP
body it receives and sends (``CountBytes``, all routes), and the blob bytes it reads from and
writes to its store (``FsspecBlobStore.bytes_read``, ``bytes_written``). ``GET /transfer``
(scope ``admin``, no name prefixes) answers them, per server process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jaxport import (
    InvalidNameError,
    JaxportError,
    NotFoundError,
    PermissionDeniedError,
    UnsupportedFeatureError,
)
from jaxport.registry import TokenInfo
from jaxport.registry._internal import sql_backend
from jaxport.server._auth import check_name, check_store_wide, scope
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import MAX_DIGESTS, OffLoopJSON
from jaxport.server._state import registry_of

__all__ = [
    "DEFAULT_EXPIRES",
    "ENV_EXPIRES",
    "MAX_EXPIRES",
    "CountBytes",
    "Transfer",
    "configured_expires",
    "expires",
    "install",
    "router",
    "upload_tag",
]

_log = logging.getLogger("jaxport.server")
router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)
Writer = Annotated[TokenInfo, Depends(scope("write"))]
Reader = Annotated[TokenInfo, Depends(scope("read"))]
Admin = Annotated[TokenInfo, Depends(scope("admin"))]

#: Seconds a presigned URL lasts by default.
DEFAULT_EXPIRES = 900
#: The environment variable of the seconds a presigned URL lasts (0: none are given).
ENV_EXPIRES = "JAXPORT_PRESIGN_EXPIRES"
#: Seconds after which a staged part is swept when a server starts, at least (twice the
#: URLs' expiry where that is longer): its upload will never complete. ``gc`` applies its own
#: ``--temp-age``.
STALE_STAGING = 3600.0
#: Parts moved from their staging keys at once (server-side copies: the store does the work).
PARALLEL_TAKES = 8
#: S3's longest expiry of a presigned URL (Signature Version 4): 7 days.
MAX_EXPIRES = 7 * 24 * 3600


@dataclasses.dataclass
class Transfer:
    """Bytes of HTTP bodies this server process ``received`` and ``sent``."""

    received: int = 0
    sent: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add(self, *, received: int = 0, sent: int = 0) -> None:
        with self.lock:
            self.received += received
            self.sent += sent


class CountBytes:
    """ASGI middleware: counts every HTTP request and response body byte in ``transfer``."""

    def __init__(self, app: ASGIApp, transfer: Transfer) -> None:
        self.app, self.transfer = app, transfer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.transfer.add(received=len(message.get("body", b"")))
            return message

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.body":
                self.transfer.add(sent=len(message.get("body", b"")))
            await send(message)

        await self.app(scope, counted_receive, counted_send)


def install(app: FastAPI, prefix: str) -> None:
    """Adds the routes of this module under ``prefix`` and the byte counts to ``app``, and
    sweeps the staged parts of uploads never completed (``STALE_STAGING`` seconds old) in a
    thread of their own (a store's listing never holds up the server's start)."""
    app.state.transfer = Transfer()
    app.add_middleware(CountBytes, transfer=app.state.transfer)
    app.include_router(router, prefix=prefix)
    urls = getattr(sql_backend(app.state.registry).blobs, "urls", None)
    if urls is not None:
        age = max(STALE_STAGING, 2.0 * _expires(app.state))
        threading.Thread(
            target=_sweep, args=(urls, age), name="jaxport-staging", daemon=True
        ).start()


def _sweep(urls: Any, age: float) -> None:
    try:
        removed = urls.sweep(age)
    except JaxportError as e:  # the next start or gc tries again
        _log.warning("sweeping staged parts failed: %s", e)
        return
    if removed:
        _log.info("removed %d staged part(s) of uploads never completed", len(removed))


def expires(request: Request) -> int:
    """Seconds a presigned URL lasts here (0: none are given; see the module's doc).

    Raises:
        InvalidNameError: the setting is not an integer from 0 to ``MAX_EXPIRES``.
    """
    return _expires(request.app.state)


def configured_expires() -> int:
    """Seconds a presigned URL lasts by ``$JAXPORT_PRESIGN_EXPIRES`` (or the default), checked
    before a server starts.

    Raises:
        InvalidNameError: the setting is not an integer from 0 to ``MAX_EXPIRES``.
    """
    return _expires(None)


def _expires(state: Any) -> int:
    value = getattr(state, "presign_expires", None)
    if value is None:
        value = os.environ.get(ENV_EXPIRES, str(DEFAULT_EXPIRES))
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if not 0 <= seconds <= MAX_EXPIRES:
        raise InvalidNameError(f"{ENV_EXPIRES} is 0 to {MAX_EXPIRES} seconds, not {value!r:.40}")
    return seconds


def upload_tag(token_name: str) -> str:
    """The first 8 hex digits of the uploads of the token ``token_name``."""
    return hashlib.sha256(token_name.encode("utf-8")).hexdigest()[:8]


def _urls(request: Request) -> Any:
    """The store's ``StoreUrls``, or None (it cannot sign, or URLs are off)."""
    if expires(request) == 0:
        return None
    return getattr(sql_backend(registry_of(request)).blobs, "urls", None)


class PartSize(BaseModel):
    digest: str = Field(pattern="^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class UploadBody(BaseModel):
    """The parts of a push, and its name (see ``/blobs/missing``)."""

    parts: list[PartSize] = Field(max_length=MAX_DIGESTS)
    name: str | None = None


class CompleteBody(BaseModel):
    upload: str = Field(pattern="^[0-9a-f]{32}$")
    digests: list[str] = Field(max_length=MAX_DIGESTS)
    name: str | None = None


def _check_push_name(p: TokenInfo, name: str | None) -> None:
    """As ``_api_write``'s: a name outside the token's prefixes, or none from a limited token,
    is refused before any URL is signed.

    Raises:
        PermissionDeniedError: either.
    """
    if name is not None:
        check_name(p, name)
    elif p.prefixes:
        raise PermissionDeniedError(
            f"token {p.name!r} is limited to name prefixes: push with a name"
        )


@router.post("/uploads")
def start_upload(request: Request, p: Writer, body: UploadBody) -> dict[str, Any]:
    """The parts to send, and a presigned PUT URL for each the store takes straight (see the
    module's doc)."""
    _check_push_name(p, body.name)
    backend = sql_backend(registry_of(request))
    digests = [part.digest for part in body.parts]
    lacking = set(backend.missing_blobs(digests))
    reached = backend.reach.reachable(p, digests)
    sizes = {part.digest: part.size for part in body.parts}
    wanted = list(dict.fromkeys(d for d in digests if d in lacking or d not in reached))
    urls, seconds = _urls(request), expires(request)
    limit = min(request.app.state.max_upload, urls.max_put if urls is not None else 0)
    direct = [d for d in wanted if sizes[d] <= limit]
    upload = upload_tag(p.name) + secrets.token_hex(12) if direct else None
    signed = {}
    for digest in direct:
        url, headers = urls.put_url(upload, digest, sizes[digest], seconds)
        signed[digest] = {"url": url, "headers": headers}
    return {"missing": wanted, "upload": upload, "urls": signed, "expires_in": seconds}


@router.post("/uploads/complete")
def complete_upload(request: Request, p: Writer, body: CompleteBody) -> dict[str, list[str]]:
    """Stores the parts of ``upload`` the store checked (see the module's doc)."""
    _check_push_name(p, body.name)
    if not body.upload.startswith(upload_tag(p.name)):
        raise PermissionDeniedError(f"upload {body.upload} is not one of token {p.name!r}")
    urls = getattr(sql_backend(registry_of(request)).blobs, "urls", None)
    if urls is None:
        raise UnsupportedFeatureError("this server's blob store takes no direct uploads")
    backend = sql_backend(registry_of(request))
    digests = list(dict.fromkeys(body.digests))
    with ThreadPoolExecutor(PARALLEL_TAKES) as pool:  # server-side copies, in the store
        taken = list(pool.map(lambda d: urls.take(body.upload, d), digests))
    stored = [d for d, size in zip(digests, taken, strict=True) if size is not None]
    if p.prefixes:
        for digest in stored:
            backend.reach.record_upload(p.name, digest)
    return {"stored": stored, "missing": [d for d in digests if d not in stored]}


@router.get("/blobs/{digest}/locations")
def locations(request: Request, p: Reader, digest: str) -> dict[str, Any]:
    """A blob's or a model archive's parts, each with a presigned GET URL (see the module's
    doc); a prefix-limited token reads the archives of its names' versions only."""
    backend = sql_backend(registry_of(request))
    stream = backend.blob_stream(digest)
    if p.prefixes and not any(map(p.allows_name, backend.queries.names_holding(digest))):
        raise NotFoundError(f"no blob or archive {digest}")
    urls = _urls(request)
    if urls is None:
        raise UnsupportedFeatureError(
            "this server's blob store signs no URLs: GET /blobs/{digest} streams it"
        )
    seconds = expires(request)
    parts = [
        {"offset": part.offset, "size": part.size, "digest": part.digest,
         "url": urls.get_url(part.digest, seconds)}
        for part in stream.parts
    ]  # fmt: skip
    return {"digest": digest, "size": stream.size, "parts": parts, "expires_in": seconds}


@router.get("/transfer")
def transfer(request: Request, p: Admin) -> dict[str, int]:
    """Bytes through this server process since it started (see the module's doc): HTTP bodies
    ``http_received`` and ``http_sent``, blob bytes ``store_read`` and ``store_written`` (0
    for a local store, whose bytes all go through HTTP bodies anyway)."""
    check_store_wide(p)
    counted: Transfer = request.app.state.transfer
    blobs = sql_backend(registry_of(request)).blobs
    return {
        "http_received": counted.received, "http_sent": counted.sent,
        "store_read": int(getattr(blobs, "bytes_read", 0)),
        "store_written": int(getattr(blobs, "bytes_written", 0)),
    }  # fmt: skip
