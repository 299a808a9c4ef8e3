"""The fleet-rescue routes of ``/api/v1`` (``registry/_fleet_rescue.py``): a client rescues
(re-exports run where its managed environments are), the server stores what it pushes and
records the one event that ties it together.

- ``GET /rescue/examples/{name}/{version}`` (``read``): ``{"digest": ...}``, the digest of the
  version's golden examples blob, null without one; ``.../blob``: its bytes (404 without one;
  ``/blobs/{digest}`` serves a prefix-limited token archives only);
- ``POST /rescue/events`` ``{"name", "version", "detail"}`` (``write``): appends the ``rescue``
  event of a rescued version (its push and alias moves recorded theirs).

A token limited to name prefixes reaches only names within them (403 before anything is read).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from jaxport import NotFoundError
from jaxport.registry import TokenInfo
from jaxport.registry._internal import acting_as, sql_backend, to_wire
from jaxport.server._auth import check_name, scope
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import OffLoopJSON
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)
Reader = Annotated[TokenInfo, Depends(scope("read"))]
Writer = Annotated[TokenInfo, Depends(scope("write"))]


class RescueEventBody(BaseModel):
    """A rescued version and its event's detail (``_fleet_rescue.event_detail``)."""

    name: str = Field(max_length=200)
    version: int
    detail: dict[str, Any] = Field(max_length=16)


@router.get("/rescue/examples/{name}/{version}")
def examples(request: Request, p: Reader, name: str, version: int) -> dict[str, Any]:
    """The digest of ``name:version``'s golden examples, or null."""
    check_name(p, name)
    reg = registry_of(request)
    reg.get(f"{name}:{version}")  # NotFoundError: 404
    return {"digest": sql_backend(reg).queries.examples_digest(name, version)}


@router.get("/rescue/examples/{name}/{version}/blob", response_class=Response)
def examples_blob(request: Request, p: Reader, name: str, version: int) -> Response:
    """The bytes of ``name:version``'s golden examples (at most ``MAX_EXAMPLES_BYTES``)."""
    check_name(p, name)
    reg = registry_of(request)
    reg.get(f"{name}:{version}")  # NotFoundError: 404
    data = sql_backend(reg).examples_of(name, version)
    if data is None:
        raise NotFoundError(f"{name}:{version} has no golden examples")
    return Response(data, media_type="application/octet-stream")


@router.post("/rescue/events", status_code=201)
def rescue_event(request: Request, p: Writer, body: RescueEventBody) -> Any:
    """Appends the ``rescue`` event of a version the token may write."""
    check_name(p, body.name)
    reg = registry_of(request)
    reg.get(f"{body.name}:{body.version}")  # NotFoundError: 404
    with acting_as(p.name):
        event = sql_backend(reg).record_event("rescue", body.name, body.version, body.detail)
    return to_wire(event)
