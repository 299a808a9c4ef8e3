"""Who is asking: the request's bearer token, checked for a scope (and a name).

Each route declares the scope it needs (``Depends(scope("write"))``); the token's name is
the actor of the writes the request makes (``registry/_events.py``). A missing, unknown,
expired or revoked token is 401; a token whose scope or name prefixes do not allow the request
is 403 naming the scope needed. With ``open_read`` (``jaxport serve --open-read``), reads need
no token.

Browsers send no ``Authorization`` header: for reads (the ``read`` scope: API reads and the
pages), the token may also come from the ``jaxport_token`` cookie that the ``/login`` page sets
(HttpOnly, SameSite=Strict). The header comes first; writes never take the cookie, so a page
another site makes a browser load cannot write.

A token limited to name prefixes sees only those names: a name it gives outside them is 403
(before any lookup), and what it reaches without giving a name is as if it did not exist (404
with the message of a missing one): a digest reference to another name's archive (a
``sha256:`` prefix is matched among its names' archives only, so an ambiguous one lists no
other), a blob that is not the archive of one of its names' versions (``server/_api_read.py``),
a part it did not upload and no version of its names holds (``registry/_reach.py``). Store-wide
operations (gc, verify) and tokens reaching further than a token's own are not its to manage
(``check_store_wide``, ``TokenInfo.covers``).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from jaxport import InvalidNameError, NotFoundError, PermissionDeniedError
from jaxport.registry import Registry, TokenInfo, parse_reference
from jaxport.registry._internal import sql_backend

__all__ = [
    "ANONYMOUS",
    "COOKIE",
    "bearer",
    "check_name",
    "check_reached",
    "check_reference",
    "check_store_wide",
    "scope",
]

#: The principal of a read without a token on an ``open_read`` server.
ANONYMOUS = TokenInfo(name="anonymous", scope="read", prefixes=(), created_at=0.0)
#: The cookie that holds a token for the pages (set by ``POST /login``); reads only.
COOKIE = "jaxport_token"


def bearer(request: Request) -> str | None:
    """The token in ``Authorization: Bearer ...`` (None: no such header)."""
    header = request.headers.get("authorization", "")
    kind, _, secret = header.partition(" ")
    if kind.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()


def scope(needed: str) -> Callable[[Request], TokenInfo]:
    """A FastAPI dependency: the request's token (its ``Authorization`` header, else for
    ``read`` its ``jaxport_token`` cookie), allowed ``needed``. A route that writes runs
    its registry calls under ``acting_as(token.name)`` (a dependency runs in another thread
    than a sync route, so the route sets it itself).

    Raises:
        AuthenticationError: no token, or an unknown, expired or revoked one (401).
        PermissionDeniedError: the token's scope is too small (403, ``.needed``).
    """

    def dependency(request: Request) -> TokenInfo:
        state = request.app.state
        secret = bearer(request)
        if secret is None and needed == "read":
            secret = request.cookies.get(COOKIE) or None
        if secret is None and needed == "read" and state.open_read:
            principal = ANONYMOUS
        else:
            principal = sql_backend(state.registry).tokens.authenticate(secret)
        request.state.principal = principal
        principal.check(needed)
        return principal

    return dependency


def check_name(principal: TokenInfo, name: str) -> None:
    """Refuses a name outside the token's prefixes (403).

    Raises:
        PermissionDeniedError: ``name`` does not start with one of the token's prefixes.
    """
    if not principal.allows_name(name):
        raise PermissionDeniedError(
            f"token {principal.name!r} is limited to names starting with "
            f"{', '.join(map(repr, principal.prefixes))}; {name!r} is not one"
        )


def check_reference(registry: Registry, principal: TokenInfo, reference: str) -> str:
    """Refuses a reference outside the token's prefixes, and returns the reference to look
    up: a name it gives is 403 (before any lookup); a ``sha256:`` prefix is matched against
    the archives of the names the token sees only, and answered as ``sha256:`` and the whole
    digest of the one it matches. What another name holds is as if it did not exist: no
    match is 404, and an ambiguous prefix (400) lists only archives the token sees.

    Raises:
        PermissionDeniedError: the reference names a name outside the prefixes.
        NotFoundError: a digest prefix that no archive of the token's names has.
        InvalidNameError: a digest prefix that several of them have, or a bad reference.
    """
    parsed = parse_reference(reference)
    if parsed.name is not None:
        check_name(principal, parsed.name)
        return reference
    prefix = parsed.digest_prefix
    if not principal.prefixes or prefix is None:
        return reference
    found = sql_backend(registry).reach.visible_archives(principal.prefixes, prefix)
    if not found:
        raise NotFoundError(f"no archive has a digest starting with {prefix}")
    if len(found) > 1:
        shown = ", ".join(d[: len(prefix) + 4] for d in found[:-1])
        raise InvalidNameError(
            f"sha256:{prefix} matches several archives ({shown}, ...): give more digits"
        )
    check_reached(principal, reference, registry.get(f"sha256:{found[0]}").name)
    return f"sha256:{found[0]}"


def check_store_wide(principal: TokenInfo) -> None:
    """Refuses a store-wide operation (gc, verify: every name's blobs) to a token limited to
    name prefixes: they need an admin token without prefixes.

    Raises:
        PermissionDeniedError: the token has prefixes.
    """
    if principal.prefixes:
        raise PermissionDeniedError(
            f"token {principal.name!r} is limited to name prefixes; this reaches every name "
            "and needs an admin token without prefixes"
        )


def check_reached(principal: TokenInfo, reference: str, name: str) -> None:
    """Refuses the name a digest reference reached outside the token's prefixes, as the
    registry refuses a digest no archive has (a name reference was checked before).

    Raises:
        NotFoundError: ``name`` is outside the prefixes.
    """
    if not principal.allows_name(name):
        prefix = parse_reference(reference).digest_prefix
        raise NotFoundError(f"no archive has a digest starting with {prefix}")
