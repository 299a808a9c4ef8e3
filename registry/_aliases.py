"""Aliases: movable names for versions (``mlp@prod``), every move kept in ``alias_history``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select

from jaxport.registry import _db
from jaxport.registry._event_log import EventLog
from jaxport.registry._gates import enforce
from jaxport.registry._models import AliasGateRow, AliasMoveRow, AliasRow, VersionRow
from jaxport.registry._names import check_name, check_version
from jaxport.registry._queries import alias_version, model_id_of, version_id_of
from jaxport.registry._selects import live
from jaxport.registry._types import AliasMove

__all__ = ["Aliases", "move_alias"]


class Aliases:
    """Alias moves and lookups on one registry database."""

    def __init__(self, engine: Engine, events: EventLog):
        self._engine = engine
        self._events = events

    def set(self, name: str, alias: str, version: int | None, override: str | None = None) -> None:
        """Points ``name@alias`` at ``version`` (None: removes it), in one transaction; a
        protected alias's gates are evaluated in it (``override``: an override's reason)."""
        check_name(name)
        check_name(alias, "alias")
        if version is not None:
            check_version(version)
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            if version is None:  # removing an alias that does not exist is an error
                alias_version(conn, model_id_of(conn, name), name, alias)
            gated = move_alias(conn, name, alias, version, override=override)
            detail = {"alias": alias} if gated is None else {"alias": alias, **gated}
            event = self._events.insert(conn, "alias", name, version, detail)
        self._events.notify(event)

    def of(self, name: str) -> dict[str, int]:
        """``name``'s aliases and the versions they point at."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = model_id_of(conn, name)
            rows = conn.execute(
                select(AliasRow.alias, AliasRow.version)
                .where(AliasRow.model_id == model_id)
                .order_by(AliasRow.alias)
            )
            return {a: v for a, v in rows}

    def history(self, name: str, alias: str | None) -> list[AliasMove]:
        """The moves of ``name``'s aliases (or of one), oldest first."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = model_id_of(conn, name)
            q = (
                select(
                    AliasMoveRow.alias,
                    AliasMoveRow.from_version,
                    AliasMoveRow.to_version,
                    AliasMoveRow.moved_at,
                )
                .where(AliasMoveRow.model_id == model_id)
                .order_by(AliasMoveRow.id)
            )
            if alias is not None:
                q = q.where(AliasMoveRow.alias == check_name(alias, "alias"))
            return [
                AliasMove(m.alias, m.from_version, m.to_version, m.moved_at)
                for m in conn.execute(q)
            ]


def move_alias(
    conn: Connection,
    name: str,
    alias: str,
    version: int | None,
    *,
    override: str | None = None,
    before_gates: Callable[[], None] | None = None,
) -> dict[str, Any] | None:
    """In ``conn``'s write transaction: points ``name@alias`` at ``version`` (None: removes
    it) and records the move, unless it already points there (four statements). A protected
    alias's gates are evaluated first (``_gates.enforce``), the name's row locked; returns
    what the move's event records of them (None: not protected, a removal, or no move).
    ``before_gates`` runs before a protected alias's gates are read (a push flushes its
    batched writes, so that they see its rows).

    Raises:
        NotFoundError: no such name or version.
        GateError: a gate fails and ``override`` (an override's reason) is None; nothing
            was written.
    """
    model_id = model_id_of(conn, name, lock=True)  # alias moves of a name queue here
    where = (AliasRow.model_id == model_id, AliasRow.alias == alias)
    current = select(AliasRow.version).where(*where).scalar_subquery().label("old")
    if version is None:
        old, gated_alias = conn.execute(select(current)).scalar(), False
    else:
        there = select(VersionRow.id).where(
            VersionRow.model_id == model_id, VersionRow.version == version, live()
        )
        protected = (
            select(AliasGateRow.model_id)
            .where(AliasGateRow.model_id == model_id, AliasGateRow.alias == alias)
            .exists()
            .label("protected")
        )
        found = conn.execute(select(current, there.exists().label("found"), protected)).one()
        if not found.found:
            version_id_of(conn, model_id, name, version)  # NotFoundError, listing versions
        old, gated_alias = found.old, found.protected
    if old == version:
        return None
    gated = None
    if gated_alias and version is not None:
        if before_gates is not None:
            before_gates()
        gated = enforce(conn, model_id, name, alias, version, override)
    now = time.time()
    if version is None:
        conn.execute(delete(AliasRow).where(*where))
    else:
        row = {"model_id": model_id, "alias": alias, "version": version, "updated_at": now}
        upsert = _db.insert_on_conflict(conn, AliasRow.__table__).values(row)
        conn.execute(
            upsert.on_conflict_do_update(
                index_elements=["model_id", "alias"], set_={"version": version, "updated_at": now}
            )
        )
    conn.execute(
        insert(AliasMoveRow).values(
            model_id=model_id, alias=alias, from_version=old, to_version=version, moved_at=now
        )
    )
    return gated
