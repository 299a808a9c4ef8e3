"""``large_read_transport``: an httpx transport whose connections receive up to ``READ_BYTES``
at a time (httpcore asks the socket for 64 KiB), so a blob of a GiB passes through httpcore's
and h11's per-read Python code and the client's per-chunk work (count, hash hand-over, file
write) 16x fewer times: the CPU of a 512 MiB ``oci pull -o`` -15 % (``bench_oci.py``). Used by
``registry/_oci_client.py``; a read returns what the socket has, so small answers are as
before. Over TLS a read returns at most one record (16 KiB) whatever is asked: the gain is
on plain ``http`` (a registry on this machine, or ``--insecure``).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from jaxport.registry._oci_limits import MIN_RATE

__all__ = ["READ_BYTES", "large_read_transport"]

#: Bytes asked of the socket per receive (also the largest chunk a response yields).
READ_BYTES = 1 << 20


class _LargeReads(httpcore.NetworkStream):
    """A connection whose reads ask for at least ``READ_BYTES``, and that must bring at least
    ``MIN_RATE`` bytes a second over each window of ``timeout`` seconds spent waiting in its
    reads since the last request was written (the per-read timeout alone never fires for a
    server that sends a byte every few seconds: a response's head of 16 KiB, h11's limit,
    dripped so took days)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._waited, self._got = 0.0, 0

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        start = time.monotonic()
        data = self._inner.read(max(max_bytes, READ_BYTES), timeout)
        self._waited += time.monotonic() - start
        self._got += len(data)
        if timeout is not None and self._waited >= timeout:
            if self._got < MIN_RATE * self._waited:
                raise httpcore.ReadTimeout(f"fewer than {MIN_RATE} bytes a second")
            self._waited, self._got = 0.0, 0
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._waited, self._got = 0.0, 0  # a request: its answer gets windows of its own
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _LargeReads(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's own (blocking sockets), each connection wrapped in ``_LargeReads``."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _LargeReads(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _LargeReads(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def large_read_transport(verify: ssl.SSLContext) -> httpx.HTTPTransport:
    """An ``httpx.HTTPTransport`` (HTTP/1.1, TLS checked with ``verify``, no proxy) whose
    connections read up to ``READ_BYTES`` at a time."""
    transport = httpx.HTTPTransport(verify=verify)
    # httpx builds its pool from the same arguments and offers no way to name a network
    # backend; the pool is the one httpcore object it keeps, replaced here before any use.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=verify,
        max_connections=100,  # httpx's default limits
        max_keepalive_connections=20,
        keepalive_expiry=5.0,
        network_backend=_Backend(),
    )
    return transport
