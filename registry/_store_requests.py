"""Requests to a blob store's presigned URLs, sent on an ``httpx.HTTPTransport`` directly
rather than through an ``httpx.Client``: the client logs each request's URL at INFO
(``HTTP Request: PUT https://…?X-Amz-Signature=…``), and a presigned URL's query is its
signature, a secret for as long as it lasts. The transport (httpcore) logs at DEBUG the
method, host and port only. Used by ``registry/_presigned.py`` (PUT) and
``registry/_remote_reads.py`` (lazy GETs); errors name no URL (the callers fall back to the
server)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

__all__ = ["StoreRequests"]


class StoreRequests:
    """Sends requests to presigned URLs within ``timeout``, no redirect followed, nothing
    logged by httpx's client; thread-safe as its transport's pool is."""

    def __init__(self, timeout: httpx.Timeout):
        self._timeout = timeout.as_dict()
        self._transport = httpx.HTTPTransport()

    def send(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """The open answer (read it, or close it).

        Raises:
            httpx.HTTPError: the store could not be reached or the answer broke off.
        """
        request = httpx.Request(
            method, url, content=content, headers=headers, extensions={"timeout": self._timeout}
        )
        response = self._transport.handle_request(request)
        response.request = request
        return response

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> StoreRequests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
