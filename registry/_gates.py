"""Protected aliases: gates a version must pass before an alias may point at it.

An admin protects ``NAME@ALIAS`` with gates (``Registry.protect``, ``jaxport alias protect``),
kept in ``alias_gates`` (``AliasGateRow``). Every move of that alias to a version (``alias``,
``push(aliases=)``, through a server or a database alike) evaluates them in the move's own
write transaction, after the name's row is locked (``_aliases.move_alias``), so two writers
cannot both slip a move past a gate. A move that fails any gate is refused with every failed
gate listed (``GateError``); an unprefixed admin may override it with a reason.

Gates are read from stored facts only; nothing compiles and no bundle is read:

- ``signature``: every variant of the version has a stored signature whose signer is the
  gate's fingerprint (sha256 of the signing public key's DER SubjectPublicKeyInfo, as
  ``jaxport sign`` stores it; a certificate's leaf key likewise). Signatures are stored only
  by direct registries (``Registry.sign``), whose writers are trusted with the database.
- ``audit``: for each platform (the gate's, else every platform of the version's variants) and
  each jax release (the gate's, else any), some variant for that platform has, as its newest
  measured finding (``not-run`` and ``unknown`` measure nothing), one of the required status.
- ``goldens``: the version holds golden examples.

A move's event detail records the gates and what they relied on: the audit rows (id, digest,
jax, platform, status), the signatures (digest, signer, bundle digest), the examples blob; an
override records its reason and the gates that failed. Removing an alias is not gated.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, delete, select

from jaxport import GateError, NotFoundError
from jaxport.registry import _db
from jaxport.registry._event_log import EventLog
from jaxport.registry._gate_types import (
    AliasGates,
    GateCheck,
    GateResult,
    check_gate_spec,
    gate_error,
    record_of,
)
from jaxport.registry._models import (
    AliasGateRow,
    AliasRow,
    AuditRow,
    ExamplesRow,
    SignatureRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._names import check_name, check_version
from jaxport.registry._queries import model_id_of

__all__ = ["Gates", "enforce", "evaluate", "move_checked", "push_detail"]

#: Statuses that measured nothing (``jaxport.audit``'s ``UNMEASURED``, written here so that
#: gates import no jax): a finding with one never hides an earlier measured one.
UNMEASURED = ("not-run", "unknown")


# -- the gates of a database ------------------------------------------------------------------


class Gates:
    """Protecting, unprotecting and evaluating aliases on one registry database."""

    def __init__(self, engine: Engine, events: EventLog):
        self._engine = engine
        self._events = events

    def protect(self, name: str, alias: str, spec: dict[str, Any]) -> AliasGates:
        """Sets ``name@alias``'s gates (replacing any), and records a ``protect`` event.

        Raises:
            NotFoundError: no such name.
            InvalidNameError: a spec ``check_gate_spec`` refuses.
        """
        spec = check_gate_spec(spec)
        check_name(alias, "alias")
        from jaxport.registry._events import current_actor

        row = {**spec, "created_at": time.time(), "created_by": current_actor()[:200]}
        row["jax_releases"] = ",".join(spec["jax_releases"])
        row["platforms"] = ",".join(spec["platforms"])
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            model_id = model_id_of(conn, name, lock=True)
            upsert = _db.insert_on_conflict(conn, AliasGateRow.__table__).values(
                model_id=model_id, alias=alias, **row
            )
            conn.execute(
                upsert.on_conflict_do_update(index_elements=["model_id", "alias"], set_=row)
            )
            gates = _gates_of(name, _row(conn, model_id, alias))
            detail = {"alias": alias, "gates": dataclasses.asdict(gates)}
            event = self._events.insert(conn, "protect", name, None, detail)
        self._events.notify(event)
        return gates

    def unprotect(self, name: str, alias: str) -> None:
        """Removes ``name@alias``'s gates, and records an ``unprotect`` event.

        Raises:
            NotFoundError: no such name, or the alias is not protected.
        """
        check_name(alias, "alias")
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            model_id = model_id_of(conn, name, lock=True)
            found = conn.execute(
                delete(AliasGateRow).where(
                    AliasGateRow.model_id == model_id, AliasGateRow.alias == alias
                )
            ).rowcount
            if not found:
                raise NotFoundError(f"{name}@{alias} is not protected")
            event = self._events.insert(conn, "unprotect", name, None, {"alias": alias})
        self._events.notify(event)

    def of(self, name: str) -> list[GateCheck]:
        """Every protected alias of ``name``, evaluated for the version it points at now."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = model_id_of(conn, name)
            rows = conn.execute(
                select(AliasGateRow)
                .where(AliasGateRow.model_id == model_id)
                .order_by(AliasGateRow.alias)
            ).all()
            if not rows:
                return []
            pointing = dict(
                conn.execute(
                    select(AliasRow.alias, AliasRow.version).where(AliasRow.model_id == model_id)
                ).all()
            )
            found = []
            for row in rows:
                gates = _gates_of(name, row)
                version = pointing.get(row.alias)
                if version is None:
                    found.append(GateCheck(gates, None, (), {}))
                    continue
                try:
                    found.append(evaluate(conn, model_id, gates, version))
                except NotFoundError:  # its version was deleted (soft: retention) meanwhile
                    gone = GateResult("version", "", False, f"{name}:{version} is deleted")
                    found.append(GateCheck(gates, version, (gone,), {}))
            return found

    def check(self, name: str, alias: str, version: int) -> GateCheck | None:
        """``name@alias``'s gates evaluated for ``version`` (None: not protected).

        Raises:
            NotFoundError: no such name or version.
        """
        check_name(alias, "alias")
        check_version(version)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = model_id_of(conn, name)
            row = _row(conn, model_id, alias)
            if row is None:
                _version_id(conn, model_id, name, version)
                return None
            return evaluate(conn, model_id, _gates_of(name, row), version)


# -- enforcing, in a move's transaction -------------------------------------------------------


def enforce(
    conn: Connection, model_id: int, name: str, alias: str, version: int, override: str | None
) -> dict[str, Any] | None:
    """In a move's write transaction (the name's row locked): ``name@alias``'s gates for
    ``version``; returns what the move's event records (None: the alias is not protected).

    Raises:
        GateError: a gate fails and ``override`` (the reason of an override) is None.
    """
    row = _row(conn, model_id, alias)
    if row is None:
        return None
    check = evaluate(conn, model_id, _gates_of(name, row), version)
    if check.failures and override is None:
        raise gate_error(name, alias, version, check.failures)
    detail = record_of(check)
    if check.failures:
        detail["override"] = {"reason": override, "failures": [list(f) for f in check.failures]}
    return detail


def move_checked(
    conn: Connection,
    name: str,
    aliases: Sequence[str],
    version: int,
    before_gates: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], dict[str, GateError]]:
    """A push's alias moves in its transaction (``_publish``): each alias whose gates pass
    (or that is not protected) is moved; returns the gated moves' records by alias and the
    refusals by alias (those are not moved; the push itself stands). ``before_gates``: see
    ``move_alias``."""
    from jaxport.registry._aliases import move_alias

    gated: dict[str, Any] = {}
    refused: dict[str, GateError] = {}
    for alias in aliases:
        try:
            record = move_alias(conn, name, alias, version, before_gates=before_gates)
        except GateError as e:  # raised before the move wrote anything
            refused[alias] = e
            continue
        if record is not None:
            gated[alias] = record
    return gated, refused


def push_detail(gated: dict[str, Any], refused: dict[str, GateError]) -> dict[str, Any]:
    """What a push's event adds of its aliases' gates: ``gates`` (each gated move's record,
    by alias) and ``refused_aliases`` (each refused alias's failed gates), where any."""
    detail: dict[str, Any] = {"gates": gated} if gated else {}
    if refused:
        detail["refused_aliases"] = {a: [list(f) for f in e.failures] for a, e in refused.items()}
    return detail


# -- evaluation -------------------------------------------------------------------------------


def evaluate(conn: Connection, model_id: int, gates: AliasGates, version: int) -> GateCheck:
    """``gates`` for ``name:version``, from stored rows (3 to 4 queries).

    Raises:
        NotFoundError: no such version.
    """
    version_id = _version_id(conn, model_id, gates.name, version)
    variants = conn.execute(
        select(VariantRow.digest, VariantRow.platforms)
        .where(VariantRow.version_id == version_id)
        .order_by(VariantRow.id)
    ).all()
    results: list[GateResult] = []
    evidence: dict[str, Any] = {"audits": [], "signatures": [], "examples": None}
    if gates.require_signature:
        results.append(_signature_gate(conn, gates.require_signature, variants, evidence))
    if gates.require_audit:
        results += _audit_gate(conn, gates, variants, evidence)
    if gates.require_goldens:
        results.append(_goldens_gate(conn, version_id, evidence))
    return GateCheck(gates, version, tuple(results), evidence)


def _signature_gate(
    conn: Connection, signer: str, variants: Sequence[Any], evidence: dict[str, Any]
) -> GateResult:
    digests = [v.digest for v in variants]
    rows = conn.execute(
        select(SignatureRow.digest, SignatureRow.signer, SignatureRow.bundle_digest).where(
            SignatureRow.digest.in_(digests), SignatureRow.signer == signer
        )
    ).all()
    signed = {r.digest: r for r in rows}
    for d in digests:
        if d in signed:
            r = signed[d]
            evidence["signatures"].append(
                {"digest": d, "signer": r.signer, "bundle_digest": r.bundle_digest}
            )
    unsigned = [d for d in digests if d not in signed]
    if unsigned:
        listed = ", ".join(f"sha256:{d[:12]}" for d in unsigned)
        return GateResult(
            "signature", "", False, f"not signed by {signer[:12]}: variant(s) {listed}"
        )
    return GateResult("signature", "", True, f"every variant signed by {signer[:12]}")


def _audit_gate(
    conn: Connection, gates: AliasGates, variants: Sequence[Any], evidence: dict[str, Any]
) -> list[GateResult]:
    by_platform: dict[str, list[str]] = {}
    for v in variants:
        for p in v.platforms.split(",") if v.platforms else ():
            by_platform.setdefault(p, []).append(v.digest)
    platforms = gates.platforms or tuple(sorted(by_platform))
    releases: tuple[str | None, ...] = gates.jax_releases or (None,)
    q = (
        select(
            AuditRow.id,
            AuditRow.digest,
            AuditRow.jax_version,
            AuditRow.platform,
            AuditRow.status,
        )
        .where(
            AuditRow.digest.in_(sorted({v.digest for v in variants})),
            AuditRow.status.not_in(UNMEASURED),
        )
        .order_by(AuditRow.id.desc())
    )
    if gates.platforms:
        q = q.where(AuditRow.platform.in_(gates.platforms))
    if gates.jax_releases:
        q = q.where(AuditRow.jax_version.in_(gates.jax_releases))
    newest: dict[tuple[str, str, str | None], Any] = {}
    for row in conn.execute(q):  # newest first: the first row of a key is its newest
        newest.setdefault((row.digest, row.platform, row.jax_version), row)
        newest.setdefault((row.digest, row.platform, None), row)
    required = gates.require_audit
    results = []
    for platform in platforms:
        for release in releases:
            target = f"{platform}@{release or '*'}"
            digests = by_platform.get(platform, [])
            if not digests:
                results.append(GateResult("audit", target, False, f"no variant for {platform}"))
                continue
            found = [newest[k] for d in digests if (k := (d, platform, release)) in newest]
            good = [r for r in found if r.status == required]
            if good:
                r = good[0]
                evidence["audits"].append(
                    {"id": r.id, "digest": r.digest, "jax_version": r.jax_version,
                     "platform": r.platform, "status": r.status}
                )  # fmt: skip
                results.append(GateResult("audit", target, True, f"{required} (audit {r.id})"))
            elif found:
                said = ", ".join(f"{r.status} (audit {r.id})" for r in found)
                results.append(GateResult("audit", target, False, f"newest finding: {said}"))
            else:
                results.append(GateResult("audit", target, False, "no finding stored"))
    return results


def _goldens_gate(conn: Connection, version_id: int, evidence: dict[str, Any]) -> GateResult:
    row = conn.execute(
        select(ExamplesRow.digest, ExamplesRow.count).where(ExamplesRow.version_id == version_id)
    ).one_or_none()
    if row is None:
        return GateResult("goldens", "", False, "the version holds no golden examples")
    evidence["examples"] = {"digest": row.digest, "count": row.count}
    return GateResult("goldens", "", True, f"{row.count} golden example(s)")


# -- rows -------------------------------------------------------------------------------------


def _row(conn: Connection, model_id: int, alias: str) -> Any:
    return conn.execute(
        select(AliasGateRow).where(AliasGateRow.model_id == model_id, AliasGateRow.alias == alias)
    ).one_or_none()


def _gates_of(name: str, row: Any) -> AliasGates:
    return AliasGates(
        name=name, alias=row.alias, require_signature=row.require_signature,
        require_audit=row.require_audit, jax_releases=_split(row.jax_releases),
        platforms=_split(row.platforms), require_goldens=bool(row.require_goldens),
        created_at=row.created_at, created_by=row.created_by,
    )  # fmt: skip


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(t for t in (text or "").split(",") if t)


def _version_id(conn: Connection, model_id: int, name: str, version: int) -> int:
    found = conn.execute(
        select(VersionRow.id).where(
            VersionRow.model_id == model_id,
            VersionRow.version == version,
            VersionRow.deleted_at.is_(None),
        )
    ).scalar()
    if found is None:
        raise NotFoundError(f"{name} has no version {version}")
    return int(found)
