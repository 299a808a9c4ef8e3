"""The server's web pages: read-only, server-rendered with Jinja2, no JavaScript.

=============================  ================================================================
``/``                          every name the token may see: newest version, versions, aliases
``/names/{name}``              its description (the newest version's), its versions (newest
                               first, paged) and variants, a form to compare two, its aliases
                               and their history
``/names/{name}/{version}``    one version: its description, how to pull it (Python and CLI, per
                               platform), each variant's facts, a model's methods and tensors,
                               metadata, stored audit findings
``/names/{name}/compare``      two versions (``?a=1&b=2``) side by side and ``Registry.diff``'s
                               changes (``server/_compare.py``)
``/search``                    versions by name, metadata, platform, jax release
                               (``server/_find.py``); every page's header has its box
``/matrix``                    the audit matrix (``/names/{name}/matrix``: one name's)
``/events``                    the event log in words, newest first, paged
``/login``, ``/logout``        a form that stores a token in the ``jaxport_token`` cookie
=============================  ================================================================

Pages read as the API does (scope ``read``, ``server/_auth.py``); browsers send no bearer
header, so ``POST /login`` puts the token in an HttpOnly, SameSite=Strict cookie (never in a
URL), and with ``open_read`` no token is needed. Every error is a page (``PageRoute``; an
unknown path too, ``http_error_handler``): no or a bad token is a 401 page that links to
``/login``, never a traceback; any other error page shows who is signed in, as every page does.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi import Query as Param
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from jaxport import AuthenticationError, JaxportError
from jaxport.audit import STATUSES
from jaxport.registry import TokenInfo
from jaxport.registry._internal import sql_backend
from jaxport.server import _errors
from jaxport.server import _views as v
from jaxport.server._auth import ANONYMOUS, COOKIE, bearer, check_name, scope
from jaxport.server._compare import compare
from jaxport.server._errors import public_message, status_of
from jaxport.server._find import Query, find
from jaxport.server._lineage_view import lineage_tree
from jaxport.server._state import registry_of
from jaxport.server._usage import snippets

__all__ = ["PageRoute", "http_error_handler", "router"]

_LOG = logging.getLogger("jaxport.server")
NAMES_PER_PAGE = 50
VERSIONS_PER_PAGE = 20
EVENTS_PER_PAGE = 50
#: The largest ``POST /login`` body, in bytes (a token is 47 characters).
_MAX_FORM = 8192
_TITLES = {
    400: "Bad request", 401: "Sign in needed", 403: "Not allowed", 404: "Not found",
    405: "Not allowed", 413: "Too large", 422: "Bad request", 500: "Internal error",
}  # fmt: skip


class PageRoute(APIRoute):
    """A route whose errors are pages: a jaxport error's status (``server/_errors.py``) with
    its message, a bad query 422, anything else a 500 that says only "internal error"."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except JaxportError as error:
                principal = getattr(request.state, "principal", None)
                return error_page(request, status_of(error), public_message(error, principal))
            except RequestValidationError:
                return error_page(request, 422, "a query parameter or path part is not valid")
            except Exception as error:
                _LOG.error(
                    "internal error %s on %s %s",
                    type(error).__name__, request.method, request.url.path,
                )  # fmt: skip
                return error_page(request, 500, "internal error")

        return page_handler


def error_page(request: Request, status: int, message: str, who: str | None = None) -> Response:
    """An error as a page; a 401 links to ``/login`` and drops a cookie that failed. Any
    other shows who is signed in: ``who``, else the token the request's route read."""
    if status == 401 and bearer(request) is None and COOKIE not in request.cookies:
        message = "This page needs a token with the read scope."
    principal = getattr(request.state, "principal", None)
    if who is None and status != 401 and isinstance(principal, TokenInfo):
        who = _who(principal)
    title = _TITLES.get(status, "Error")
    page = v.render(
        "error.html", status, title=title, message=message, status=status,
        who=None if status == 401 else who,
    )  # fmt: skip
    if status == 401:
        page.headers["WWW-Authenticate"] = "Bearer"
        if COOKIE in request.cookies:
            page.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return page


async def http_error_handler(request: Request, error: Exception) -> Response:
    """An HTTP error of the framework (an unknown path 404, a method not allowed 405): under
    ``/api/`` the API's JSON answer (``server/_errors.py``), elsewhere a page that shows who
    the cookie's token is, when it is one (read in a thread: it asks the database)."""
    assert isinstance(error, HTTPException)
    if request.url.path.startswith("/api/"):
        return await _errors.http_error_handler(request, error)
    who = await run_in_threadpool(_cookie_holder, request)
    page = error_page(request, error.status_code, str(error.detail), who)
    for name, value in (error.headers or {}).items():
        page.headers[name] = value
    return page


def _cookie_holder(request: Request) -> str | None:
    """The name of the token in the request's cookie (None: none, or not a valid one)."""
    if not request.cookies.get(COOKIE):
        return None
    try:
        return _who(scope("read")(request))
    except JaxportError:
        return None


router = APIRouter(route_class=PageRoute, include_in_schema=False)
Reader = Annotated[TokenInfo, Depends(scope("read"))]
Page = Annotated[int, Param(ge=1, le=1_000_000)]


def _who(p: TokenInfo) -> str | None:
    """The token name the pages' header shows (None: an anonymous read)."""
    return None if p is ANONYMOUS else p.name


@router.get("/static/site.css")
def site_css() -> Response:
    """The pages' style sheet (no token needed)."""
    return Response(v.css(), media_type="text/css", headers={"Cache-Control": "max-age=3600"})


@router.get("/")
def index(request: Request, p: Reader, page: Page = 1) -> Response:
    """Every name the token may see, sorted, a page at a time."""
    names = [n for n in registry_of(request).names() if p.allows_name(n)]
    start = (page - 1) * NAMES_PER_PAGE
    rows = v.name_rows(registry_of(request), names[start : start + NAMES_PER_PAGE])
    more = len(names) > start + NAMES_PER_PAGE
    return v.render("index.html", rows=rows, page=page, more=more, who=_who(p))


@router.get("/names/{name}/matrix")
def name_matrix(request: Request, p: Reader, name: str) -> Response:
    """The audit matrix of one name's variants."""
    check_name(p, name)
    return _matrix(request, p, name)


@router.get("/names/{name}")
def name_page(request: Request, p: Reader, name: str, page: Page = 1) -> Response:
    """A name's description (its newest version's), its versions (newest first, paged) with
    their variants, a form to compare two, its aliases (their gates, pass or fail at the
    version each points at) and moves."""
    check_name(p, name)
    reg = registry_of(request)
    rows, total = v.version_rows(reg, name, page=page, per_page=VERSIONS_PER_PAGE)
    newest = reg.get(name) if total else None  # its description heads the page
    return v.render(
        "name.html", name=name, rows=rows, total=total, page=page,
        more=total > page * VERSIONS_PER_PAGE, aliases=reg.aliases(name),
        moves=v.alias_moves(reg, name), newest=newest, who=_who(p), gates=reg.gates(name),
    )  # fmt: skip


Version = Annotated[int, Param(ge=1, le=2**31 - 1)]


@router.get("/names/{name}/compare")
def compare_page(request: Request, p: Reader, name: str, a: Version, b: Version) -> Response:
    """Versions ``a`` and ``b`` of ``name`` side by side, and what changed from ``a`` to ``b``."""
    check_name(p, name)
    comparison = compare(registry_of(request), name, a, b)
    return v.render("compare.html", name=name, c=comparison, who=_who(p))


@router.get("/names/{name}/{version}")
def version_page(request: Request, p: Reader, name: str, version: int) -> Response:
    """One version: its description, how to pull it, each variant's facts, a model's methods
    and tensors, metadata, findings, its lineage and provenance."""
    check_name(p, name)
    reg = registry_of(request)
    ref = reg.get(f"{name}:{version}")
    findings = v.version_findings(reg, name, version)
    usage = snippets(ref, str(request.base_url).rstrip("/"))
    root, lineage = lineage_tree(reg, p, name, version)
    return v.render(
        "version.html", ref=ref, findings=findings, usage=usage, who=_who(p),
        lineage_root=root, lineage=lineage,
    )  # fmt: skip


@router.get("/search")
def search(
    request: Request,
    p: Reader,
    q: Annotated[str, Param(max_length=500)] = "",
    meta: Annotated[list[str], Param()] = [],  # noqa: B006 - FastAPI copies it
    platform: Annotated[str, Param(max_length=20)] = "",
    jax: Annotated[str, Param(max_length=50)] = "",
) -> Response:
    """Versions by name, metadata, platform and jax release (``server/_find.py``)."""
    query = Query.parse(q, meta, platform, jax)
    results, more = ([], False) if query.empty else find(registry_of(request), p, query)
    return v.render("search.html", query=query, results=results, more=more, who=_who(p))


@router.get("/matrix")
def matrix(request: Request, p: Reader) -> Response:
    """The audit matrix: variants x jax releases, every name the token may see."""
    return _matrix(request, p, None)


def _matrix(request: Request, p: Reader, name: str | None) -> Response:
    findings = registry_of(request).audit_results(name=name, limit=1_000_000)
    releases, rows = v.matrix_rows(findings, p)
    legend = [*STATUSES, "not audited"]
    return v.render(
        "matrix.html", name=name, releases=releases, rows=rows, legend=legend, who=_who(p)
    )


@router.get("/events")
def events(
    request: Request, p: Reader, before: Annotated[int | None, Param(ge=1)] = None
) -> Response:
    """The event log, newest first; ``before``: the id of the last event of the page before."""
    reg = registry_of(request)
    found = reg.events(limit=EVENTS_PER_PAGE, before=before)
    older = found[-1].id if len(found) == EVENTS_PER_PAGE else None
    shown = v.event_rows(reg, v.visible_events(found, p))
    return v.render("events.html", events=shown, older=older, who=_who(p))


# -- signing in -----------------------------------------------------------------------------


@router.get("/login")
def login_form(request: Request) -> Response:
    """The sign-in form: a token, POSTed (never in a URL)."""
    return v.render("login.html", error=None, open_read=request.app.state.open_read, who=None)


def cross_site(request: Request) -> bool:
    """Whether a browser sent this form from another site (a CSRF defence for ``/login`` and
    ``/logout``, as OWASP's CSRF cheat sheet advises: "Verifying Origin With Standard
    Headers" and "Fetch Metadata"). A page cannot set either header itself: a browser's
    ``Sec-Fetch-Site`` decides (``same-origin``, or ``none`` for a typed address); without it,
    ``Origin``, whose host must be the request's ``Host`` (or ``X-Forwarded-Host``, behind a
    proxy). A request with neither comes from no browser, so no other site made it."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.lower() not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    host = urllib.parse.urlsplit(origin).netloc.lower()
    ours = {request.headers.get(h, "").lower() for h in ("host", "x-forwarded-host")}
    return not host or host not in ours


def _refused(request: Request) -> Response:
    return error_page(request, 403, "a form sent from another site is refused (cross-site)")


@router.post("/login")
async def login(request: Request) -> Response:
    """Checks the form's token and stores it in the ``jaxport_token`` cookie (HttpOnly,
    SameSite=Strict, Secure over HTTPS, until the token expires), then goes to ``/``; a bad
    token gives the form again (401) with the reason, which never shows the token. The form
    is read without a thread (anyone may send one, as slowly as they like); the token is
    checked in one. A form another site sends is refused (403, ``cross_site``)."""
    if cross_site(request):
        return _refused(request)
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM:
                return error_page(request, 413, "the form is too large")
    except ClientDisconnect:
        return Response(status_code=400)  # nobody reads it
    try:
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    except ValueError:  # more fields than the form has
        return error_page(request, 422, "the form has too many fields")
    secret = (form.get("token") or [""])[0].strip()
    open_read = request.app.state.open_read
    if not secret:
        return v.render("login.html", 401, error="no token given", open_read=open_read, who=None)
    try:
        principal = await run_in_threadpool(
            sql_backend(registry_of(request)).tokens.authenticate, secret
        )
        principal.check("read")
    except AuthenticationError as error:
        return v.render("login.html", 401, error=str(error), open_read=open_read, who=None)
    answer = RedirectResponse("/", status_code=303)
    max_age = None if principal.expires_at is None else int(principal.expires_at - time.time())
    answer.set_cookie(
        COOKIE, secret, max_age=max_age, path="/", secure=request.url.scheme == "https",
        httponly=True, samesite="strict",
    )  # fmt: skip
    return answer


@router.post("/logout")
def logout(request: Request) -> Response:
    """Drops the cookie and goes to ``/login`` (a form another site sends: 403)."""
    if cross_site(request):
        return _refused(request)
    answer = RedirectResponse("/login", status_code=303)
    answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return answer
