"""What one request may make the server hold, and all requests together (issue 24: F3, F6).

Bodies. Every body has a limit by route, checked before it is read (by its ``Content-Length``)
and as it arrives (a body without one): a part upload ``--max-upload`` bytes; a commit, a
``missing`` question or an upload's start or completion ``MAX_LIST_BODY`` (a commit of
``MAX_COMMIT_PARTS`` parts, each about 110 bytes of JSON); a signature's or findings'
adoption ``MAX_ADOPT_BODY``; a compiled set ``MAX_COMPILED_BODY``; any other body
``MAX_BODY``. A JSON
body is parsed in a worker thread (``OffLoopJSON``), never on the event loop, and refused (400)
past ``MAX_JSON_DEPTH`` levels, ``MAX_JSON_VALUES`` values or a string of ``MAX_JSON_STRING``
characters, so that what the route's model then validates on the loop is small.

Memory. A ``MemoryBudget`` (``jaxport serve --memory-budget``) is what the requests of one
server process may hold at once beyond the server's own: a large JSON body
(``JSON_MEMORY_FACTOR`` times its ``Content-Length``, or its route's limit without one:
the body and Python's objects for it, reserved before a byte is read) and a commit (the
decompressed bytes its archives' headers declare, ``jaxport.registry._internal.plan_parts``)
reserve their share before they allocate it and give it back when they are done. One that
could never fit is refused (400); one that does not fit now waits at most ``BUDGET_WAIT``
seconds, then is answered 503 with ``Retry-After`` (the client retries). The budget is half
the machine's memory by default.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import anyio.to_thread
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from jaxport import InvalidNameError, ServerUnavailableError

__all__ = [
    "BUDGET_WAIT",
    "DEFAULT_MEMORY_BUDGET",
    "JSON_MEMORY_FACTOR",
    "MAX_ADOPT_BODY",
    "MAX_BODY",
    "MAX_COMMIT_PARTS",
    "MAX_COMPILED_BODY",
    "MAX_DIGESTS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_STRING",
    "MAX_JSON_VALUES",
    "MAX_LIST_BODY",
    "MAX_METADATA_KEYS",
    "MemoryBudget",
    "OffLoopJSON",
    "body_limit",
    "parse_json",
]

#: The largest body of a route not listed below, in bytes (aliases, audits, gc, verify,
#: tokens: a few hundred bytes each; metadata of a commit is counted in its commit's body).
MAX_BODY = 64 << 10
#: The largest commit (``POST /api/v1/versions``) or ``POST /api/v1/blobs/missing`` body,
#: in bytes: ``MAX_COMMIT_PARTS`` parts at about 110 bytes of JSON each, and slack.
MAX_LIST_BODY = 16 << 20
#: The largest body of an adoption (``POST /api/v1/signatures/NAME``, ``/findings/NAME``,
#: ``server/_api_adopt.py``), in bytes: a bundle of ``MAX_BUNDLE_BYTES`` as a JSON string
#: (escaped), or findings a client sends in batches of at most 1 MiB.
MAX_ADOPT_BODY = 4 << 20
#: The largest body of ``POST /api/v1/compiled/NAME`` (``server/_api_compiled.py``), in
#: bytes: a set of ``MAX_SET_FILES`` (4,096) files, each at most about 380 bytes of JSON (a
#: name of 255 characters, its sha256, its size), and slack.
MAX_COMPILED_BODY = 2 << 20
#: Most parts of all the archives of one commit: two models of ``MAX_MODEL_SECTIONS``
#: (``jaxport.export``: 65,536) sections each.
MAX_COMMIT_PARTS = 1 << 17
#: Most digests one ``missing`` question may ask about.
MAX_DIGESTS = MAX_COMMIT_PARTS + 1
#: Most metadata keys of one commit (the registry bounds their bytes: 1 MiB).
MAX_METADATA_KEYS = 1024
#: Levels of nesting of a JSON body (a commit has 4: body, archives, parts, part).
MAX_JSON_DEPTH = 8
#: Values (numbers, strings, lists, objects, keys) of a JSON body.
MAX_JSON_VALUES = 1 << 20
#: Characters of one JSON string (a metadata value may hold up to the registry's 1 MiB).
MAX_JSON_STRING = 1 << 20
#: Bytes of memory reserved per byte of a large JSON body: what ``json.loads`` makes of it
#: (measured: a list of small ints about 8x, of 64-character strings about 1.6x).
JSON_MEMORY_FACTOR = 8
#: JSON bodies at most this large reserve nothing (a few threads' worth).
_FREE_JSON = 64 << 10


def _half_the_memory() -> int:
    """Half the machine's physical memory in bytes (2 GiB where it cannot be read), at least
    1 GiB: what one server process's requests may hold by default."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = 4 << 30
    return max(1 << 30, total // 2)


#: The default ``--memory-budget``, in bytes: half the machine's memory.
DEFAULT_MEMORY_BUDGET = _half_the_memory()
#: Seconds a request waits for its share of the budget before its 503.
BUDGET_WAIT = 5.0
_API = "/api/v1/"


#: The POST routes whose body lists a push's parts (``server/_presign.py``: ``uploads``).
_LIST_ROUTES = frozenset(
    _API + r for r in ("versions", "blobs/missing", "uploads", "uploads/complete")
)


#: The POST routes, each followed by a name, whose body is an adoption.
_ADOPT_ROUTES = (_API + "signatures/", _API + "findings/")
#: The POST route, followed by a name, whose body is a compiled set.
_COMPILED_ROUTE = _API + "compiled/"


def body_limit(method: str, path: str, max_upload: int) -> int:
    """The largest body, in bytes, of a request to ``method path`` (see the module's doc)."""
    if method == "PUT" and path.startswith(_API + "blobs/"):
        return max_upload
    if method == "POST" and path in _LIST_ROUTES:
        return MAX_LIST_BODY
    if method == "POST" and path.startswith(_ADOPT_ROUTES):
        return MAX_ADOPT_BODY
    if method == "POST" and path.startswith(_COMPILED_ROUTE):
        return MAX_COMPILED_BODY
    return MAX_BODY


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, within the limits of the module's doc.

    Raises:
        InvalidNameError: not JSON (or not UTF-8: a lone surrogate escaped, ``"\\ud800"``,
            too), a number that is not finite (``NaN``, ``1e999``), nested deeper than
            ``MAX_JSON_DEPTH``, more than ``MAX_JSON_VALUES`` values or a string over
            ``MAX_JSON_STRING``. What is stored from a body (an event's detail) must make a
            JSON answer again.
    """
    try:
        value = json.loads(body, parse_constant=_not_finite, parse_float=_finite)
    except RecursionError:
        raise InvalidNameError(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except InvalidNameError:  # a number that is not finite
        raise
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise InvalidNameError(f"the body is not JSON: {type(e).__name__}") from None
    _check_shape(value)
    return value


def _not_finite(text: str) -> float:
    raise InvalidNameError(f"the JSON body holds {text}, not a finite number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise InvalidNameError(f"the JSON body holds {text[:20]}, not a finite number")
    return number


def _check_shape(value: Any) -> None:
    """Walks ``value`` without recursion, counting values and levels."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_JSON_VALUES:
            raise InvalidNameError(f"the JSON body holds more than {MAX_JSON_VALUES:,} values")
        if isinstance(item, str):
            if len(item) > MAX_JSON_STRING:
                raise InvalidNameError(
                    f"a string of the JSON body is over {MAX_JSON_STRING:,} characters"
                )
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidNameError("a string of the JSON body holds a lone surrogate") from None
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidNameError(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        else:
            stack.extend((v, depth + 1) for v in item)


class MemoryBudget:
    """Bytes of memory the requests of one server process may hold at once (thread-safe)."""

    def __init__(self, total: int, wait: float = BUDGET_WAIT) -> None:
        self.total = int(total)
        self.wait = float(wait)
        self.held = 0
        self._changed = threading.Condition()

    def acquire(self, nbytes: int, what: str) -> None:
        """Takes ``nbytes`` of the budget (from a worker thread: it may wait up to ``wait``
        seconds); ``release`` gives them back.

        Raises:
            InvalidNameError: ``nbytes`` is over the whole budget (400: it never fits).
            ServerUnavailableError: it does not fit within ``wait`` seconds (503, with
                ``Retry-After``).
        """
        deadline = time.monotonic() + self.wait
        with self._changed:
            while not self._take(nbytes, what):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _busy(nbytes, what)
                self._changed.wait(left)

    async def acquire_async(self, nbytes: int, what: str) -> None:
        """``acquire`` on the event loop: waits without a thread (polling every 50 ms).
        Raises: as ``acquire``."""
        deadline = time.monotonic() + self.wait
        while True:
            with self._changed:
                if self._take(nbytes, what):
                    return
            if time.monotonic() >= deadline:
                raise _busy(nbytes, what)
            await anyio.sleep(0.05)

    def _take(self, nbytes: int, what: str) -> bool:
        """Takes ``nbytes`` if they fit now (the caller holds the lock). Raises:
        ``InvalidNameError`` if they never can."""
        if nbytes > self.total:
            raise InvalidNameError(
                f"{what} needs {nbytes:,} bytes of server memory; the server's budget is "
                f"{self.total:,} (jaxport serve --memory-budget)"
            )
        if self.held + nbytes > self.total:
            return False
        self.held += nbytes
        return True

    def release(self, nbytes: int) -> None:
        """Gives back what ``acquire`` took."""
        with self._changed:
            self.held -= nbytes
            self._changed.notify_all()

    @contextlib.contextmanager
    def reserve(self, nbytes: int, what: str) -> Iterator[None]:
        """``nbytes`` held for the ``with`` block. Raises: as ``acquire``."""
        self.acquire(nbytes, what)
        try:
            yield
        finally:
            self.release(nbytes)


class OffLoopJSON(APIRoute):
    """A route whose JSON body is parsed in a worker thread (``parse_json``), under its share
    of the app's ``MemoryBudget`` (``app.state.memory``), before FastAPI validates it (FastAPI
    reads the body with ``Request.json``, which then has it)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def parsed_first(request: Request) -> Response:
            budget: MemoryBudget | None = getattr(request.app.state, "memory", None)
            size = _declared(request)
            share = JSON_MEMORY_FACTOR * size if size > _FREE_JSON else 0
            if budget is None or not share:
                return await _parsed_then(handler, request)
            # before a byte of the body is read, held while the route holds what it became
            await budget.acquire_async(share, f"a JSON body of {size:,} bytes")
            try:
                return await _parsed_then(handler, request)
            finally:
                budget.release(share)

        return parsed_first


def _declared(request: Request) -> int:
    """A body's ``Content-Length``, or (none given) the most its route accepts."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit():
        return int(declared)
    return body_limit(request.method, request.url.path, request.app.state.max_upload)


async def _parsed_then(
    handler: Callable[[Request], Coroutine[Any, Any, Response]], request: Request
) -> Response:
    body = await request.body()
    if body:
        request._json = await anyio.to_thread.run_sync(parse_json, body)
    return await handler(request)


def _busy(nbytes: int, what: str) -> ServerUnavailableError:
    return ServerUnavailableError(
        f"the server is busy: {what} needs {nbytes:,} bytes of memory that other requests "
        "hold; retry"
    )
