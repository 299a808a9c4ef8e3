"""The jax-release watcher's routes of ``/api/v1`` (``registry/_releases.py``,
``registry/_forecast.py``):

- ``POST /watch`` ``{"dry_run", "prereleases", "enqueue", "timeout"}`` (``admin`` without
  name prefixes: it judges every name's variants): ``Registry.watch_jax`` run here, with this
  server's own package index configuration (a client cannot name an index: the server would
  fetch any URL it was given). Its ``jax-release`` events go to this server's webhooks.
- ``GET /forecast?reference=`` (``read``): ``Registry.forecast``; a token limited to name
  prefixes sees its names' variants only (a reference outside them is 403).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from jaxport.registry import TokenInfo
from jaxport.registry._internal import acting_as, to_wire
from jaxport.server._auth import check_reference, check_store_wide, scope
from jaxport.server._bridge import run_long
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import OffLoopJSON
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)
Admin = Annotated[TokenInfo, Depends(scope("admin"))]
Reader = Annotated[TokenInfo, Depends(scope("read"))]


class WatchBody(BaseModel):
    """``Registry.watch_jax``'s keywords, less ``index_url``."""

    dry_run: bool = False
    prereleases: bool = False
    enqueue: bool = True
    timeout: float = Field(default=120.0, gt=0, le=86400)


@router.post("/watch")
async def watch(request: Request, p: Admin, body: WatchBody) -> Any:
    """``Registry.watch_jax`` (an admin token without name prefixes), in a thread of the work
    that may last hours (``server/_bridge.LONG``)."""
    check_store_wide(p)

    def run() -> Any:
        with acting_as(p.name):
            return registry_of(request).watch_jax(
                dry_run=body.dry_run, prereleases=body.prereleases, enqueue=body.enqueue,
                timeout=body.timeout,
            )  # fmt: skip

    report = await run_long(request, run)
    return to_wire(report)


@router.get("/forecast")
def forecast(request: Request, p: Reader, reference: str | None = None) -> Any:
    """``Registry.forecast``: one version, a name's, or every version the token sees."""
    if reference is not None:
        reference = check_reference(registry_of(request), p, reference)
    rows = registry_of(request).forecast(reference)
    return to_wire([r for r in rows if p.allows_name(r.name)])
