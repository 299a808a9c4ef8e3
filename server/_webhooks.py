"""Webhooks: each event this server process appends is POSTed as JSON to every configured URL.

The body is the event (``to_wire``); ``X-Jaxport-Signature: sha256=HEX`` is the HMAC-SHA256 of
the body under the server's webhook secret (``--webhook-secret-file``), ``X-Jaxport-Event`` its
kind and ``X-Jaxport-Delivery`` its id. A delivery that fails (connection error, or a status
other than 2xx) is retried with exponential backoff (0.5 s doubling, ``ATTEMPTS`` tries) in a
background thread; requests never wait for it. Delivery is at least once per URL from the
process that recorded the event; an event recorded by a process that then dies before
delivering is in the event log (``GET /api/v1/events``), not in the hook. ``close`` says which
deliveries failed (``jaxport watch --webhook`` exits 1 on them); a receiver is named there and
in the log by its scheme, host and port only, as a hook URL's path or query may be its secret.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from collections.abc import Sequence

import httpx

from jaxport.registry import Event
from jaxport.registry._internal import to_wire

__all__ = ["ATTEMPTS", "Webhooks", "signature"]

ATTEMPTS = 6
_LOG = logging.getLogger("jaxport.server.webhooks")
#: The failed deliveries a process keeps for ``close`` (a server's run may fail many).
_KEPT_FAILURES = 100


def signature(secret: str | None, body: bytes) -> str:
    """``sha256=HEX``: the HMAC-SHA256 of ``body`` under ``secret`` (empty without one)."""
    key = (secret or "").encode()
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


class Webhooks:
    """Delivers events to ``urls`` from one background thread."""

    def __init__(self, urls: Sequence[str], secret: str | None, *, first_delay: float = 0.5):
        self.urls = tuple(urls)
        self._secret = secret
        self._first_delay = first_delay
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._failures: collections.deque[str] = collections.deque(maxlen=_KEPT_FAILURES)
        self._thread = threading.Thread(target=self._run, name="jaxport-webhooks", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"Webhooks({len(self.urls)} url(s))"  # never the secret

    def deliver(self, event: Event) -> None:
        """Queues ``event`` for every URL (returns at once)."""
        self._queue.put(event)

    def close(self, timeout: float | None = 60.0) -> list[str]:
        """Delivers what is queued (each with its retries), then stops the thread, waiting at
        most ``timeout`` seconds (None: until every delivery is done or has failed).

        Returns:
            One line per delivery that failed after its tries (the last 100): the event, the
            receiver (``webhook N``, the position of its URL, and its scheme, host and port)
            and the last failure; a last line when deliveries were still being tried as the
            wait ended.
        """
        self._queue.put(None)
        self._thread.join(timeout=timeout)
        failed = list(self._failures)
        if self._thread.is_alive():
            failed.append(f"deliveries still being tried after {timeout} s")
        return failed

    def _run(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            while (event := self._queue.get()) is not None:
                body = json.dumps(to_wire(event), sort_keys=True).encode()
                for number, url in enumerate(self.urls, 1):
                    why = self._post(client, url, event, body)
                    if why is not None:
                        self._failures.append(
                            f"event {event.id} ({event.kind}) to webhook {number} "
                            f"{_host(url)}: {why} after {ATTEMPTS} tries"
                        )

    def _post(self, client: httpx.Client, url: str, event: Event, body: bytes) -> str | None:
        """POSTs ``body`` to ``url`` with its retries: None once taken, else the last
        failure (the exception's type, or ``HTTP STATUS``)."""
        headers = {
            "Content-Type": "application/json",
            "X-Jaxport-Event": event.kind,
            "X-Jaxport-Delivery": str(event.id),
            "X-Jaxport-Signature": signature(self._secret, body),
        }
        delay, why = self._first_delay, ""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                answer = client.post(url, content=body, headers=headers)
                if answer.is_success:
                    return None
                why = f"HTTP {answer.status_code}"
            except httpx.HTTPError as e:
                why = type(e).__name__
                _LOG.warning("webhook %s attempt %d: %s", _host(url), attempt, why)
            if attempt < ATTEMPTS:
                time.sleep(delay)
                delay *= 2
        _LOG.error(
            "webhook %s: event %d not delivered after %d tries", _host(url), event.id, ATTEMPTS
        )
        return why


def _host(url: str) -> str:
    """The URL without user info, path or query (a hook URL may carry a secret)."""
    try:
        parsed = httpx.URL(url)
        return f"{parsed.scheme}://{parsed.host}" + (f":{parsed.port}" if parsed.port else "")
    except Exception:
        return "<webhook>"
