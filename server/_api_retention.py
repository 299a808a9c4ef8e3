"""The retention routes of ``/api/v1`` (``registry/_retention.py``), all ``admin``:

- ``GET /retention/policies``: the policies within the token's prefixes;
- ``PUT /retention/policies/{prefix}``, ``DELETE /retention/policies/{prefix}``: set or
  remove one (its prefix within the token's);
- ``POST /retention/runs`` ``{"prefix", "dry_run"}``: a run (``RetentionPlan``); a token
  limited to prefixes must give a prefix within them;
- ``POST /retention/restore`` ``{"name", "version"}``: ``Registry.restore``.

A prefix-limited admin reaches only names within its prefixes: a policy or run prefix must
start with one of them (403 otherwise, before anything is read). Each write runs under
``acting_as(token name)``, so the event log names the token.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from jaxport.registry import TokenInfo
from jaxport.registry._internal import acting_as, to_wire
from jaxport.server._auth import check_name, check_store_wide, scope
from jaxport.server._bridge import run_long
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import OffLoopJSON
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)
Admin = Annotated[TokenInfo, Depends(scope("admin"))]


class PolicyBody(BaseModel):
    """``Registry.set_retention_policy``'s keywords (the prefix is in the path)."""

    keep_last: int | None = None
    keep_younger_than: float | None = None
    keep_ok_per_target: bool = True
    restore_period: float = 14 * 86400.0


class RunBody(BaseModel):
    prefix: str | None = Field(default=None, max_length=200)
    dry_run: bool = False


class RestoreBody(BaseModel):
    name: str = Field(max_length=200)
    version: int


@router.get("/retention/policies")
def policies(request: Request, p: Admin) -> Any:
    """The policies whose prefix is within the token's (all, without prefixes)."""
    found = registry_of(request).retention_policies()
    return to_wire([x for x in found if p.allows_name(x.prefix)])


@router.put("/retention/policies/{prefix}")
def set_policy(request: Request, p: Admin, prefix: str, body: PolicyBody) -> Any:
    """Sets the policy of ``prefix`` (within the token's prefixes)."""
    check_name(p, prefix)
    with acting_as(p.name):
        return to_wire(registry_of(request).set_retention_policy(prefix, **body.model_dump()))


@router.delete("/retention/policies/{prefix}")
def remove_policy(request: Request, p: Admin, prefix: str) -> Any:
    """Removes the policy of ``prefix`` (within the token's prefixes)."""
    check_name(p, prefix)
    with acting_as(p.name):
        return to_wire(registry_of(request).remove_retention_policy(prefix))


@router.post("/retention/runs")
async def run(request: Request, p: Admin, body: RunBody) -> Any:
    """A retention run (``dry_run``: the plan only) over the names starting with ``prefix``,
    which a prefix-limited token must give, within its prefixes."""
    if body.prefix is None:
        check_store_wide(p)
    else:
        check_name(p, body.prefix)
    reg = registry_of(request)

    def work() -> Any:
        with acting_as(p.name):
            return to_wire(reg.retain(body.prefix, dry_run=body.dry_run))

    return await run_long(request, work)


@router.post("/retention/restore")
def restore(request: Request, p: Admin, body: RestoreBody) -> Any:
    """Restores ``name:version`` (a name within the token's prefixes)."""
    check_name(p, body.name)
    with acting_as(p.name):
        return to_wire(registry_of(request).restore(body.name, body.version))
