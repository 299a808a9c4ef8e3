"""``EventLog``: the event log (``registry/_events.py``) on one registry database."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, insert, select

from jaxport import InvalidNameError
from jaxport.registry import _db
from jaxport.registry._batch import WriteBatch
from jaxport.registry._events import Event, current_actor
from jaxport.registry._models import EventRow
from jaxport.registry._names import check_count

__all__ = ["EventLog"]

#: The largest row id SQLite and PostgreSQL (BIGINT) hold: a larger ``before`` is refused,
#: never sent to the database (SQLite cannot bind it).
_MAX_ID = 2**63 - 1
_INSERT_EVENT = insert(EventRow).returning(EventRow.id)


class EventLog:
    """Appends events and reads them back, on one registry database. ``listeners`` are called
    with each event appended by this process (the server's webhooks)."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self.listeners: list[Callable[[Event], None]] = []

    def record(
        self,
        kind: str,
        name: str | None = None,
        version: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Event:
        """Appends one event by ``current_actor()`` in a transaction of its own; returns it."""
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            event = self.insert(conn, kind, name, version, detail)
        self.notify(event)
        return event

    def insert(
        self,
        conn: Connection,
        kind: str,
        name: str | None = None,
        version: int | None = None,
        detail: Mapping[str, Any] | None = None,
        *,
        writes: WriteBatch | None = None,
    ) -> Event:
        """Appends one event in ``conn``'s transaction (the write's own: both commit or
        neither), with the ``writes`` added so far; ``notify`` it once that transaction
        committed."""
        row = {
            "at": time.time(), "actor": current_actor(), "kind": kind, "name": name,
            "version": version, "detail": json.dumps(dict(detail or {}), sort_keys=True),
        }  # fmt: skip
        execute = conn.execute if writes is None else writes.execute
        event_id = execute(_INSERT_EVENT, row).scalar_one()
        return _event({**row, "id": event_id})

    def insert_many(
        self,
        conn: Connection,
        events: Sequence[tuple[str, str | None, int | None, Mapping[str, Any]]],
    ) -> list[Event]:
        """Appends ``events`` (``(kind, name, version, detail)`` each) in ``conn``'s
        transaction, in one INSERT (the driver batches its rows), in order; ``notify`` each
        once that transaction committed."""
        now, actor = time.time(), current_actor()
        rows = [
            {"at": now, "actor": actor, "kind": kind, "name": name, "version": version,
             "detail": json.dumps(dict(detail), sort_keys=True)}
            for kind, name, version, detail in events
        ]  # fmt: skip
        if not rows:
            return []
        statement = insert(EventRow).returning(EventRow.id, sort_by_parameter_order=True)
        ids = conn.execute(statement, rows).scalars().all()
        return [_event({**row, "id": i}) for row, i in zip(rows, ids, strict=True)]

    def notify(self, event: Event | None) -> None:
        """Hands a committed event to the ``listeners``."""
        if event is None:
            return
        for listener in self.listeners:
            listener(event)

    def list(
        self, *, name: str | None = None, limit: int = 100, before: int | None = None
    ) -> list[Event]:
        """Events, newest first, one page: those of ``name`` only if given; ``before`` is the
        ``id`` of the last event of the previous page (keyset pagination).

        Raises:
            InvalidNameError: ``limit`` outside 1..10,000 or ``before`` outside 1 .. 2**63 - 1
                (the largest id a database holds).
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise InvalidNameError(f"limit must be an int in 1..10000, got {limit!r:.40}")
        q = select(EventRow.__table__).order_by(EventRow.id.desc()).limit(limit)
        if name is not None:
            q = q.where(EventRow.name == name)
        if before is not None:
            q = q.where(EventRow.id < check_count(before, "before", _MAX_ID))
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return [_event(dict(r._mapping)) for r in conn.execute(q)]


def _event(row: Mapping[str, Any]) -> Event:
    detail = row["detail"]
    return Event(
        id=int(row["id"]), at=float(row["at"]), actor=str(row["actor"]), kind=str(row["kind"]),
        name=row["name"], version=row["version"],
        detail=json.loads(detail) if isinstance(detail, str) else dict(detail),
    )  # fmt: skip
