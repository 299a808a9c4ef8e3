"""Security headers on every answer of the server: a Content-Security-Policy and its kin.

The pages carry a cookie that reads the API (``server/_auth.py``), so every answer says what a
browser may do with it. The pages have no script at all; the API's documentation page
(``server/_docs.py``) runs Swagger UI from this origin only. Each answer gets:

- ``Content-Security-Policy``: ``PAGES`` (no script, styles and images from this origin,
  forms posted here only, never framed), ``DOCS`` on ``/api/v1/docs`` (scripts from this
  origin, no inline script or ``eval``; inline styles, which Swagger UI sets), ``API``
  elsewhere under ``/api/`` (nothing at all: JSON and blobs are never rendered);
- ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``,
  ``Referrer-Policy: no-referrer`` and ``Cross-Origin-Opener-Policy: same-origin``.

A route that sets one of these itself keeps its own.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["API", "DOCS", "PAGES", "SecurityHeaders"]

_COMMON = "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
#: The pages' policy: no script anywhere.
PAGES = f"default-src 'none'; style-src 'self'; img-src 'self' data:; {_COMMON}"
#: The documentation page's policy: Swagger UI from this origin.
DOCS = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    f"img-src 'self' data:; connect-src 'self'; {_COMMON}"
)
#: The API's policy: its answers are data, never documents.
API = f"default-src 'none'; sandbox; {_COMMON}"

_FIXED = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
)


def policy(path: str, api: str = "/api/v1") -> str:
    """The Content-Security-Policy of an answer to ``path``."""
    if path == f"{api}/docs" or path.startswith(f"{api}/docs/"):
        return DOCS
    if path.startswith("/api/"):
        return API
    return PAGES


class SecurityHeaders:
    """Pure ASGI middleware: adds the headers of this module's doc to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = policy(scope["path"])

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("content-security-policy", csp)
                for name, value in _FIXED:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, sending)
