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

The plan (``_retention_plan``) reads five statements whatever the registry's size and decides
in Python (``benchmarks/bench_retain.py``).
"""

from __future__ import annotations

import dataclasses
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
    AliasRow,
    ExamplesRow,
    NameRow,
    RetentionPolicyRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._names import check_name, check_version
from jaxport.registry._publish import content_key
from jaxport.registry._queries import ref_on
from jaxport.registry._retention_plan import plan, policies
from jaxport.registry._retention_types import (
    RetentionDecision,
    RetentionPlan,
    RetentionPolicy,
    check_policy,
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
            return policies(conn)

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
            found = {p.prefix: p for p in policies(conn)}
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
