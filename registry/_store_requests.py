"""Requests to a blob store's presigned URLs, sent on an ``httpx.HTTPTransport`` directly
rather than through an ``httpx.Client``: the client logs each request's URL at INFO
(``HTTP Request: PUT https://…?X-Amz-Signature=…``), and a presigned URL's query is its
signature, a secret for as long as it lasts. The transport (httpcore) logs at DEBUG the
method, host and port only. Used by ``registry/_presigned.py`` (PUT) and
``registry/_remote_reads.py`` (lazy GETs); errors name no URL (the callers fall back to the
server). Proxies are taken from the environment as an ``httpx.Client`` would
(``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY``, ``NO_PROXY``: the standard library's
``urllib.request.getproxies`` and ``proxy_bypass``)."""

from __future__ import annotations

import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping

import httpx

__all__ = ["StoreRequests"]


class StoreRequests:
    """Sends requests to presigned URLs within ``timeout``, no redirect followed, nothing
    logged by httpx's client; thread-safe as its transport's pool is."""

    def __init__(self, timeout: httpx.Timeout):
        self._timeout = timeout.as_dict()
        self._lock = threading.Lock()
        #: One transport per proxy (None: direct), made when first needed.
        self._transports: dict[str | None, httpx.HTTPTransport] = {}

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
        response = self._transport_for(url).handle_request(request)
        response.request = request
        return response

    def _transport_for(self, url: str) -> httpx.HTTPTransport:
        proxy = _environment_proxy(url)
        with self._lock:
            transport = self._transports.get(proxy)
            if transport is None:
                transport = self._transports[proxy] = httpx.HTTPTransport(proxy=proxy)
            return transport

    def close(self) -> None:
        with self._lock:
            transports, self._transports = list(self._transports.values()), {}
        for transport in transports:
            transport.close()

    def __enter__(self) -> StoreRequests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None: go direct)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy
