"""What every request goes through before its route, and what is left of any error after it.

``Guard`` is the app's outermost own middleware (pure ASGI). In this order:

1. An API write (``/api/v1``, any method but GET, HEAD and OPTIONS) is authenticated before
   its body is read: a client without a valid token gets its 401 at once and cannot make the
   server wait for, or hold, a body (the route checks the token's scope and names after).
2. A body larger than its route's limit (``server/_limits.py``'s ``body_limit``: a part
   upload ``max_upload`` bytes, a commit or ``missing`` ``MAX_LIST_BODY``, anything else
   ``MAX_BODY``) is refused with 413 before it is read, by its ``Content-Length``. A body sent
   without a length is counted as it arrives (an upload by ``receive_blob``, anything else
   here: 413 once it passes its limit). A body other than an upload's arrives whole within
   ``BODY_TIMEOUT`` seconds (``server/_connections.py``), or the route sees its client as gone
   (``ClientDisconnect``: a 400, nothing logged).
3. An error that is not a ``JaxportError`` (those have their handler,
   ``server/_errors.py``) is a 500 that says only "internal error"; the server logs its type,
   never its message or a traceback (the text could hold anything). An error after the
   answer started (a corrupt blob found while it streams) cuts the answer short: the
   connection is closed, and the client sees fewer bytes than announced.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jaxport import JaxportError
from jaxport.server._auth import bearer
from jaxport.server._connections import BODY_TIMEOUT
from jaxport.server._errors import error_body, plain_body, status_of
from jaxport.server._limits import MAX_BODY, body_limit

__all__ = ["MAX_BODY", "Guard"]

_LOG = logging.getLogger("jaxport.server")
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_API = "/api/v1/"


class _TooLarge(HTTPException):
    """A body without a length that passed its limit (raised where it is read)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"a request body here is at most {limit} bytes")


class Guard:
    """The ASGI middleware of this module's doc."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            refusal = await _refusal(request)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            upload = _is_upload(request)
            deadline = time.monotonic() + BODY_TIMEOUT
            counted = receive if upload else _counted(receive, _limit(request), deadline)
            await self.app(scope, counted, sending)
        except Exception as error:
            cause = _cause(error)
            where = f"{request.method} {request.url.path}"
            if started:
                _LOG.error("answer to %s cut short: %s", where, cause)
                return  # the server closes the connection: the answer is incomplete
            _LOG.error("internal error %s on %s", cause, where)
            body = plain_body("InternalError", "internal error")
            await JSONResponse(body, status_code=500)(scope, receive, send)


async def _refusal(request: Request) -> JSONResponse | None:
    """The answer to a request refused before its body is read, or None."""
    if request.method not in _READS and request.url.path.startswith(_API):
        try:
            await run_in_threadpool(request.app.state.registry.tokens.authenticate, bearer(request))
        except JaxportError as error:  # AuthenticationError, or the database's RegistryError
            code = status_of(error)
            headers = {"WWW-Authenticate": "Bearer"} if code == 401 else None
            return JSONResponse(error_body(error), status_code=code, headers=headers)
    limit = _limit(request)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        message = f"a request body here is at most {limit} bytes, this one has {declared}"
        body = plain_body("InvalidNameError", message)
        return JSONResponse(body, status_code=413, headers={"Connection": "close"})
    return None


def _is_upload(request: Request) -> bool:
    return request.method == "PUT" and request.url.path.startswith(_API + "blobs/")


def _limit(request: Request) -> int:
    return body_limit(request.method, request.url.path, request.app.state.max_upload)


def _counted(receive: Receive, limit: int, deadline: float) -> Receive:
    """``receive`` that raises ``_TooLarge`` once the body passes ``limit`` bytes, and
    ``ClientDisconnect`` if it is not whole by ``deadline`` (``time.monotonic()``); once it
    is, messages (a disconnect) pass as they come."""
    seen = 0
    whole = False

    async def counting() -> Message:
        nonlocal seen, whole
        if whole:
            return await receive()
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _TooLarge(limit)
            whole = message["type"] != "http.request" or not message.get("more_body", False)
            return message
        raise ClientDisconnect  # too slow: as if gone (the server then closes the connection)

    return counting


def _cause(error: BaseException) -> str:
    """The type name of the error at the root of ``error``'s chain (Starlette re-raises an
    error that came after the answer started as a RuntimeError from it)."""
    seen: set[int] = set()
    root: Any = error
    while root.__cause__ is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__
    return type(root).__name__
