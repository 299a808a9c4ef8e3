"""``within``: an answer of bounded size read whole within a number of seconds, beyond httpx's
timeout, which applies to each read of the socket and so never fires for a server that sends
a byte every few seconds (a slow drip). Shared by the thin HTTP client (``registry/_http.py``)
and the OCI client (``registry/_oci_auth.py``, ``registry/_oci_bodies.py``); it imports
nothing of jaxport, so the thin client pulls in neither jax nor SQLAlchemy through it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import httpx

__all__ = ["within"]


def within(chunks: Iterable[bytes], seconds: float) -> Iterator[bytes]:
    """``chunks``, broken off when they take more than ``seconds`` in all.

    Raises:
        httpx.ReadTimeout: a chunk arrived after the deadline.
    """
    deadline = time.monotonic() + seconds
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout(f"the answer took more than {seconds:g} s")
        yield chunk
