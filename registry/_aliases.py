"""Aliases: movable names for versions (``mlp@prod``), every move kept in ``alias_history``."""

from __future__ import annotations

import time

from sqlalchemy import Connection, Engine, delete, insert, select

from jaxport.registry import _db
from jaxport.registry._event_log import EventLog
from jaxport.registry._models import AliasMoveRow, AliasRow, VersionRow
from jaxport.registry._names import check_name, check_version
from jaxport.registry._queries import alias_version, model_id_of, version_id_of
from jaxport.registry._types import AliasMove

__all__ = ["Aliases", "move_alias"]


class Aliases:
    """Alias moves and lookups on one registry database."""

    def __init__(self, engine: Engine, events: EventLog):
        self._engine = engine
        self._events = events

    def set(self, name: str, alias: str, version: int | None) -> None:
        """Points ``name@alias`` at ``version`` (None: removes it), in one transaction."""
        check_name(name)
        check_name(alias, "alias")
        if version is not None:
            check_version(version)
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            if version is None:  # removing an alias that does not exist is an error
                alias_version(conn, model_id_of(conn, name), name, alias)
            move_alias(conn, name, alias, version)
            event = self._events.insert(conn, "alias", name, version, {"alias": alias})
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


def move_alias(conn: Connection, name: str, alias: str, version: int | None) -> None:
    """In ``conn``'s write transaction: points ``name@alias`` at ``version`` (None: removes
    it) and records the move, unless it already points there (four statements).

    Raises:
        NotFoundError: no such name or version.
    """
    model_id = model_id_of(conn, name, lock=True)  # alias moves of a name queue here
    where = (AliasRow.model_id == model_id, AliasRow.alias == alias)
    current = select(AliasRow.version).where(*where).scalar_subquery().label("old")
    if version is None:
        old = conn.execute(select(current)).scalar()
    else:
        there = select(VersionRow.id).where(
            VersionRow.model_id == model_id, VersionRow.version == version
        )
        found = conn.execute(select(current, there.exists().label("found"))).one()
        if not found.found:
            version_id_of(conn, model_id, name, version)  # NotFoundError, listing versions
        old = found.old
    if old == version:
        return
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
