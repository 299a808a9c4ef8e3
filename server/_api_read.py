"""The read routes of ``/api/v1`` (scope ``read``): names, versions, variants, resolve, blobs
(streamed, ``ETag`` = digest, HTTP ranges), aliases and their history, findings, diff,
signatures and the event log. Every answer is the ``Registry`` result as JSON (``to_wire``).

A token limited to name prefixes sees only those names (``server/_auth.py``); its blobs are the
archives of its names' versions only (blobs are content-addressed: without this, knowing a
digest would be enough to read it)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from jaxport import NotFoundError
from jaxport.registry import TokenInfo
from jaxport.registry._internal import sql_backend, to_wire, visible
from jaxport.server._auth import check_name, check_reached, check_reference, scope
from jaxport.server._errors import RESPONSES
from jaxport.server._event_view import visible_events
from jaxport.server._ranges import byte_range
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES)
Reader = Annotated[TokenInfo, Depends(scope("read"))]


@router.get("/names")
def names(request: Request, p: Reader) -> dict[str, Any]:
    """Every name the token may see, sorted."""
    return {"names": [n for n in registry_of(request).names() if p.allows_name(n)]}


@router.get("/versions")
def versions(
    request: Request, p: Reader, name: str | None = None, limit: int = 100,
    after_name: str | None = None, after_version: int | None = None,
) -> Any:  # fmt: skip
    """``Registry.list``: one page of versions (of ``name``, or of every name); the next page
    is ``after_name`` and ``after_version`` of this one's last (both, or neither)."""
    if name is not None:
        check_name(p, name)
    after: Any = None  # both, or neither: Registry.list refuses half a pair
    if after_name is not None or after_version is not None:
        after = (after_name, after_version)
    refs = registry_of(request).list(name, limit=limit, after=after)
    return to_wire([r for r in refs if p.allows_name(r.name)])


@router.get("/ref")
def get(request: Request, p: Reader, reference: str) -> Any:
    """``Registry.get``: one version, model variants with their methods and tensors."""
    reference = check_reference(registry_of(request), p, reference)
    ref = registry_of(request).get(reference)
    check_reached(p, reference, ref.name)
    return to_wire(ref)


@router.get("/resolve")
def resolve(
    request: Request, p: Reader, reference: str, platform: str | None = None,
    nr_devices: int | None = None,
) -> Any:  # fmt: skip
    """``Registry.resolve``: the variant a pull would choose and why the others were not
    (``platform`` absent: any platform)."""
    reference = check_reference(registry_of(request), p, reference)
    resolution = registry_of(request).resolve(reference, platform=platform, nr_devices=nr_devices)
    check_reached(p, reference, resolution.name)
    return to_wire(resolution)


@router.get("/search")
def search(
    request: Request, p: Reader, name: str | None = None, platform: str | None = None,
    nr_devices: int | None = None, jax_version: str | None = None,
    calling_convention_version: int | None = None, fun_name: str | None = None,
    shape_polymorphic: bool | None = None, limit: int = 100, after: int | None = None,
) -> Any:  # fmt: skip
    """``Registry.search``: variants matching every filter, one page."""
    if name is not None:
        check_name(p, name)
    found = registry_of(request).search(
        name=name, platform=platform, nr_devices=nr_devices, jax_version=jax_version,
        calling_convention_version=calling_convention_version, fun_name=fun_name,
        shape_polymorphic=shape_polymorphic, limit=limit, after=after,
    )  # fmt: skip
    return to_wire([v for v in found if p.allows_name(v.name)])


@router.get("/lineage")
def lineage(request: Request, p: Reader, reference: str, depth: int | None = None) -> Any:
    """``Registry.lineage``: a version's sources, the versions derived from it and its
    provenance; for a prefix-limited token, a source outside its names is hidden (no name)
    and descendants outside them are left out."""
    reference = check_reference(registry_of(request), p, reference)
    found = registry_of(request).lineage(reference, depth=depth)
    check_reached(p, reference, found.name)
    return to_wire(visible(found, p.allows_name) if p.prefixes else found)


@router.get("/aliases/{name}")
def aliases(request: Request, p: Reader, name: str) -> Any:
    """``Registry.aliases``: the name's aliases and their versions."""
    check_name(p, name)
    return registry_of(request).aliases(name)


@router.get("/aliases/{name}/history")
def alias_history(request: Request, p: Reader, name: str, alias: str | None = None) -> Any:
    """``Registry.alias_history``: every move, oldest first."""
    check_name(p, name)
    return to_wire(registry_of(request).alias_history(name, alias))


@router.get("/findings")
def findings(
    request: Request, p: Reader, name: str | None = None, jax_version: str | None = None,
    platform: str | None = None, limit: int = 10_000,
) -> Any:  # fmt: skip
    """``Registry.audit_results``: stored findings, newest first."""
    if name is not None:
        check_name(p, name)
    found = registry_of(request).audit_results(
        name=name, jax_version=jax_version, platform=platform, limit=limit
    )
    return to_wire([f for f in found if p.allows_name(f.name)])


@router.get("/diff")
def diff(request: Request, p: Reader, a: str, b: str) -> Any:
    """``Registry.diff``: the changes from version ``a`` to ``b``, breaking or compatible."""
    a = check_reference(registry_of(request), p, a)
    b = check_reference(registry_of(request), p, b)
    return to_wire(registry_of(request).diff(a, b))


@router.get("/signatures")
def signatures(request: Request, p: Reader, reference: str) -> Any:
    """``Registry.signatures``: the signatures stored for a version's variants."""
    reference = check_reference(registry_of(request), p, reference)
    return to_wire(registry_of(request).signatures(reference))


@router.get("/events")
def events(
    request: Request, p: Reader, name: str | None = None, limit: int = 100,
    before: int | None = None,
) -> Any:  # fmt: skip
    """``Registry.events``: the event log, newest first (a prefix-limited token sees the
    events of its names only, and no other name in them: ``server/_event_view.py``)."""
    if name is not None:
        check_name(p, name)
    found = registry_of(request).events(name=name, limit=limit, before=before)
    return to_wire(visible_events(found, p))


_BYTES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_BLOB: dict[int | str, dict[str, Any]] = {
    200: {"content": _BYTES, "description": "The blob"},
    206: {"content": _BYTES, "description": "The range asked for"},
    304: {"description": "Not modified (If-None-Match: its digest)"},
}


@router.get("/blobs/{digest}", response_class=Response, responses=_BLOB)
@router.head("/blobs/{digest}", response_class=Response, responses=_BLOB)  # one id per method
def blob(request: Request, p: Reader, digest: str) -> Response:
    """A blob, or a model variant's archive, streamed: ``ETag`` is its digest, ``Range:
    bytes=START-END`` gives part of it (206). A whole read is verified as it is sent: a
    corrupt blob's answer ends early, and the client refuses it. A prefix-limited token reads
    the archives of its names' versions only."""
    reg = registry_of(request)
    stream = reg.blob_stream(digest)
    if p.prefixes and not any(map(p.allows_name, sql_backend(reg).queries.names_holding(digest))):
        raise NotFoundError(f"no blob or archive {digest}")
    headers = {"ETag": f'"{digest}"', "Accept-Ranges": "bytes"}
    if request.headers.get("if-none-match") == f'"{digest}"':
        return Response(status_code=304, headers=headers)
    wanted = byte_range(request.headers.get("range"), stream.size)
    if wanted is None:
        start, end, status = 0, stream.size, 200
    else:
        (start, end), status = wanted, 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{stream.size}"
    headers["Content-Length"] = str(end - start)
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type="application/octet-stream")
    return StreamingResponse(
        stream.chunks(start, end), status_code=status, headers=headers,
        media_type="application/octet-stream",
    )  # fmt: skip
