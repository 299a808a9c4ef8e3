"""The HTTP side of the registry server's client: one ``httpx.Client``, retries, typed errors.

Retries: a connection error, a timeout or a 502, 503 or 504 is retried with exponential backoff
(0.2 s doubling, ``ATTEMPTS`` tries), then ``ServerUnavailableError``; not a request's answer
that is the server's own error of another type (a ``PackageIndexError``'s 502: the server's
upstream failed, and asking again would only repeat the work). An error answer (``{"error":
{"type", "message", "attrs"}}``, ``server/_errors.py``) is raised as the jaxport error of that
type with its attributes; an unknown type as ``RegistryError``. The token is sent in the
``Authorization`` header only; it is in no message, ``repr`` or URL.

An answer of ``json`` is read as sent (``Accept-Encoding: identity``; an encoded one is a
``RegistryError``: a compressed body would be decoded whole before any limit), at most
``MAX_ANSWER_BYTES`` and whole within the client's timeout (a server that drips its answer is
broken off and retried as a timeout): a hostile or broken server cannot make the client hold
more or wait longer. Blobs are read by ``_download``, bounded by their recorded size.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from jaxport import JaxportError, RegistryError, ServerUnavailableError, _errors
from jaxport.registry._config import safe_url
from jaxport.registry._deadline import within

__all__ = ["ATTEMPTS", "MAX_ANSWER_BYTES", "RETRY_STATUS", "Http", "backoff", "error_from"]

ATTEMPTS = 5
#: The largest JSON answer (or error answer) the client reads, bytes: the server's pages and
#: reports are far smaller (a page of versions is 50 rows).
MAX_ANSWER_BYTES = 64 * 2**20
RETRY_STATUS = frozenset({502, 503, 504})


class Http:
    """Requests to one server's ``/api/v1``, with ``token``."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 300.0):
        self.url = safe_url(url.rstrip("/"))
        #: The API's root URL, the headers of every request (the token's) and the seconds a
        #: read may wait: what ``_download`` sends its requests with.
        self.base, self.timeout = url.rstrip("/") + "/api/v1", timeout
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(
            base_url=self.base,
            headers=self.headers,
            timeout=httpx.Timeout(timeout, connect=10.0),
            follow_redirects=False,
        )
        # A client dropped without close() releases its connections when collected.
        weakref.finalize(self, self._client.close)

    def __repr__(self) -> str:
        return f"Http({self.url!r})"

    def close(self) -> None:
        self._client.close()

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of one request (retried; see the module's doc).

        Raises:
            JaxportError: the server's error, typed; ``ServerUnavailableError`` after retries;
                ``CorruptArchiveError``: an answer that is not JSON, or nested too deep.
        """
        response = self._send(method, path, **kwargs)
        if response.status_code == 204:
            return None
        try:
            return response.json()
        except (ValueError, RecursionError):
            raise _errors.CorruptArchiveError(
                f"{self.url} answered {method} {path} with a body that is not JSON or is "
                "nested too deep"
            ) from None

    @contextmanager
    def stream(
        self, path: str, headers: dict[str, str] | None = None, *, follow_redirects: bool = False
    ) -> Iterator[httpx.Response]:
        """A streamed GET (retried until the answer's head arrives); ``follow_redirects``: a
        redirect (to a presigned store URL) is followed with the same headers but the token,
        which httpx drops for another origin."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with self._client.stream(
                    "GET", path, headers=headers, follow_redirects=follow_redirects
                ) as response:
                    if response.status_code in RETRY_STATUS and attempt < ATTEMPTS:
                        pass
                    else:
                        if response.is_error:
                            response.read()
                            raise error_from(response)
                        yield response
                        return
            except httpx.TransportError as e:
                if attempt == ATTEMPTS:
                    raise self._unavailable(e) from None
            backoff(attempt)
        raise ServerUnavailableError(f"{self.url} kept answering 503")

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = self._answer(method, path, **kwargs)
            except httpx.TransportError as e:
                if attempt == ATTEMPTS:
                    raise self._unavailable(e) from None
            else:
                if not _retried(response) or attempt == ATTEMPTS:
                    if response.is_error:
                        raise error_from(response)
                    return response
            backoff(attempt)
        raise ServerUnavailableError(f"{self.url} kept answering 503")  # pragma: no cover

    def _answer(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, its answer read whole as the module's doc says.

        Raises:
            RegistryError: an encoded answer, or one over ``MAX_ANSWER_BYTES``.
            httpx.TransportError: the connection failed, or the answer took longer than the
                timeout in all (``ReadTimeout``).
        """
        headers = {**kwargs.pop("headers", {}), "Accept-Encoding": "identity"}
        request = self._client.build_request(method, path, headers=headers, **kwargs)
        response = self._client.send(request, stream=True)
        try:
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise RegistryError(
                    f"{self.url} answered {method} {path} encoded as {encoding[:40]!r}, not as "
                    "sent (identity was asked)"
                )
            # A transport that answers with bytes in hand (httpx.MockTransport) has read them
            raw = iter([response.content]) if response.is_stream_consumed else response.iter_raw()
            body = bytearray()
            for chunk in within(raw, self.timeout):
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise RegistryError(
                        f"{self.url} answered {method} {path} with more than "
                        f"{MAX_ANSWER_BYTES} bytes: refused"
                    )
        finally:
            response.close()
        return httpx.Response(
            response.status_code, headers=response.headers, content=bytes(body), request=request
        )

    def _unavailable(self, error: Exception) -> ServerUnavailableError:
        return ServerUnavailableError(
            f"the registry server {self.url} cannot be reached after {ATTEMPTS} tries: "
            f"{type(error).__name__}"
        )


def _retried(response: httpx.Response) -> bool:
    """Whether an answer is worth another try: a 502, 503 or 504 of a proxy (no error body of
    jaxport's) or of a busy server (``ServerUnavailableError``)."""
    if response.status_code not in RETRY_STATUS:
        return False
    try:
        kind = response.json()["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return True
    return bool(kind == "ServerUnavailableError")


def backoff(attempt: int) -> None:
    time.sleep(min(5.0, 0.2 * 2 ** (attempt - 1)))


def error_from(response: httpx.Response) -> JaxportError:
    """The jaxport error an error answer describes (``server/_errors.py``'s body)."""
    try:
        doc = response.json()["error"]
        kind, message, attrs = str(doc["type"]), str(doc["message"]), dict(doc.get("attrs", {}))
    except (ValueError, KeyError, TypeError):
        if response.status_code in RETRY_STATUS:
            return ServerUnavailableError(f"the registry server answered {response.status_code}")
        return RegistryError(f"the registry server answered {response.status_code}")
    cls = getattr(_errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, JaxportError)):
        return RegistryError(f"the registry server failed ({response.status_code}): {message}")
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    for name in _ATTRIBUTES:  # every documented attribute exists, None where not sent
        value = attrs.get(name)
        if isinstance(value, list):  # GateError.failures: (gate, reason) pairs
            value = tuple(tuple(x) if isinstance(x, list) else x for x in value)
        setattr(error, name, value)
    return error


#: The attributes jaxport's error classes document (``jaxport/_errors.py``).
_ATTRIBUTES = ("needed", "found", "expected", "supported", "variants", "targets", "fun_name",
               "section", "what", "offset", "path", "window", "vjp_order", "failures",
               "version")  # fmt: skip
