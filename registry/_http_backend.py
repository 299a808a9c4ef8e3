"""``HttpBackend``: a registry server (``jaxport serve``) over HTTP (``registry/_backend.py``
states the contract; ``server/`` is the other end).

Requests go through ``registry/_http.py`` (retries, typed errors). Pushes send only the parts
the server lacks (``registry/_uploads.py``: a model archive's skeleton and tensors, a function
archive whole), then commit the version; every download is checked against its sha256 here as
well, so a corrupt or truncated answer is never returned. What needs the database or the blob
store in this process (signing, signature policies, the audit queue, audits in another
environment, upgrade reports) is refused by ``Backend.lacks``.

A model is read lazily (its skeleton now, each tensor when first used) and ``pull_file``
streams to disk (``registry/_remote_reads.py``); a function archive's VJP modules are fetched
when ``.vjp()`` asks (``registry/_remote_function.py``).

Importing this module, and every call but those that build an ``Exported`` or a ``Model``
(``function``, ``model``) or make golden examples, loads neither jax nor SQLAlchemy: a thin
client's ``jaxport ls`` costs an interpreter start and one request.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from jaxport import IntegrityError, RegistryError, SignatureError
from jaxport._files import DEFAULT_MAX_READ
from jaxport.registry._backend import Backend, PushOptions
from jaxport.registry._config import safe_url
from jaxport.registry._download import download
from jaxport.registry._events import Event
from jaxport.registry._gate_types import AliasGates, GateCheck
from jaxport.registry._http import Http
from jaxport.registry._lineage import Lineage, lineage_body
from jaxport.registry._presigned import fetch_archive, send_parts
from jaxport.registry._remote_reads import lazy_model, write_streamed
from jaxport.registry._retention_types import RetentionPlan, RetentionPolicy
from jaxport.registry._signatures import Signature
from jaxport.registry._tokens import NewToken, TokenInfo
from jaxport.registry._types import (
    AliasMove,
    GcReport,
    PushResult,
    Ref,
    Resolution,
    VariantInfo,
    VerifyReport,
)
from jaxport.registry._watch_types import VariantForecast, WatchReport
from jaxport.registry._wire import from_wire, to_wire

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.audit import Change, Finding
    from jaxport.export import Model

__all__ = ["HttpBackend", "HttpTokens"]

#: Findings per adoption request (the server takes at most 1,000), and their JSON's bytes.
_FINDINGS_BATCH = 500
_BATCH_BYTES = 1 << 20


class HttpTokens:
    """``Registry.tokens`` of a server (scope ``admin``): create, list, revoke."""

    def __init__(self, http: Http):
        self._http = http

    def create(
        self, name: str, scope: str = "read", *, prefixes: Sequence[str] = (),
        expires_in: float | None = None,
    ) -> NewToken:  # fmt: skip
        """A new token (as a direct registry's ``Tokens.create``); the secret is in the
        answer and nowhere else."""
        body = {"name": name, "scope": scope, "prefixes": list(prefixes), "expires_in": expires_in}
        data = self._http.json("POST", "/tokens", json=body)
        return NewToken(from_wire(TokenInfo, data["info"]), str(data["secret"]))

    def list(self) -> builtins.list[TokenInfo]:
        """Every token this admin may see."""
        return from_wire(builtins.list[TokenInfo], self._http.json("GET", "/tokens"))  # type: ignore[no-any-return]

    def revoke(self, name: str) -> TokenInfo:
        """Revokes the token ``name``."""
        return from_wire(TokenInfo, self._http.json("DELETE", f"/tokens/{_seg(name)}"))  # type: ignore[no-any-return]


class HttpBackend(Backend):
    """The server at ``url`` with ``token`` (None: anonymous); ``timeout``: seconds one
    request may wait (uploads and audits included)."""

    kind = "a registry server"
    instead = "use a direct registry (its database URL), not a registry server"

    def __init__(self, url: str, token: str | None, timeout: float = 300.0) -> None:
        self._http = Http(url, token, timeout=timeout)
        self.url = safe_url(url.rstrip("/"))
        self.blobs = None
        self.tokens = HttpTokens(self._http)

    def close(self) -> None:
        self._http.close()

    def _get(self, kind: Any, path: str, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        return from_wire(kind, self._http.json("GET", path, params=query))

    # -- metadata reads ----------------------------------------------------------------------

    def names(self) -> builtins.list[str]:
        return list(self._http.json("GET", "/names")["names"])

    def get(self, reference: str) -> Ref:
        return self._get(Ref, "/ref", reference=reference)  # type: ignore[no-any-return]

    def list(
        self, name: str | None, limit: int, after: tuple[str, int] | None
    ) -> builtins.list[Ref]:
        after_name, after_version = after if after is not None else (None, None)
        return self._get(  # type: ignore[no-any-return]
            builtins.list[Ref], "/versions", name=name, limit=limit, after_name=after_name,
            after_version=after_version,
        )  # fmt: skip

    def search(
        self, filters: Mapping[str, Any], limit: int, after: int | None
    ) -> builtins.list[VariantInfo]:
        return self._get(builtins.list[VariantInfo], "/search", **filters, limit=limit, after=after)  # type: ignore[no-any-return]

    def resolve(self, reference: str, platform: str | None, nr_devices: int | None) -> Resolution:
        return self._get(  # type: ignore[no-any-return]
            Resolution, "/resolve", reference=reference, platform=platform, nr_devices=nr_devices
        )

    def aliases(self, name: str) -> dict[str, int]:
        return dict(self._http.json("GET", f"/aliases/{_seg(name)}"))

    def alias_history(self, name: str, alias: str | None) -> builtins.list[AliasMove]:
        return self._get(builtins.list[AliasMove], f"/aliases/{_seg(name)}/history", alias=alias)  # type: ignore[no-any-return]

    def events(self, name: str | None, limit: int, before: int | None) -> builtins.list[Event]:
        return self._get(builtins.list[Event], "/events", name=name, limit=limit, before=before)  # type: ignore[no-any-return]

    def lineage(self, reference: str, depth: int | None) -> Lineage:
        return self._get(Lineage, "/lineage", reference=reference, depth=depth)  # type: ignore[no-any-return]

    def audit_results(
        self, name: str | None, jax_version: str | None, platform: str | None, limit: int
    ) -> builtins.list[Finding]:
        from jaxport.audit import Finding

        found = self._get(
            builtins.list[Finding], "/findings", name=name, jax_version=jax_version,
            platform=platform, limit=limit,
        )  # fmt: skip
        return found  # type: ignore[no-any-return]

    def diff(self, a: str, b: str) -> builtins.list[Change]:
        from jaxport.audit import Change

        return self._get(builtins.list[Change], "/diff", a=a, b=b)  # type: ignore[no-any-return]

    def signatures(self, reference: str) -> builtins.list[Signature]:
        return self._get(builtins.list[Signature], "/signatures", reference=reference)  # type: ignore[no-any-return]

    # -- blob reads --------------------------------------------------------------------------

    def read_blob(self, digest: str) -> bytes:
        """At most ``DEFAULT_MAX_READ`` bytes, checked against ``digest`` here."""
        return download(self._http, f"/blobs/{_seg(digest)}", digest, DEFAULT_MAX_READ)

    def read_range(self, digest: str) -> Callable[[int, int], bytes]:
        def read(start: int, end: int) -> bytes:
            with self._http.stream(
                f"/blobs/{_seg(digest)}", headers={"Range": f"bytes={start}-{end - 1}"}
            ) as r:
                data = r.read()
            if r.status_code != 206 or len(data) != end - start:
                raise IntegrityError(
                    f"blob {digest}: the server sent another range", expected=digest
                )
            return data

        return read

    def archive(self, reference: str, chosen: VariantInfo) -> bytes:
        """The whole archive, verified: straight from the server's store where it signs URLs
        (``registry/_presigned.py``), else in one download through the server, which is
        refused before a byte is read if it would send more than the recorded size."""
        data = fetch_archive(self._http, chosen.digest, chosen.size_bytes)
        if data is not None:
            return data
        return download(
            self._http, f"/blobs/{_seg(chosen.digest)}", chosen.digest, chosen.size_bytes
        )

    def write_file(self, reference: str, chosen: VariantInfo, path: str | os.PathLike[str]) -> None:
        """Streamed to disk as it arrives (its parts from the server's store where it signs
        URLs), hashed on the way, renamed into place once it matches its digest
        (``registry/_remote_reads.py``): memory stays a few chunks, whatever the size."""
        write_streamed(self._http, chosen.digest, chosen.size_bytes, path)

    def function(
        self, reference: str, chosen: VariantInfo, allow_custom_calls: Sequence[str]
    ) -> Exported:
        """The header read by ranges and checked, the primal module fetched now and each VJP
        module when ``.vjp()`` first asks (``GET /blobs/{digest}/modules/{index}``: the server
        checks the section's digest, the module is checked against the sha256 it sends, then
        vetted as ``jaxport.loads`` vets it; ``registry/_remote_function.py``). Where the
        server's store signs URLs, the archive is read whole from the store instead (its
        modules share one section: the bytes stay off the server), and whole through the
        server where it lacks the module route or the primal module is over half the archive
        (constants it shares with the VJPs are stored once); the VJPs are then decompressed
        and vetted when ``.vjp()`` asks."""
        from jaxport.export import loads
        from jaxport.registry._remote_function import lazy_function

        data = fetch_archive(self._http, chosen.digest, chosen.size_bytes)
        if data is None:
            lazy = lazy_function(self._http, chosen, allow_custom_calls)
            if lazy is not None:
                return lazy
            data = download(
                self._http, f"/blobs/{_seg(chosen.digest)}", chosen.digest, chosen.size_bytes
            )
        exported: Exported = loads(data, allow_custom_calls=tuple(allow_custom_calls))
        return exported

    def model(self, chosen: VariantInfo, allow_custom_calls: Sequence[str]) -> Model:
        """The skeleton read and verified now, each tensor fetched (a presigned GET of its
        part, else an HTTP range of the archive) when the model first uses it, checked against
        its sha256 before any array is made (``registry/_remote_reads.py``)."""
        return lazy_model(self._http, chosen, allow_custom_calls)

    # -- writes ------------------------------------------------------------------------------

    def push(
        self, sources: builtins.list[Any], name: str | None, options: PushOptions
    ) -> PushResult:
        """The archives are made here, split into parts, only the parts the server lacks are
        sent, then the version is committed (validated on the server, in its sandbox). Golden
        examples are made here (outputs not given computed by a source that runs here), sent
        as one more part."""
        from jaxport.registry._remote_push import archive_parts, default_name, examples_blob

        vjp_order, max_size = options["vjp_order"], options["max_size"]
        archives = [archive_parts(s, vjp_order=vjp_order, max_size=max_size) for s in sources]
        if name is None:
            name = default_name(archives[0])
        examples, tolerance = options["examples"], options["tolerance"]
        golden = examples_blob(sources, archives, examples, tolerance) if examples else None
        extra = {golden[0]: golden[1]} if golden else {}
        body = {
            "name": name, "archives": [to_wire(a.parts) for a in archives],
            "aliases": options["aliases"], "metadata": options["metadata"],
            "allow_custom_calls": options["allow_custom_calls"], "vjp_order": vjp_order,
            "examples": {"digest": golden[0], "kind": golden[2]} if golden else None,
            **lineage_body(options["lineage"]),
        }  # fmt: skip
        sent: builtins.list[int] = []  # the size of each part sent
        try:
            send_parts(self._http, archives, extra, name, sent)  # straight to S3 if it can
            answer = self._http.json("POST", "/versions", json=body)
        except BaseException as error:  # Ctrl-C included: say what stays on the server
            if sent:
                error.add_note(_left_behind(self.url, sent))
            raise
        return from_wire(PushResult, answer)  # type: ignore[no-any-return]

    def adopt_signature(
        self, name: str, digest: str, bundle: bytes, signer: str, kind: str
    ) -> Signature:
        """``POST /signatures/{name}`` (``server/_api_adopt.py``: the server checks the bundle
        as a direct registry does); a server without the route (older) is
        ``UnsupportedFeatureError``."""
        try:
            text = bundle.decode("utf-8")
        except UnicodeDecodeError:
            raise SignatureError(
                "a signature bundle that is not UTF-8 JSON", digest=digest
            ) from None
        body = {"digest": digest, "bundle": text, "signer": signer, "kind": kind}
        answer = self._adopting("/signatures", name, body, "a signature made elsewhere")
        return from_wire(Signature, answer)  # type: ignore[no-any-return]

    def adopt_findings(self, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """``POST /findings/{name}``, in batches of at most ``_FINDINGS_BATCH`` rows and
        about 1 MiB of JSON; a server without the route (older) is
        ``UnsupportedFeatureError``."""
        stored = 0
        for batch in _batches(rows):
            body = {"findings": batch}
            answer = self._adopting("/findings", name, body, "findings made elsewhere")
            stored += int(answer["stored"])
        return stored

    def _adopting(self, route: str, name: str, body: dict[str, Any], what: str) -> Any:
        try:
            return self._http.json("POST", f"{route}/{_seg(name)}", json=body)
        except RegistryError as e:
            if type(e) is RegistryError:  # 404 or 405 of a server without the route
                self.lacks(f"storing {what} (this server is older than its route)")
            raise

    def missing_blobs(self, digests: Sequence[str]) -> builtins.list[str]:
        answer = self._http.json("POST", "/blobs/missing", json={"digests": list(digests)})
        return list(answer["missing"])

    def alias(
        self, name: str, alias: str, version: int | None, override: str | None = None
    ) -> None:
        body: dict[str, Any] = {"version": version}
        if override is not None:  # an older server refuses the fields it does not know
            body.update(override=True, reason=override)
        self._http.json("PUT", f"/aliases/{_seg(name)}/{_seg(alias)}", json=body)

    def protect(self, name: str, alias: str, spec: Mapping[str, Any]) -> AliasGates:
        body = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.items()}
        answer = self._http.json("PUT", f"/gates/{_seg(name)}/{_seg(alias)}", json=body)
        return from_wire(AliasGates, answer)  # type: ignore[no-any-return]

    def unprotect(self, name: str, alias: str) -> None:
        self._http.json("DELETE", f"/gates/{_seg(name)}/{_seg(alias)}")

    def gates(self, name: str) -> builtins.list[GateCheck]:
        return self._get(builtins.list[GateCheck], f"/gates/{_seg(name)}")  # type: ignore[no-any-return]

    def check_gates(self, name: str, alias: str, version: int) -> GateCheck | None:
        path = f"/gates/{_seg(name)}/{_seg(alias)}"
        return self._get(GateCheck | None, path, version=version)  # type: ignore[no-any-return]

    def delete(self, name: str, version: int | None, force: bool) -> None:
        params: dict[str, Any] = {"force": force}
        if version is not None:
            params["version"] = version
        self._http.json("DELETE", f"/names/{_seg(name)}", params=params)

    def gc(self, dry_run: bool, min_age: float, temp_age: float) -> GcReport:
        body = {"dry_run": dry_run, "min_age": min_age, "temp_age": temp_age}
        return from_wire(GcReport, self._http.json("POST", "/gc", json=body))  # type: ignore[no-any-return]

    def verify(self, deep: bool, timeout: float) -> VerifyReport:
        body = {"deep": deep, "timeout": timeout}
        return from_wire(VerifyReport, self._http.json("POST", "/verify", json=body))  # type: ignore[no-any-return]

    def examples_of(self, name: str, version: int) -> bytes | None:
        path = f"/rescue/examples/{_seg(name)}/{int(version)}"
        digest = self._http.json("GET", path)["digest"]
        if digest is None:
            return None
        return download(self._http, f"{path}/blob", str(digest), DEFAULT_MAX_READ)

    def record_event(self, kind: str, name: str, version: int, detail: Mapping[str, Any]) -> Event:
        if kind != "rescue":
            self.lacks(f"recording a {kind!r} event")
        body = {"name": name, "version": version, "detail": dict(detail)}
        return from_wire(Event, self._http.json("POST", "/rescue/events", json=body))  # type: ignore[no-any-return]

    def retention_policies(self) -> builtins.list[RetentionPolicy]:
        return self._get(builtins.list[RetentionPolicy], "/retention/policies")  # type: ignore[no-any-return]

    def set_retention_policy(self, policy: RetentionPolicy) -> RetentionPolicy:
        path = f"/retention/policies/{_seg(policy.prefix)}"
        return from_wire(RetentionPolicy, self._http.json("PUT", path, json=to_wire(policy)))  # type: ignore[no-any-return]

    def remove_retention_policy(self, prefix: str) -> RetentionPolicy:
        path = f"/retention/policies/{_seg(prefix)}"
        return from_wire(RetentionPolicy, self._http.json("DELETE", path))  # type: ignore[no-any-return]

    def retain(self, prefix: str | None, dry_run: bool) -> RetentionPlan:
        body = {"prefix": prefix, "dry_run": dry_run}
        return from_wire(RetentionPlan, self._http.json("POST", "/retention/runs", json=body))  # type: ignore[no-any-return]

    def restore(self, name: str, version: int) -> Ref:
        body = {"name": name, "version": version}
        return from_wire(Ref, self._http.json("POST", "/retention/restore", json=body))  # type: ignore[no-any-return]

    def watch_jax(self, options: Mapping[str, Any]) -> WatchReport:
        """Run by the server, with its own index configuration (an unprefixed admin)."""
        if options["index"] is not None:
            self.lacks("index_url (the server reads the index its own pip configuration names)")
        body = {k: v for k, v in options.items() if k != "index"}
        return from_wire(WatchReport, self._http.json("POST", "/watch", json=body))  # type: ignore[no-any-return]

    def forecast(self, reference: str | None) -> builtins.list[VariantForecast]:
        return self._get(builtins.list[VariantForecast], "/forecast", reference=reference)  # type: ignore[no-any-return]

    def audit(
        self,
        reference: str | None,
        platform: str | None,
        store: bool,
        python: str | os.PathLike[str] | None,
        options: Mapping[str, Any],
    ) -> builtins.list[Finding]:
        """Run by the server (with its jax), the findings recorded there."""
        if options["tolerance"] is not None:
            self.lacks(
                "an audit tolerance (push the examples with push(..., tolerance=...) instead)"
            )
        if python is not None or options["jax"] is not None or not store:
            self.lacks("audits with another jax, or without recording the findings")
        from jaxport.audit import Finding

        body = {"reference": reference, "platform": platform, "force": options["force"],
                "level": options["level"], "timeout": options["timeout"]}  # fmt: skip
        found = from_wire(builtins.list[Finding], self._http.json("POST", "/audits", json=body))
        progress = options["progress"]
        if progress is not None:
            progress(len(found), len(found))
        return found  # type: ignore[no-any-return]


def _batches(rows: Sequence[Mapping[str, Any]]) -> Iterator[builtins.list[dict[str, Any]]]:
    """``rows`` in batches of at most ``_FINDINGS_BATCH`` rows whose JSON is about
    ``_BATCH_BYTES`` at most (one larger row goes alone: the server's body limit holds it)."""
    batch: builtins.list[dict[str, Any]] = []
    size = 0
    for row in rows:
        row_size = len(json.dumps(dict(row)))
        if batch and (len(batch) == _FINDINGS_BATCH or size + row_size > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(dict(row))
        size += row_size
    if batch:
        yield batch


def _left_behind(url: str, sent: Sequence[int]) -> str:
    """What a push that stopped after sending parts left on the server, and how to free it."""
    return (
        f"this push had sent {len(sent)} part(s), {sum(sent):,} bytes, to {url}: they stay "
        "there, referenced by no version, for gc's --min-age (an hour by default), so pushing "
        "the same archives again within it sends them no more; an admin frees them now with "
        "`jaxport gc --min-age 0`"
    )


def _seg(text: str) -> str:
    """``text`` as one URL path segment."""
    return quote(str(text), safe="")
