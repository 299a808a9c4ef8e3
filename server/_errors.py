"""jaxport's errors as HTTP answers: a status per class and one JSON body.

Body: ``{"error": {"type": "NotFoundError", "message": "...", "attrs": {...}}}``; ``attrs`` are
the error's public attributes (``needed``, ``found``, ...), read back by the client
(``registry/_remote_errors.py``) into the same class. An error that is not a ``JaxportError``
is a 500 that says only "internal error" (its text could hold anything); the server logs its
type, never its message.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from jaxport import _errors as e

__all__ = ["error_body", "jaxport_error_handler", "status_of", "unexpected_error_handler"]

_LOG = logging.getLogger("jaxport.server")

#: Most specific first: the first class an error is an instance of gives its status.
_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (e.AuthenticationError, 401),
    (e.PermissionDeniedError, 403),
    (e.NotFoundError, 404),
    (e.ConflictError, 409),
    (e.SchemaVersionError, 409),
    (e.WrongKindError, 409),
    (e.SignatureError, 403),
    (e.CorruptArchiveError, 422),
    (e.UnsupportedVersionError, 422),
    (e.UnsupportedFeatureError, 422),
    (e.OutsideJaxWindowError, 422),
    (e.ParamsMismatchError, 422),
    (e.RunError, 422),
    (e.ServerUnavailableError, 503),
    (e.AuditError, 500),
    (e.JaxportError, 400),
)

#: Attributes an error may carry (each class's documented ones); JSON values only.
_ATTRS = ("needed", "found", "expected", "supported", "variants", "targets", "fun_name",
          "section", "what", "offset", "vjp_order")  # fmt: skip


def status_of(error: BaseException) -> int:
    """The HTTP status of a jaxport error."""
    return next(code for cls, code in _STATUS if isinstance(error, cls))


def error_body(error: BaseException) -> dict[str, Any]:
    """The JSON body of an error answer."""
    attrs = {}
    for name in _ATTRS:
        value = getattr(error, name, None)
        if isinstance(value, str | int | float | bool) or (
            isinstance(value, list | tuple) and all(isinstance(x, str | int) for x in value)
        ):
            attrs[name] = list(value) if isinstance(value, tuple) else value
    return {"error": {"type": type(error).__name__, "message": str(error), "attrs": attrs}}


async def jaxport_error_handler(request: Request, error: Exception) -> JSONResponse:
    code = status_of(error)
    headers = {"WWW-Authenticate": "Bearer"} if code == 401 else None
    body = error_body(error)
    principal = getattr(request.state, "principal", None)
    if code == 404 and (principal is None or principal.prefixes):
        # "no artifact named 'x'; names: a, b": the names a limited token may not see
        body["error"]["message"] = str(error).split("; ")[0]
    return JSONResponse(body, status_code=code, headers=headers)


async def unexpected_error_handler(request: Request, error: Exception) -> JSONResponse:
    _LOG.error("internal error %s on %s %s", type(error).__name__, request.method, request.url.path)
    body = {"error": {"type": "InternalError", "message": "internal error", "attrs": {}}}
    return JSONResponse(body, status_code=500)
