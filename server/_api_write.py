"""The write routes of ``/api/v1``: uploads of the parts a server lacks and the commit of a
version (``write``), alias moves (``write``), audits (``write``: they record findings), and
delete, gc, verify and tokens (``admin``). Each runs under ``acting_as(token name)``, so the
event log names the token."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from jaxport import (
    CorruptArchiveError,
    IntegrityError,
    InvalidNameError,
    PermissionDeniedError,
    ServerUnavailableError,
)
from jaxport.registry import Registry, TokenInfo
from jaxport.registry._internal import (
    LIMITS,
    MAX_EXAMPLES_BYTES,
    ArchiveParts,
    acting_as,
    check_provenance,
    examples_from_blob,
    from_wire,
    plan_parts,
    reported_provenance,
    sql_backend,
    to_wire,
)
from jaxport.server._api_gates import check_gate_admin
from jaxport.server._auth import check_name, check_reference, check_store_wide, scope
from jaxport.server._bridge import UPLOADS_PER_TOKEN, iterate_body, run_heavy, run_long
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import (
    MAX_COMMIT_PARTS,
    MAX_DIGESTS,
    MAX_METADATA_KEYS,
    OffLoopJSON,
)
from jaxport.server._state import registry_of

__all__ = ["router"]

router = APIRouter(responses=RESPONSES, route_class=OffLoopJSON)  # bodies parsed in threads
Writer = Annotated[TokenInfo, Depends(scope("write"))]
Admin = Annotated[TokenInfo, Depends(scope("admin"))]


class Digests(BaseModel):
    """Part digests, and the name they are for (a client since issue 24 sends it, null
    included: a name outside the token's prefixes is refused before any part is sent)."""

    digests: list[str] = Field(max_length=MAX_DIGESTS)
    name: str | None = None


class Examples(BaseModel):
    """A commit's golden examples: the digest of their uploaded blob (``registry/_golden.py``'s
    npz, every output given) and the kind of archive they are for."""

    digest: str = Field(pattern="^[0-9a-f]{64}$")
    kind: Literal["function", "model"]


class ProvenanceBody(BaseModel):
    """What a pushing client reports of itself (``registry/_lineage.py``: ``Provenance``);
    each field bounded as its column, checked again by ``check_provenance``."""

    git_commit: str | None = Field(default=None, max_length=LIMITS["git_commit"])
    function_qualname: str | None = Field(default=None, max_length=LIMITS["function_qualname"])
    jax_version: str | None = Field(default=None, max_length=LIMITS["jax_version"])
    jaxlib_version: str | None = Field(default=None, max_length=LIMITS["jaxlib_version"])
    host: str | None = Field(default=None, max_length=LIMITS["host"])
    user: str | None = Field(default=None, max_length=LIMITS["user"])


class Commit(BaseModel):
    """A version to commit: its archives as parts (``ArchiveParts`` as JSON) and ``push``'s
    keywords; its lineage (``derived_from`` as ``NAME:VERSION``, ``derivation``) and the
    client's provenance (issue 26)."""

    name: str | None = None
    archives: list[dict[str, Any]] = Field(min_length=1, max_length=1000)
    aliases: list[str] = Field(default=[], max_length=1000)
    metadata: dict[str, str] = Field(default={}, max_length=MAX_METADATA_KEYS)
    allow_custom_calls: list[str] = []
    vjp_order: int = 0
    examples: Examples | None = None
    derived_from: str | None = Field(default=None, max_length=220)
    derivation: str | None = Field(default=None, max_length=40)
    provenance: ProvenanceBody = ProvenanceBody()


class AliasMoveBody(BaseModel):
    """A move; ``override`` (with a ``reason``) moves a protected alias whose gates the
    version fails: an admin token without name prefixes only (``server/_api_gates.py``)."""

    version: int | None
    override: bool = False
    reason: str | None = Field(default=None, max_length=1000)


class AuditBody(BaseModel):
    reference: str | None = None
    platform: str | None = None
    force: bool = False
    level: str = "full"
    timeout: float = 120.0


class GcBody(BaseModel):
    dry_run: bool = False
    min_age: float = 3600.0
    temp_age: float = 3600.0


class VerifyBody(BaseModel):
    deep: bool = False
    timeout: float = 120.0


class TokenBody(BaseModel):
    name: str
    scope: str = "read"
    prefixes: list[str] = []
    expires_in: float | None = None


@router.post("/blobs/missing")
def missing(request: Request, p: Writer, body: Digests) -> dict[str, list[str]]:
    """Of the part digests given, those to send: the server lacks them, or (a token limited
    to name prefixes) the token does not reach them (``registry/_reach.py``: whether the store
    holds another team's blob is never said; the bytes sent are checked and stored once)."""
    if "name" in body.model_fields_set:
        _check_push_name(p, body.name)
    reg = registry_of(request)
    lacking = set(reg.missing_blobs(body.digests))  # InvalidNameError: a malformed digest
    reached = sql_backend(reg).reach.reachable(p, body.digests)
    wanted = [d for d in body.digests if d in lacking or d not in reached]
    return {"missing": list(dict.fromkeys(wanted))}


def _check_push_name(p: TokenInfo, name: str | None) -> None:
    """Refuses a push's name outside the token's prefixes, or no name from a limited token.

    Raises:
        PermissionDeniedError: either.
    """
    if name is not None:
        check_name(p, name)
    elif p.prefixes:
        raise PermissionDeniedError(
            f"token {p.name!r} is limited to name prefixes: push with a name"
        )


@router.put("/blobs/{digest}", status_code=201)
async def upload(
    request: Request, p: Writer, digest: str, name: str | None = None
) -> dict[str, Any]:
    """One part's bytes (the request body), stored if their sha256 is ``digest`` (422
    ``IntegrityError`` otherwise: nothing stored). Read in the uploads' own threads
    (``server/_bridge.py``): slow uploads never hold up other requests. ``name``: the name the
    part is for, refused (403) before the body is read if outside the token's prefixes. A
    prefix-limited token's upload is recorded: its commits may name the part
    (``registry/_reach.py``)."""
    if name is not None:
        check_name(p, name)

    def receive() -> int:
        chunks: Iterator[bytes] = iterate_body(request)
        return registry_of(request).receive_blob(
            digest, chunks, max_size=request.app.state.max_upload
        )

    with _upload_of(request, p):
        size = await anyio.to_thread.run_sync(receive, limiter=request.app.state.uploads)
    if p.prefixes:
        await anyio.to_thread.run_sync(
            sql_backend(registry_of(request)).reach.record_upload, p.name, digest
        )
    return {"digest": digest, "size": size}


@contextlib.contextmanager
def _upload_of(request: Request, p: TokenInfo) -> Iterator[None]:
    """Counts an upload of token ``p`` while the block runs (on the event loop: no other
    request's count changes between the check and the increment).

    Raises:
        ServerUnavailableError: the token has ``UPLOADS_PER_TOKEN`` uploads in progress (503,
            ``Retry-After``).
    """
    held: dict[str, int] = request.app.state.token_uploads
    if held.get(p.name, 0) >= UPLOADS_PER_TOKEN:
        raise ServerUnavailableError(
            f"token {p.name!r} has {UPLOADS_PER_TOKEN} uploads in progress on this server: "
            "retry when one ends"
        )
    held[p.name] = held.get(p.name, 0) + 1
    try:
        yield
    finally:
        held[p.name] -= 1
        if not held[p.name]:
            del held[p.name]


@router.post("/versions", status_code=201)
async def commit(request: Request, p: Writer, body: Commit) -> Any:
    """Pushes a version from stored parts (``Registry.push_parts``): every part and archive
    verified, every module validated in the sandbox; a part not uploaded is 422 naming it, an
    archive description that does not fit ``ArchiveParts`` 400. A prefix-limited token's
    commit names only parts it reaches (``registry/_reach.py``): any other is refused as not
    uploaded, before anything is read, so neither its existence nor its size is said; and a
    ``derived_from`` only within its names (403 before any lookup). The version records the
    provenance the client reports; its event names the token."""
    _check_push_name(p, body.name)
    if body.derived_from is not None:
        check_reference(registry_of(request), p, body.derived_from)
    provenance = check_provenance(body.provenance.model_dump())

    def push() -> Any:
        try:
            archives = [from_wire(ArchiveParts, a, source="a commit's archive")
                        for a in body.archives]  # fmt: skip
        except CorruptArchiveError as e:  # the request is malformed, not an archive
            raise InvalidNameError(str(e)) from None
        _check_reached_parts(registry_of(request), p, archives, body.examples)
        need = _commit_memory(request, archives)
        examples = _examples(registry_of(request), body.examples)
        with (
            request.app.state.memory.reserve(need, "this commit"),
            acting_as(p.name),
            reported_provenance(provenance),
        ):
            result = registry_of(request).push_parts(
                archives, body.name, aliases=body.aliases, metadata=body.metadata,
                allow_custom_calls=tuple(body.allow_custom_calls), vjp_order=body.vjp_order,
                examples=examples, derived_from=body.derived_from, derivation=body.derivation,
            )  # fmt: skip
        return to_wire(result)

    return await run_heavy(request, push)


def _commit_memory(request: Request, archives: list[ArchiveParts]) -> int:
    """The bytes of memory a commit's push may hold (``plan_parts``: its parts checked to
    be each archive's layout, from the headers alone), once its archives' declared sizes are
    within ``max_upload`` together (what it writes to a temporary file) and its parts within
    ``MAX_COMMIT_PARTS`` (issue 24: F4, F6).

    Raises:
        InvalidNameError: too many parts, too many bytes declared, or parts that are not
            the layout.
        IntegrityError: a first part that was not uploaded.
    """
    parts = sum(len(a.parts) for a in archives)
    if parts > MAX_COMMIT_PARTS:
        raise InvalidNameError(f"a commit has at most {MAX_COMMIT_PARTS:,} parts, not {parts:,}")
    for a in archives:
        a.check()
    declared, limit = sum(a.size for a in archives), request.app.state.max_upload
    if declared > limit:
        raise InvalidNameError(
            f"a commit's archives are at most {limit:,} bytes together, these {declared:,}"
        )
    return sum(plan_parts(sql_backend(registry_of(request)).blobs, a) for a in archives)


def _check_reached_parts(
    registry: Registry, p: TokenInfo, archives: list[ArchiveParts], examples: Examples | None
) -> None:
    """Refuses a commit by a prefix-limited token that names a part (or examples blob) it does
    not reach, or that the store lacks, in the same words either way (issue 24's F1).

    Raises:
        IntegrityError: the first such digest (``.expected``), "was not uploaded".
    """
    if not p.prefixes:
        return
    named = [part.digest for a in archives for part in a.parts]
    named += [examples.digest] if examples is not None else []
    reached = sql_backend(registry).reach.reachable(p, named)
    lacking = set(registry.missing_blobs([d for d in named if d in reached]))
    for digest in named:
        if digest not in reached or digest in lacking:
            raise IntegrityError(
                f"the part {digest} was not uploaded: send it first", expected=digest
            )


def _examples(registry: Registry, examples: Examples | None) -> Any:
    """A commit's golden examples read back from their uploaded blob (verified; ``np.load``
    without pickles; nothing runs), or None.

    Raises:
        IntegrityError: the blob was not uploaded (``.expected`` names it) or is corrupt.
        CorruptArchiveError: it is not an examples blob, or holds more than
            ``MAX_EXAMPLES_BYTES``.
    """
    if examples is None:
        return None
    blobs = sql_backend(registry).blobs
    if not blobs.exists(examples.digest):
        raise IntegrityError(
            f"the examples blob {examples.digest} was not uploaded", expected=examples.digest
        )
    size = blobs.size(examples.digest)
    if size > MAX_EXAMPLES_BYTES:
        raise CorruptArchiveError(
            f"the examples blob holds {size:,} bytes; a server reads at most "
            f"{MAX_EXAMPLES_BYTES:,} (push larger examples with a direct registry)"
        )
    return examples_from_blob(examples.kind, registry.read_blob(examples.digest))


@router.put("/aliases/{name}/{alias}", status_code=204)
def move_alias(request: Request, p: Writer, name: str, alias: str, body: AliasMoveBody) -> None:
    """Points ``name@alias`` at ``version`` (null: removes it); a protected alias's move that
    fails its gates is 409 (``GateError``, ``attrs.failures``) unless overridden."""
    check_name(p, name)
    if body.override:
        check_gate_admin(p, "overriding an alias's gates")
    with acting_as(p.name):
        registry_of(request).alias(
            name, alias, body.version, override=body.override, reason=body.reason
        )


@router.post("/audits")
async def audit(request: Request, p: Writer, body: AuditBody) -> Any:
    """``Registry.audit`` on the server (its worker processes), findings recorded; a
    prefix-limited token audits its names only (a digest reference to another name's archive
    is not found, a ``sha256:`` prefix matched among its names' archives only)."""

    def run() -> Any:
        if body.reference is None and p.prefixes:
            names = [n for n in registry_of(request).names() if p.allows_name(n)]
            found: list[Any] = []
            for n in names:
                found += _audit(request, p, n, body)
            return to_wire(found)
        return to_wire(_audit(request, p, body.reference, body))

    return await run_long(request, run)


def _audit(request: Request, p: TokenInfo, reference: str | None, body: AuditBody) -> list[Any]:
    if reference is not None:
        reference = check_reference(registry_of(request), p, reference)
    with acting_as(p.name):
        return registry_of(request).audit(
            reference, platform=body.platform, force=body.force, level=body.level,
            timeout=body.timeout,
        )  # fmt: skip


@router.delete("/names/{name}", status_code=204)
def delete(
    request: Request, p: Admin, name: str, version: int | None = None, force: bool = False
) -> None:
    """Deletes a version (or the whole name); blobs stay until gc."""
    check_name(p, name)
    with acting_as(p.name):
        registry_of(request).delete(name, version, force=force)


@router.post("/gc")
async def gc(request: Request, p: Admin, body: GcBody) -> Any:
    """``Registry.gc`` (an admin token without name prefixes: it reaches every name)."""
    check_store_wide(p)

    def collect() -> Any:
        with acting_as(p.name):
            return registry_of(request).gc(
                dry_run=body.dry_run, min_age=body.min_age, temp_age=body.temp_age
            )

    return to_wire(await run_heavy(request, collect))


@router.post("/verify")
async def verify(request: Request, p: Admin, body: VerifyBody) -> Any:
    """``Registry.verify``: every blob's digest (``deep``: every archive read in full); an
    admin token without name prefixes."""
    check_store_wide(p)
    reg = registry_of(request)
    return to_wire(
        await run_long(request, lambda: reg.verify(deep=body.deep, timeout=body.timeout))
    )


@router.get("/tokens")
def tokens(request: Request, p: Admin) -> Any:
    """The tokens within the caller's (``TokenInfo.covers``: all, for an admin without
    prefixes), without secrets."""
    return to_wire(sql_backend(registry_of(request)).tokens.list(within=p))


@router.post("/tokens", status_code=201)
def create_token(request: Request, p: Admin, body: TokenBody) -> Any:
    """Makes a token within the caller's (403 otherwise: a scope no larger, each prefix
    starting with one of the caller's); the answer holds its secret, this once."""
    with acting_as(p.name):
        new = sql_backend(registry_of(request)).tokens.create(
            body.name, body.scope, prefixes=body.prefixes, expires_in=body.expires_in, within=p
        )
    return {"info": to_wire(new.info), "secret": new.secret}


@router.delete("/tokens/{name}")
def revoke_token(request: Request, p: Admin, name: str) -> Any:
    """Revokes a token within the caller's (its requests get 401 from now on); any other is
    as if it did not exist (404)."""
    with acting_as(p.name):
        return to_wire(sql_backend(registry_of(request)).tokens.revoke(name, within=p))
