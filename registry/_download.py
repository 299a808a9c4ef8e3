"""A blob's whole body from the registry server, read into one ``bytes`` and checked against
its digest.

httpx hands a body over in chunks that pass through h11's buffer; keeping them and joining 100
MB of them writes the whole twice more, and on this machine memory writes (about 1.9 GB/s) are
what a pull costs. ``http.client`` reads a body of known length straight from the socket into
one ``bytes`` (``HTTPResponse.read``: one write), so a server that no proxy stands in front of
is read that way (``benchmarks/bench_server.py``: 0.88x the direct blob-store read instead of
0.54x). Wherever httpx might route the request differently, the body comes through httpx
instead, so both paths reach the server the same way: when any proxy is configured
(``urllib.request.getproxies``, which httpx reads: ``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, the system's on macOS and Windows; ``NO_PROXY`` is then left to httpx), and for
a URL with credentials or non-ASCII characters. TLS uses httpx's own context (certifi, or
``SSL_CERT_FILE``/``SSL_CERT_DIR``); the connection gets ``CONNECT_TIMEOUT`` like httpx's.

Either way the body is bounded by ``max_size`` before a byte of it is read, and returned only
once its sha256 matches the digest.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import ssl
import urllib.request
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx

from jaxport import IntegrityError, RegistryError, ServerUnavailableError
from jaxport.registry._http import ATTEMPTS, RETRY_STATUS, backoff, error_from

if TYPE_CHECKING:
    from jaxport.registry._http import Http

__all__ = ["connection_to", "direct_ok", "download"]

#: Bytes of an error answer read to learn what went wrong.
_ERROR_BODY = 1 << 20
#: Seconds to wait for the connection (the client's httpx waits as long).
CONNECT_TIMEOUT = 10.0


def download(api: Http, path: str, digest: str, max_size: int) -> bytes:
    """The body of ``GET path`` (under ``/api/v1``) whose sha256 is ``digest``.

    Args:
        max_size: bytes; a longer body (by its ``Content-Length``) is refused unread.

    Raises:
        IntegrityError: the body ended early, is longer than ``max_size``, or does not match
            ``digest``.
        RegistryError: the body does not fit in this process's memory.
        ServerUnavailableError: no answer after ``ATTEMPTS`` tries (connection errors, 502-504).
        JaxportError: the server's error answer, typed (``error_from``).
    """
    if not direct_ok(api.base):
        data = _through_httpx(api, path, digest, max_size)
    else:
        data = _direct(api, path, digest, max_size)
    found = hashlib.sha256(data).hexdigest()
    if found != digest:
        raise IntegrityError(
            f"blob {digest}: the bytes received do not match it", expected=digest, found=found
        )
    return data


def direct_ok(url: str) -> bool:
    """Whether ``http.client`` reaches ``url`` as httpx would: no proxy configured at all, a
    plain ASCII URL without credentials."""
    if any(scheme != "no" for scheme in urllib.request.getproxies()):
        return False
    parts = urlsplit(url)
    return url.isascii() and parts.username is None and parts.hostname is not None


def _direct(api: Http, path: str, digest: str, max_size: int) -> bytes:
    parts = urlsplit(api.base + path)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    for attempt in range(1, ATTEMPTS + 1):
        connection = None
        try:
            connection = connection_to(parts.scheme, str(parts.hostname), parts.port)
            connection.connect()
            if connection.sock is not None:  # each read may wait this long
                connection.sock.settimeout(api.timeout)
            connection.request("GET", target, headers=api.headers)
            response = connection.getresponse()
            if response.status not in RETRY_STATUS or attempt == ATTEMPTS:
                return _body(response, digest, max_size)
        except RegistryError:  # the server's typed answer (a 403 is also a PermissionError)
            raise
        except (OSError, http.client.HTTPException) as e:
            if attempt == ATTEMPTS:
                raise ServerUnavailableError(
                    f"the registry server {api.url} cannot be reached after {ATTEMPTS} "
                    f"tries: {type(e).__name__}"
                ) from None
        finally:
            if connection is not None:
                connection.close()
        backoff(attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _body(response: http.client.HTTPResponse, digest: str, max_size: int) -> bytes:
    if response.status >= 400:
        raise error_from(httpx.Response(response.status, content=response.read(_ERROR_BODY)))
    length = _length(response.getheader("Content-Length"), digest, max_size)
    try:
        data = response.read(length)  # one bytes of ``length``, filled from the socket
    except (OSError, http.client.HTTPException):
        raise _ended_early(digest) from None
    except MemoryError:
        raise RegistryError(
            f"blob {digest}: its {length:,} bytes do not fit in this process's memory"
        ) from None
    if len(data) != length:
        raise _ended_early(digest)
    return data


def connection_to(scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
    """A connection to ``host`` (TLS with httpx's context for https), not yet opened."""
    if scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=CONNECT_TIMEOUT, context=_tls())
    return http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def _through_httpx(api: Http, path: str, digest: str, max_size: int) -> bytes:
    with api.stream(path) as response:
        length = _length(response.headers.get("Content-Length"), digest, max_size)
        chunks = []
        try:
            for chunk in response.iter_raw():
                chunks.append(chunk)
        except httpx.HTTPError:
            raise _ended_early(digest) from None
    data = b"".join(chunks)
    if len(data) != length:
        raise _ended_early(digest)
    return data


def _length(header: str | None, digest: str, max_size: int) -> int:
    if header is None or not (header.isascii() and header.isdigit()):
        raise IntegrityError(f"blob {digest}: the server's answer gives no length", expected=digest)
    length = int(header)
    if length > max_size:
        raise IntegrityError(
            f"blob {digest}: the server would send {length:,} bytes, more than the "
            f"{max_size:,} expected",
            expected=digest,
        )
    return length


def _ended_early(digest: str) -> IntegrityError:
    return IntegrityError(
        f"blob {digest}: the server's answer ended early (a corrupt blob is not sent whole)",
        expected=digest,
    )
