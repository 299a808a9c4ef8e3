"""Retention: policies per name prefix, the plan of a run, soft deletion, restore and purge.

A version stays when any rule of its name's policy (the one with the longest prefix the name
starts with; ``RetentionPolicy``) keeps it:

- ``keep_last``: it is one of the name's newest N live versions;
- an alias points at it (``alias @A``; ``protected alias @A`` where the alias has gates:
  ``alias_gates``), whatever the policy;
- ``keep_ok_per_target``: it is the name's newest version with a full audit ``ok`` for a
  target (platform, device count of the variant, jax release), where that release is still
  inside the variant's jax window (``jaxport._window.jax_window``: a release published after
  the window ends no longer promises to run it; an unknown date counts as inside). The
  newest full finding per variant, platform and release speaks (a later failure undoes an
  ``ok``); static verdicts never count;
- ``keep_younger_than``: it was pushed less than that many seconds ago.

Every other version of a covered name goes, with why (each rule that did not keep it). A real
run soft-deletes (``versions.deleted_at``, ``restorable_until`` = now + the policy's
``restore_period``; its ``content_key`` cleared, so pushing the same content again makes a new
version): every read hides it (``_selects.live``), and ``restore`` brings it back until then.
``gc`` purges (deletes for good) versions past ``restorable_until`` before it collects blobs;
version numbers are never handed out again (``models.last_version``).

Every change is an event (``registry/_events.py``): ``retain`` per version deleted,
``restore``, ``purge`` per version purged, ``retention-policy`` per policy set or removed.

The plan reads five statements whatever the registry's size (versions, aliases, gates, full
findings, policies) and decides in Python (``benchmarks/bench_retain.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, delete, select, update

from jaxport import ConflictError, NotFoundError
from jaxport.registry import _db
from jaxport.registry._event_log import EventLog
from jaxport.registry._events import Event
from jaxport.registry._models import (
    AliasGateRow,
    AliasRow,
    AuditRow,
    ExamplesRow,
    NameRow,
    RetentionPolicyRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._names import check_name, check_version
from jaxport.registry._publish import content_key
from jaxport.registry._queries import ref_on
from jaxport.registry._retention_types import (
    RetentionDecision,
    RetentionPlan,
    RetentionPolicy,
    check_policy,
    format_duration,
)
from jaxport.registry._selects import live
from jaxport.registry._types import Ref

__all__ = ["Retention", "expired_versions", "purge_expired", "record_purges"]

_CHUNK = 500  # ids per IN (...) list


class Retention:
    """Retention policies, runs and restores on one registry database."""

    def __init__(self, engine: Engine, events: EventLog) -> None:
        self._engine = engine
        self._events = events

    # -- policies ----------------------------------------------------------------------------

    def policies(self) -> list[RetentionPolicy]:
        """Every policy, in prefix order."""
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            return _policies(conn)

    def set_policy(self, policy: RetentionPolicy) -> RetentionPolicy:
        """Stores ``policy`` (replacing the one of its prefix); returns it as stored."""
        check_policy(policy)
        stored = dataclasses.replace(policy, created_at=time.time())
        row = dataclasses.asdict(stored)
        upsert = _db.insert_on_conflict
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            statement = upsert(conn, RetentionPolicyRow.__table__).values(row)
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["prefix"], set_={k: v for k, v in row.items() if k != "prefix"}
                )
            )
            detail = {"action": "set", **row}
            event = self._events.insert(conn, "retention-policy", None, None, detail)
        self._events.notify(event)
        return stored

    def remove_policy(self, prefix: str) -> RetentionPolicy:
        """Removes the policy of ``prefix``; returns it.

        Raises:
            NotFoundError: there is none (the message lists the prefixes that have one).
        """
        check_name(prefix, "prefix")
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            found = {p.prefix: p for p in _policies(conn)}
            if prefix not in found:
                listed = ", ".join(map(repr, found)) or "none"
                raise NotFoundError(f"no retention policy for {prefix!r}; policies: {listed}")
            conn.execute(delete(RetentionPolicyRow).where(RetentionPolicyRow.prefix == prefix))
            detail = {"action": "remove", "prefix": prefix}
            event = self._events.insert(conn, "retention-policy", None, None, detail)
        self._events.notify(event)
        return found[prefix]

    # -- runs --------------------------------------------------------------------------------

    def retain(self, prefix: str | None, *, dry_run: bool) -> RetentionPlan:
        """Plans a run over the names starting with ``prefix`` (None: every name a policy
        covers) and, unless ``dry_run``, soft-deletes what it would delete, one ``retain``
        event each, in one transaction (see the module's doc)."""
        if prefix is not None:
            check_name(prefix, "prefix")
        now = time.time()
        if dry_run:
            with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
                kept, doomed, _ = plan(conn, prefix, now)
            return RetentionPlan(True, prefix, tuple(doomed), tuple(kept), now)
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            kept, doomed, ids = plan(conn, prefix, now)
            deleted, events = self._soft_delete(conn, doomed, ids, now)
        for event in events:
            self._events.notify(event)
        gone = {(d.name, d.version) for d in deleted}
        # A version an alias moved to meanwhile stays (the UPDATE checks): it is kept now.
        kept += [_kept_by_alias(d) for d in doomed if (d.name, d.version) not in gone]
        kept.sort(key=lambda d: (d.name, d.version))
        return RetentionPlan(False, prefix, tuple(deleted), tuple(kept), now)

    def _soft_delete(
        self,
        conn: Connection,
        doomed: Sequence[RetentionDecision],
        ids: Sequence[int],
        now: float,
    ) -> tuple[list[RetentionDecision], list[Event]]:
        """Soft-deletes ``doomed`` (their version ids ``ids``) where no alias points at them
        now: the decisions carried out, and their events (to notify after commit)."""
        by_id = dict(zip(ids, doomed, strict=True))
        _lock_names(conn, {d.name for d in doomed})
        periods: dict[float, list[int]] = defaultdict(list)  # restorable_until -> version ids
        for version_id, decision in by_id.items():
            periods[decision.restorable_until or now].append(version_id)
        done: dict[int, RetentionDecision] = {}
        for until, group in periods.items():
            for start in range(0, len(group), _CHUNK):
                statement = (
                    update(VersionRow)
                    .where(VersionRow.id.in_(group[start : start + _CHUNK]), live(), ~_aliased())
                    .values(deleted_at=now, restorable_until=until, content_key=None)
                    .returning(VersionRow.id)
                )
                for version_id in conn.execute(statement).scalars():
                    done[version_id] = by_id[version_id]
        deleted = sorted(done.values(), key=lambda d: (d.name, d.version))
        events = self._events.insert_many(
            conn,
            [
                ("retain", d.name, d.version, {"policy": d.policy, "rules": list(d.rules),
                                               "restorable_until": d.restorable_until})
                for d in deleted
            ],
        )  # fmt: skip
        return deleted, events

    def restore(self, name: str, version: int) -> Ref:
        """Brings back ``name:version``, which a retention run deleted, within its restore
        period; one ``restore`` event.

        Raises:
            NotFoundError: no such name or version (never pushed, or purged by ``gc``).
            ConflictError: the version is not deleted, or its restore period is over.
        """
        check_name(name)
        check_version(version)
        now = time.time()
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            q = select(NameRow.id).where(NameRow.name == name)
            model_id = conn.execute(q.with_for_update()).scalar_one_or_none()
            row = conn.execute(
                select(VersionRow.id, VersionRow.deleted_at, VersionRow.restorable_until).where(
                    VersionRow.model_id == model_id, VersionRow.version == version
                )
            ).one_or_none()
            if model_id is None or row is None:
                raise NotFoundError(
                    f"{name} has no version {version} to restore (never pushed, "
                    "or gc removed it after its restore period)"
                )
            if row.deleted_at is None:
                raise ConflictError(f"{name}:{version} is not deleted")
            if row.restorable_until is not None and row.restorable_until < now:
                raise ConflictError(
                    f"{name}:{version}'s restore period ended {_iso(row.restorable_until)}: "
                    "it can no longer be restored (gc removes it)"
                )
            key = _free_content_key(conn, model_id, row.id)
            conn.execute(
                update(VersionRow)
                .where(VersionRow.id == row.id)
                .values(deleted_at=None, restorable_until=None, content_key=key)
            )
            event = self._events.insert(conn, "restore", name, version, {})
            ref = ref_on(conn, name, version)
        self._events.notify(event)
        return ref


# -- the plan ---------------------------------------------------------------------------------


def plan(
    conn: Connection, prefix: str | None, now: float
) -> tuple[list[RetentionDecision], list[RetentionDecision], list[int]]:
    """``(kept, deleted, ids of deleted)`` for the live versions of names starting with
    ``prefix`` (None: all) that a policy covers, in ``(name, version)`` order; the deleted ones'
    ``restorable_until`` is ``now`` + their policy's period."""
    policies = sorted(_policies(conn), key=lambda p: len(p.prefix), reverse=True)
    if not policies:
        return [], [], []
    q = (
        select(
            VersionRow.id,
            VersionRow.model_id,
            VersionRow.version,
            VersionRow.created_at,
            NameRow.name,
        )
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(live())
    )
    if prefix is not None:
        q = q.where(NameRow.name.like(_like(prefix), escape="\\"))
    covered: dict[int, tuple[str, RetentionPolicy, list[Any]]] = {}
    for row in conn.execute(q):
        entry = covered.get(row.model_id)
        if entry is None:
            policy = next((p for p in policies if row.name.startswith(p.prefix)), None)
            if policy is None:
                continue
            entry = covered[row.model_id] = (row.name, policy, [])
        entry[2].append(row)
    if not covered:
        return [], [], []
    pinned = _pinned(conn)
    ok = (
        _newest_ok(conn, covered)
        if any(p.keep_ok_per_target for _, p, _ in covered.values())
        else {}
    )
    kept, doomed, ids = [], [], []
    for model_id, (name, policy, rows) in sorted(covered.items(), key=lambda e: e[1][0]):
        rows.sort(key=lambda r: r.version, reverse=True)
        for index, row in enumerate(rows):
            rules = _keeping(
                policy, index, row, now, pinned.get((model_id, row.version), ()), ok.get(row.id, ())
            )
            if rules:
                kept.append(
                    RetentionDecision(name, row.version, True, rules, policy.prefix, row.created_at)
                )
            else:
                until = now + policy.restore_period
                doomed.append(
                    RetentionDecision(
                        name, row.version, False, _why(policy), policy.prefix, row.created_at, until
                    )
                )
                ids.append(row.id)
    order = sorted(range(len(doomed)), key=lambda i: (doomed[i].name, doomed[i].version))
    kept.sort(key=lambda d: (d.name, d.version))
    return kept, [doomed[i] for i in order], [ids[i] for i in order]


def _keeping(
    policy: RetentionPolicy,
    index: int,
    row: Any,
    now: float,
    aliases: Sequence[str],
    targets: Sequence[str],
) -> tuple[str, ...]:
    """The rules of ``policy`` that keep ``row``, the ``index``-th newest live version."""
    rules = []
    if policy.keep_last is not None and index < policy.keep_last:
        rules.append(f"last {policy.keep_last}")
    rules += aliases
    if policy.keep_ok_per_target:
        rules += targets
    if policy.keep_younger_than is not None and now - row.created_at < policy.keep_younger_than:
        rules.append(f"younger than {format_duration(policy.keep_younger_than)}")
    return tuple(rules)


def _why(policy: RetentionPolicy) -> tuple[str, ...]:
    """Why no rule of ``policy`` keeps a version it deletes: each rule, as not met."""
    why = []
    if policy.keep_last is not None:
        why.append(f"not among the last {policy.keep_last}")
    why.append("no alias")
    if policy.keep_ok_per_target:
        why.append("newest ok for no supported target")
    if policy.keep_younger_than is not None:
        why.append(f"older than {format_duration(policy.keep_younger_than)}")
    return tuple(why)


def _pinned(conn: Connection) -> dict[tuple[int, int], list[str]]:
    """``(model_id, version)`` -> the rules of the aliases pointing at it (``alias @A``, or
    ``protected alias @A`` where the alias has gates)."""
    gated = {(m, a) for m, a in conn.execute(select(AliasGateRow.model_id, AliasGateRow.alias))}
    pinned: dict[tuple[int, int], list[str]] = defaultdict(list)
    rows = conn.execute(select(AliasRow.model_id, AliasRow.alias, AliasRow.version))
    for model_id, alias, version in sorted(rows, key=lambda r: r.alias):
        kind = "protected alias" if (model_id, alias) in gated else "alias"
        pinned[(model_id, version)].append(f"{kind} @{alias}")
    return pinned


def _newest_ok(
    conn: Connection, covered: dict[int, tuple[str, RetentionPolicy, list[Any]]]
) -> dict[int, list[str]]:
    """version id -> the targets it is the name's newest ``ok`` version for (``newest ok:
    PLATFORM xN jax RELEASE``), among the names in ``covered``."""
    numbers = {
        r.id: (model_id, r.version) for model_id, (_, _, rows) in covered.items() for r in rows
    }
    q = (
        select(
            VariantRow.version_id,
            VariantRow.nr_devices,
            VariantRow.jax_version.label("made"),
            VariantRow.sharded,
            AuditRow.platform,
            AuditRow.jax_version,
            AuditRow.status,
        )
        .join(AuditRow, AuditRow.digest == VariantRow.digest)
        .where(AuditRow.level == "full")
        .order_by(AuditRow.id)
    )
    newest: dict[tuple[Any, ...], tuple[str, bool]] = {}  # the newest finding speaks
    for r in conn.execute(q):
        if r.version_id in numbers:
            key = (r.version_id, r.platform, r.nr_devices, r.jax_version)
            newest[key] = (r.status, _supported(r.made, r.sharded, r.jax_version))
    best: dict[tuple[Any, ...], tuple[int, int]] = {}  # target -> (version, version id)
    for (version_id, platform, devices, release), (status, supported) in newest.items():
        if status != "ok" or not supported:
            continue
        model_id, version = numbers[version_id]
        target = (model_id, platform, devices, release)
        if target not in best or best[target][0] < version:
            best[target] = (version, version_id)
    found: dict[int, list[str]] = defaultdict(list)
    for (_, platform, devices, release), (_, version_id) in sorted(best.items(), key=str):
        found[version_id].append(f"newest ok: {platform} x{devices} jax {release}")
    return found


@functools.lru_cache(maxsize=4096)
def _supported(made_by: str, sharded: bool, release: str) -> bool:
    """Whether jax ``release`` is still inside the window of a variant made by jax
    ``made_by`` (an unknown date: it cannot be said, so it counts)."""
    from jaxport._window import jax_window

    return jax_window(made_by, sharded=sharded, running=release).within_window is not False


# -- purge (gc) -------------------------------------------------------------------------------


def expired_versions(before: float) -> Any:
    """The ids of soft-deleted versions whose restore period ended before ``before``, as a
    SELECT."""
    return select(VersionRow.id).where(
        VersionRow.deleted_at.is_not(None), VersionRow.restorable_until < before
    )


def purge_expired(conn: Connection, now: float, *, dry_run: bool) -> list[tuple[str, int]]:
    """Deletes (unless ``dry_run``) the versions whose restore period ended before ``now``, in
    ``conn``'s transaction (``gc``'s, under its exclusive blob lock): their ``(name,
    version)``s, sorted. Their variants, parts and examples go with them (ON DELETE
    CASCADE); their blobs are then unreferenced unless another version holds them."""
    rows = conn.execute(
        select(VersionRow.id, NameRow.name, VersionRow.version)
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(VersionRow.id.in_(expired_versions(now)))
    ).all()
    if not dry_run:
        ids = [r.id for r in rows]
        for start in range(0, len(ids), _CHUNK):
            conn.execute(delete(VersionRow).where(VersionRow.id.in_(ids[start : start + _CHUNK])))
    return sorted((r.name, r.version) for r in rows)


def record_purges(engine: Engine, events: EventLog, purged: Sequence[str]) -> None:
    """One ``purge`` event per ``name:version`` gc purged, in a transaction right after gc's
    (as gc's own event), then notified."""
    rows = [("purge", name, int(version), {"by": "gc"})
            for name, _, version in (p.rpartition(":") for p in purged)]  # fmt: skip
    if not rows:
        return
    with _db.translating_db_errors(), _db.write_transaction(engine) as conn:
        recorded = events.insert_many(conn, rows)
    for event in recorded:
        events.notify(event)


# -- helpers ----------------------------------------------------------------------------------


def _policies(conn: Connection) -> list[RetentionPolicy]:
    table = RetentionPolicyRow.__table__
    rows = conn.execute(select(table).order_by(table.c.prefix))
    return [
        RetentionPolicy(
            r.prefix,
            r.keep_last,
            r.keep_younger_than,
            bool(r.keep_ok_per_target),
            r.restore_period,
            r.created_at,
        )
        for r in rows
    ]


def _like(prefix: str) -> str:
    """A LIKE pattern of the names starting with ``prefix`` (a valid name: ``_`` escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _aliased() -> Any:
    """An alias points at the ``versions`` row (correlated EXISTS)."""
    return (
        select(AliasRow.alias)
        .where(AliasRow.model_id == VersionRow.model_id, AliasRow.version == VersionRow.version)
        .exists()
    )


def _lock_names(conn: Connection, names: Iterable[str]) -> None:
    """Locks the ``models`` rows of ``names`` (PostgreSQL: FOR UPDATE), so that alias moves of
    those names wait for this transaction; SQLite's write transaction excludes them already."""
    if conn.dialect.name != "postgresql":
        return
    listed = sorted(names)
    for start in range(0, len(listed), _CHUNK):
        q = select(NameRow.id).where(NameRow.name.in_(listed[start : start + _CHUNK]))
        conn.execute(q.order_by(NameRow.id).with_for_update()).all()


def _kept_by_alias(decision: RetentionDecision) -> RetentionDecision:
    return RetentionDecision(
        decision.name,
        decision.version,
        True,
        ("alias (moved meanwhile)",),
        decision.policy,
        decision.created_at,
    )


def _free_content_key(conn: Connection, model_id: int, version_id: int) -> str | None:
    """The content key of the version ``version_id`` (``_publish.content_key``), or None where
    a live version of the name has that content now (pushed again after the deletion)."""
    digests = conn.execute(
        select(VariantRow.digest).where(VariantRow.version_id == version_id).order_by(VariantRow.id)
    ).scalars()
    examples = conn.execute(
        select(ExamplesRow.digest).where(ExamplesRow.version_id == version_id)
    ).scalar_one_or_none()
    key = content_key(list(digests), examples)
    taken = conn.execute(
        select(VersionRow.id).where(VersionRow.model_id == model_id, VersionRow.content_key == key)
    ).first()
    return None if taken is not None else key


def _iso(seconds: float) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")
