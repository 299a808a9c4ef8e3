"""A request body read from a worker thread: the ASGI receive loop driven from that thread
(``anyio.from_thread``), one chunk at a time, so a large upload is never held whole.

A client that sends nothing for ``BODY_IDLE`` seconds, sends fewer than ``MIN_RATE`` bytes a
second on average once ``BODY_IDLE`` seconds have passed (a byte now and then), or goes away,
ends the read with a typed error, so a stalled body holds its thread for a bounded time. The
routes that read a body this way run in threads of their own (at most ``UPLOADS`` at once):
a client that sends slowly, however many there are, never takes the threads that other
requests are answered in. Commits and gc have theirs too (``HEAVY``), and work that may last
hours (audits, verify, retention runs, the watcher) its own (``LONG``), so that however long
an audit token's requests run, every team's pushes still get a thread.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import Request
from starlette.requests import ClientDisconnect

from jaxport import InvalidNameError

__all__ = [
    "BODY_IDLE", "HEAVY", "LONG", "MIN_RATE", "UPLOADS", "UPLOADS_PER_TOKEN", "iterate_body",
    "run_heavy", "run_long",
]  # fmt: skip

T = TypeVar("T")

#: Seconds a request body may send nothing before its read ends (``InvalidNameError``).
BODY_IDLE = 60.0
#: Bytes a second a request body sends on average, at least, once ``BODY_IDLE`` seconds have
#: passed (a 64 GiB part at this rate takes 48 days: only a client that means to stall is cut).
MIN_RATE = 16 << 10
#: Uploads read at once by one server process; more wait (asynchronously) for a slot.
UPLOADS = 16
#: Uploads one token may have in progress at once in one server process; more are answered
#: 503 with ``Retry-After`` (the client retries), so that one token trickling bytes cannot hold
#: every upload slot: another token's upload still starts.
UPLOADS_PER_TOKEN = UPLOADS // 2
#: Commits and gc run at once by one server process; more wait (asynchronously) for a slot,
#: so that however many a client starts, reads keep their threads.
HEAVY = 4
#: Audits, verify, retention runs and the watcher run at once by one server process (up to a
#: day each): in slots of their own, never the commits'.
LONG = 2


def iterate_body(request: Request) -> Iterator[bytes]:
    """The request body's chunks, read as the caller (a worker thread) asks for them.

    Raises:
        InvalidNameError: no bytes for ``BODY_IDLE`` seconds, fewer than ``MIN_RATE`` a
            second since the start once ``BODY_IDLE`` seconds have passed, or the client went
            away.
    """
    stream: AsyncIterator[bytes] = request.stream().__aiter__()

    async def following() -> bytes | None:
        try:
            with anyio.fail_after(BODY_IDLE):
                return await stream.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise InvalidNameError(f"the request body sent nothing for {BODY_IDLE:.0f} s") from None
        except ClientDisconnect:
            raise InvalidNameError("the client went away before the end of its body") from None

    start, received = time.monotonic(), 0
    while (chunk := anyio.from_thread.run(following)) is not None:
        received += len(chunk)
        elapsed = time.monotonic() - start
        if elapsed > BODY_IDLE and received < MIN_RATE * elapsed:
            raise InvalidNameError(
                f"the request body sent {received} bytes in {elapsed:.0f} s: at least "
                f"{MIN_RATE} a second are expected"
            )
        if chunk:
            yield chunk


async def run_heavy(request: Request, work: Callable[[], T]) -> T:
    """``work()`` in the threads of commits and gc: at most ``HEAVY`` at once per server
    process, the others waiting without a thread, so that however many a client starts,
    reads keep their threads."""
    return await anyio.to_thread.run_sync(work, limiter=request.app.state.heavy)


async def run_long(request: Request, work: Callable[[], T]) -> T:
    """``work()`` in the threads of work that may last hours (audits, verify, retention runs,
    the watcher): at most ``LONG`` at once per server process, never in a commit's slot."""
    return await anyio.to_thread.run_sync(work, limiter=request.app.state.long)
