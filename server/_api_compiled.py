"""The routes of ``/api/v1`` for compiled executables (issue 27 §2) through a registry server:

- ``POST /compiled/{name}`` (``write``): stores a compiled set of an archive of ``name`` whose
  manifest, bundle and files the client uploaded first (``PUT /blobs/{digest}?name=``); the
  body is the set (``CompiledSet`` on the wire) with ``manifest_digest`` and
  ``bundle_digest``. The server checks what it can (``registry/_compiled_served.py``): the
  archive is ``name``'s, the manifest is the set's, the bundle signs its sha256, each blob's
  sha256; a prefix-limited token names only blobs it reaches. A set has at most
  ``MAX_SET_FILES`` files (400 above), its body at most ``MAX_COMPILED_BODY`` bytes
  (``server/_limits.py``); the client sends only the blobs ``/blobs/missing`` names.
- ``GET /compiled/{name}/{digest}`` (``read``): the sets of the archive ``digest``;
- ``GET /compiled/{name}/{digest}/blobs/{blob}`` (``read``): one manifest, bundle or file of them.

A name outside the token's prefixes is 403 before any lookup. The client verifies every set
again with its own trusted keys before writing a byte into jax's cache.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from jaxport import NotFoundError, SignatureError
from jaxport.registry import CompiledSet, TokenInfo
from jaxport.registry._internal import (
    check_set_files,
    from_wire,
    read_set_blob,
    sets_on_wire,
    sql_backend,
    store_sent,
    to_wire,
)
from jaxport.server._auth import check_name, scope
from jaxport.server._errors import RESPONSES, error_body, public_message
from jaxport.server._limits import OffLoopJSON
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)  # bodies parsed in threads
Writer = Annotated[TokenInfo, Depends(scope("write"))]
Reader = Annotated[TokenInfo, Depends(scope("read"))]


class SetBody(BaseModel):
    """A compiled set (its wire form) and the sha256 of its uploaded manifest and bundle."""

    set: dict[str, Any]
    manifest_digest: str = Field(max_length=64)
    bundle_digest: str = Field(max_length=64)


@router.post("/compiled/{name}", status_code=201)
def store(request: Request, p: Writer, name: str, body: SetBody) -> Any:
    """Stores a compiled set (see the module's doc); answers it as stored."""
    check_name(p, name)
    made = check_set_files(from_wire(CompiledSet, body.set, source="a compiled set"))
    backend = sql_backend(registry_of(request))
    blobs = {body.manifest_digest, body.bundle_digest, *(f.sha256 for f in made.files)}
    if backend.reach.reachable(p, blobs) != blobs:
        raise NotFoundError("a blob of the compiled set was not uploaded")
    try:
        return to_wire(store_sent(backend, name, made, body.manifest_digest, body.bundle_digest))
    except SignatureError as e:
        answer = error_body(e)
        answer["error"]["message"] = public_message(e, p)
        return JSONResponse(answer, status_code=400)


@router.get("/compiled/{name}/{digest}")
def sets(request: Request, p: Reader, name: str, digest: str) -> Any:
    """The sets of an archive of ``name``, as their rows say (not verified)."""
    check_name(p, name)
    return sets_on_wire(sql_backend(registry_of(request)), name, digest)


@router.get("/compiled/{name}/{digest}/blobs/{blob}")
def blob(request: Request, p: Reader, name: str, digest: str, blob: str) -> Response:
    """One manifest, bundle or file of a set of an archive of ``name``."""
    check_name(p, name)
    data = read_set_blob(sql_backend(registry_of(request)), name, digest, blob)
    return Response(data, media_type="application/octet-stream")
