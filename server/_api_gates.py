"""The protected-alias routes of ``/api/v1`` (``registry/_gates.py``):

- ``GET /gates/{name}`` (``read``): ``Registry.gates``, each protected alias's gates and their
  state for the version it points at;
- ``GET /gates/{name}/{alias}?version=N`` (``read``): ``Registry.check_gates`` (null: not
  protected);
- ``PUT /gates/{name}/{alias}`` (``admin``, no name prefixes): ``Registry.protect``;
- ``DELETE /gates/{name}/{alias}`` (``admin``, no name prefixes): ``Registry.unprotect``.

Gates decide what a team's production alias may point at, so setting or removing them, and
overriding them (``PUT /aliases/...`` with ``override``, ``server/_api_write.py``), is for an
admin token without name prefixes only: a prefix-limited admin manages its names but cannot
lift the gates someone above it set (403). A move refused by its gates is 409 with every
failed gate in the error's ``attrs.failures``. Writes run under ``acting_as(token name)``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from jaxport import PermissionDeniedError
from jaxport.registry import TokenInfo
from jaxport.registry._internal import acting_as, to_wire
from jaxport.server._auth import check_name, scope
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import OffLoopJSON
from jaxport.server._state import registry_of

__all__ = ["check_gate_admin", "router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)
Reader = Annotated[TokenInfo, Depends(scope("read"))]
Admin = Annotated[TokenInfo, Depends(scope("admin"))]


class GatesBody(BaseModel):
    """``Registry.protect``'s keywords; ``require_signature`` a fingerprint (the client turns
    a PEM key into one)."""

    require_signature: str | None = Field(default=None, pattern="^[0-9a-fA-F]{64}$")
    require_audit: str | None = Field(default=None, max_length=20)
    jax_releases: list[str] = Field(default=[], max_length=100)
    platforms: list[str] = Field(default=[], max_length=10)
    require_goldens: bool = False


def check_gate_admin(principal: TokenInfo, what: str) -> None:
    """Refuses ``what`` (protecting, unprotecting, overriding a gate) to a token that is not an
    admin without name prefixes.

    Raises:
        PermissionDeniedError: a smaller scope (``.needed`` is ``admin``), or name prefixes.
    """
    principal.check("admin")
    if principal.prefixes:
        raise PermissionDeniedError(
            f"token {principal.name!r} is limited to name prefixes; {what} needs an admin "
            "token without prefixes",
            needed="admin",
        )


@router.get("/gates/{name}")
def gates(request: Request, p: Reader, name: str) -> Any:
    """``Registry.gates``: each protected alias, its gates, their state now."""
    check_name(p, name)
    return to_wire(registry_of(request).gates(name))


@router.get("/gates/{name}/{alias}")
def check_gates(
    request: Request, p: Reader, name: str, alias: str, version: Annotated[int, Query(ge=1)]
) -> Any:
    """``Registry.check_gates``: the alias's gates for ``version`` (null: not protected)."""
    check_name(p, name)
    return to_wire(registry_of(request).check_gates(name, alias, version))


@router.put("/gates/{name}/{alias}")
def protect(request: Request, p: Admin, name: str, alias: str, body: GatesBody) -> Any:
    """``Registry.protect`` (an admin without name prefixes)."""
    check_gate_admin(p, "protecting an alias")
    with acting_as(p.name):
        found = registry_of(request).protect(
            name, alias, require_signature=body.require_signature,
            require_audit=body.require_audit, jax=body.jax_releases, platforms=body.platforms,
            require_goldens=body.require_goldens,
        )  # fmt: skip
    return to_wire(found)


@router.delete("/gates/{name}/{alias}", status_code=204)
def unprotect(request: Request, p: Admin, name: str, alias: str) -> None:
    """``Registry.unprotect`` (an admin without name prefixes)."""
    check_gate_admin(p, "unprotecting an alias")
    with acting_as(p.name):
        registry_of(request).unprotect(name, alias)
