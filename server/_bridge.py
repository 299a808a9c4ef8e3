"""A request body read from a sync route: the ASGI receive loop driven from the worker thread
(``anyio.from_thread``), one chunk at a time, so a large upload is never held whole."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio.from_thread
from fastapi import Request

__all__ = ["iterate_body"]


def iterate_body(request: Request) -> Iterator[bytes]:
    """The request body's chunks, read as the caller (a sync route's thread) asks for them."""
    stream: AsyncIterator[bytes] = request.stream().__aiter__()

    async def following() -> bytes | None:
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None

    while (chunk := anyio.from_thread.run(following)) is not None:
        if chunk:
            yield chunk
