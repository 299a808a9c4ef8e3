"""jaxport's errors as HTTP answers: a status per class and one JSON body.

Body: ``{"error": {"type": "NotFoundError", "message": "...", "attrs": {...}}}``; ``attrs`` are
the error's public attributes (``needed``, ``found``, ...), read back by the client
(``registry/_http.py``) into the same class. A message never shows the server's disk paths
(``public_message``). An error that is not a ``JaxportError`` is a 500
that says only "internal error" (its text could hold anything): ``server/_guard.py`` answers
it and logs its type, never its message.

Every other error answer of the API has the same body: a query parameter or body field that
does not fit the route (FastAPI's validation, 422) is an ``InvalidNameError`` naming the field
(never echoing its value), an HTTP error of the framework (an unknown path 404, a method not
allowed 405, a body that is not JSON 400, too large 413) an ``HTTPError`` (a
``RegistryError`` to the client; 400 and 413 an ``InvalidNameError``). ``RESPONSES`` documents
them in the OpenAPI document.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from jaxport import _errors as e

__all__ = [
    "RESPONSES",
    "ErrorBody",
    "ErrorDetail",
    "error_body",
    "http_error_handler",
    "jaxport_error_handler",
    "plain_body",
    "public_message",
    "status_of",
    "validation_error_handler",
]

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
    (e.PackageIndexError, 502),
    (e.AuditError, 500),
    (e.JaxportError, 400),
)


class ErrorDetail(BaseModel):
    """What went wrong: the error's class name, its message and its public attributes."""

    type: str
    message: str
    attrs: dict[str, Any]


class ErrorBody(BaseModel):
    """The body of every error answer of the API."""

    error: ErrorDetail


#: The error answers of every API route, for the OpenAPI document.
RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Bad request: a malformed name, reference, digest, range or body"),
        (401, "No token, or an unknown, expired or revoked one"),
        (403, "The token's scope or name prefixes do not allow this"),
        (404, "Not found"),
        (409, "Conflict"),
        (413, "The request body is too large"),
        (422, "A parameter or body that does not fit, or an archive that is refused"),
        (500, "Internal error"),
        (502, "An upstream the server reads for the request (the package index) failed"),
        (503, "The server is unavailable; retry"),
    )
}

#: Attributes an error may carry (each class's documented ones); JSON values only.
_ATTRS = ("needed", "found", "expected", "supported", "variants", "targets", "fun_name",
          "section", "what", "offset", "vjp_order", "failures", "version")  # fmt: skip


#: An absolute path of the server's disk (two parts at least, so ``/login`` stays): after the
#: start, a space, a quote, a bracket, ``=``, ``,`` or ``:``, or after ``//`` (``sqlite:////srv``,
#: ``file:///srv``; a URL's host is not a slash, so ``http://host/a`` stays).
_PATH = re.compile(r"""(?:(?<=^)|(?<=[\s'"(\[=,:])|(?<=//))/[^\s'"/]+(?:/[^\s'"]*)+""")
#: What stands for a path in an answer.
HIDDEN_PATH = "<server path>"


def public_message(error: BaseException, principal: Any = None) -> str:
    """The message of an error as a client may read it: the server's disk paths (its blob
    store, database, temporary files: issue 24's F11) replaced by ``HIDDEN_PATH``, and for a
    404 to a token limited to name prefixes (or before a token was read) only the first
    clause, since "no artifact named 'x'; names: a, b" lists names it may not see."""
    message = _PATH.sub(HIDDEN_PATH, str(error))
    if status_of(error) == 404 and (principal is None or principal.prefixes):
        message = message.split("; ")[0]
    return message


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
        elif isinstance(value, list | tuple) and all(_is_pair(x) for x in value):
            attrs[name] = [list(x) for x in value]  # GateError.failures: (gate, reason) pairs
    message = _PATH.sub(HIDDEN_PATH, str(error))
    return {"error": {"type": type(error).__name__, "message": message, "attrs": attrs}}


async def jaxport_error_handler(request: Request, error: Exception) -> JSONResponse:
    code = status_of(error)
    headers = {"WWW-Authenticate": "Bearer"} if code == 401 else None
    if code == 503:  # a busy server (``server/_limits.py``): the client retries after it
        headers = {"Retry-After": "1"}
    body = error_body(error)
    body["error"]["message"] = public_message(error, getattr(request.state, "principal", None))
    return JSONResponse(body, status_code=code, headers=headers)


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(x, str) for x in value)
    )


def plain_body(kind: str, message: str) -> dict[str, Any]:
    """An error answer's body without attributes."""
    return {"error": {"type": kind, "message": message, "attrs": {}}}


async def validation_error_handler(request: Request, error: Exception) -> JSONResponse:
    """FastAPI's 422 for a parameter or body that does not fit, as an ``InvalidNameError``
    naming the first field that does not (its value is never echoed)."""
    assert isinstance(error, RequestValidationError)
    problems = error.errors()
    first = problems[0] if problems else {}
    where = ".".join(str(x) for x in first.get("loc", ())) or "the request"
    message = f"{where}: {first.get('msg', 'not valid')}"[:300]
    return JSONResponse(plain_body("InvalidNameError", message), status_code=422)


async def http_error_handler(request: Request, error: Exception) -> JSONResponse:
    """An HTTP error of the framework (unknown path, method not allowed, ...) in the body of
    every error answer."""
    assert isinstance(error, HTTPException)
    kind = "InvalidNameError" if error.status_code in (400, 413) else "HTTPError"
    body = plain_body(kind, str(error.detail))
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)
