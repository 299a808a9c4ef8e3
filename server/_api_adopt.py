"""The routes of ``/api/v1`` that store what was made elsewhere (``jaxport mirror``, an OCI pull
into a server): ``Backend.adopt_signature`` and ``adopt_findings`` of a registry server.

- ``POST /signatures/{name}`` (``write``): a model-signing bundle of the archive ``digest`` of a
  version of ``name``, with its ``signer`` and ``kind``; answers the stored ``Signature``;
- ``POST /findings/{name}`` (``write``): audit findings (``audits`` rows) about archives of
  versions of ``name``, at most ``MAX_FINDINGS``; answers ``{"stored": N}``, how many were new.

Nothing in a body is trusted: the registry checks it as it checks any adoption
(``registry/_adoption.py``: the bundle signs exactly that archive, a certificate signature
verifies with its own certificate's key, which is the signer's; each finding's fields), and
each archive must be one of ``name``'s versions. A name outside the token's prefixes is 403
before any lookup; an archive no version of the name has is 404 (a token's other names are
never said). A body that is not a signature of that archive is 400 (``SignatureError``, typed
as a direct registry raises it), a finding that is not one 400 (``InvalidNameError``), another
bundle by a signer who has a signature of that archive stored 409 (``ConflictError``: an
adopted signature never replaces one). The same signature or findings again store nothing;
a signature stored now is a ``sign`` event whose actor is the token.
Bodies are bounded by ``server/_limits.py`` (``MAX_ADOPT_BODY``) and ``MAX_BUNDLE_BYTES``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from jaxport import SignatureError
from jaxport._signing import MAX_BUNDLE_BYTES
from jaxport.registry import TokenInfo
from jaxport.registry._internal import MAX_FINDINGS, acting_as, sql_backend, to_wire
from jaxport.server._auth import check_name, scope
from jaxport.server._errors import RESPONSES, error_body, public_message
from jaxport.server._limits import OffLoopJSON
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)  # bodies parsed in threads
Writer = Annotated[TokenInfo, Depends(scope("write"))]


class SignatureBody(BaseModel):
    """A signature made elsewhere: the archive's sha256 (hex), the bundle's JSON text, the
    signer's fingerprint and ``key`` or ``certificate`` (each checked by the registry)."""

    digest: str = Field(max_length=64)
    bundle: str = Field(max_length=MAX_BUNDLE_BYTES)
    signer: str = Field(max_length=64)
    kind: str = Field(max_length=20)


class FindingsBody(BaseModel):
    """Findings measured elsewhere: ``audits`` rows (``registry/_adoption.py``'s
    ``FINDING_FIELDS``), each checked by the registry."""

    findings: list[dict[str, Any]] = Field(max_length=MAX_FINDINGS)


@router.post("/signatures/{name}")
def adopt_signature(request: Request, p: Writer, name: str, body: SignatureBody) -> Any:
    """Stores a signature made elsewhere (see the module's doc); answers it as stored."""
    check_name(p, name)
    bundle = body.bundle.encode("utf-8")
    try:
        with acting_as(p.name):
            stored = sql_backend(registry_of(request)).adopt_signature(
                name, body.digest, bundle, body.signer, body.kind
            )
    except SignatureError as e:  # the request's bundle: a bad request, not a refused pull
        answer = error_body(e)
        answer["error"]["message"] = public_message(e, p)
        return JSONResponse(answer, status_code=400)
    return to_wire(stored)


@router.post("/findings/{name}")
def adopt_findings(request: Request, p: Writer, name: str, body: FindingsBody) -> Any:
    """Stores findings measured elsewhere (see the module's doc); answers how many were new."""
    check_name(p, name)
    with acting_as(p.name):
        return {"stored": sql_backend(registry_of(request)).adopt_findings(name, body.findings)}
