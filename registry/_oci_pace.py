"""Bounds on the time of a read from an OCI registry beyond httpx's timeout, which applies to
each read of the socket and so never fires for a server that sends a byte every few seconds
(a slow drip): an answer of bounded size (JSON) must arrive whole within ``seconds``
(``within``, in ``registry/_deadline.py``); a blob, whose size may be large, must bring at
least ``MIN_RATE`` bytes a second over each window of ``seconds`` (``paced``), so that its
read ends within about ``seconds + size / MIN_RATE`` seconds. Either is broken off with
``httpx.ReadTimeout``, which the client reports as any other read that timed out.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import httpx

from jaxport.registry._oci_limits import MIN_RATE

__all__ = ["paced"]


def paced(chunks: Iterable[bytes], seconds: float) -> Iterator[bytes]:
    """``chunks``, broken off when a window of ``seconds`` spent waiting for them (the
    caller's own time between two chunks not counted) brings fewer than ``MIN_RATE`` bytes a
    second.

    Raises:
        httpx.ReadTimeout: a window too slow.
    """
    waited, got = 0.0, 0
    source = iter(chunks)
    while True:
        start = time.monotonic()
        chunk = next(source, None)
        if chunk is None:
            return
        waited += time.monotonic() - start
        got += len(chunk)
        if waited >= seconds:
            if got < MIN_RATE * waited:
                raise httpx.ReadTimeout(f"fewer than {MIN_RATE} bytes a second")
            waited, got = 0.0, 0
        yield chunk
