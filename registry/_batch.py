"""Writes whose results nobody reads, sent with a transaction's next statement.

On PostgreSQL each becomes a data-modifying CTE of that statement (``WITH w0 AS (INSERT ...),
w1 AS (DELETE ...) INSERT ... RETURNING ...``): one round trip for all of them. PostgreSQL
runs every data-modifying statement of a ``WITH`` exactly once and to completion, whether the
statement reads it or not; its sub-statements see the same snapshot (so a write must not
depend on another of the same statement, foreign keys excepted: those are checked at the
statement's end). Rows are sent as one array per column (``unnest``), so a statement has the
same text and a cached compilation whatever the number of rows, and no bound on that number.
SQLite has no data-modifying CTEs: there each write runs when it is added. A push's second
transaction on PostgreSQL sends 4 statements instead of 8 (``_publish``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    Connection,
    CursorResult,
    String,
    bindparam,
    func,
    insert,
    select,
)

from jaxport.registry import _db

__all__ = ["WriteBatch"]


class WriteBatch:
    """Writes on ``conn`` (in its transaction) that ride on its next statement.

    Add writes that do not depend on one another's rows; ``execute`` the next statement whose
    result is read (after them), and ``flush`` before the transaction commits.
    """

    def __init__(self, conn: Connection):
        self._conn = conn
        self._riding = conn.dialect.name == "postgresql"
        self._pending: list[Any] = []

    @property
    def connection(self) -> Connection:
        return self._conn

    def insert(
        self,
        table: Any,
        rows: Sequence[dict[str, Any]],
        *,
        skip_existing: Sequence[str] = (),
    ) -> None:
        """An INSERT of ``rows`` into ``table`` (a ``Table``), skipping those whose
        ``skip_existing`` columns (a unique index) already hold their values, if given; on
        SQLite at once (``_db.insert_ignoring_duplicates``, or a plain INSERT)."""
        if not rows:
            return
        if not self._riding:
            if skip_existing:
                _db.insert_ignoring_duplicates(self._conn, table, list(rows), list(skip_existing))
            else:
                self._conn.execute(insert(table), list(rows))
            return
        columns = list(rows[0])
        arrays = [
            func.unnest(bindparam(None, [r[c] for r in rows], ARRAY(_unbounded(table.c[c].type))))
            for c in columns
        ]
        statement = _db.insert_on_conflict(self._conn, table).from_select(columns, select(*arrays))
        if skip_existing:
            statement = statement.on_conflict_do_nothing(index_elements=list(skip_existing))
        self._pending.append(statement)

    def add(self, statement: Any) -> None:
        """A write whose values are bound (an UPDATE or DELETE), no RETURNING."""
        if self._riding:
            self._pending.append(statement)
        else:
            self._conn.execute(statement)

    def execute(self, statement: Any, parameters: Any = None) -> CursorResult[Any]:
        """``statement`` (with ``parameters``) and the writes added since the last one
        (before it, as a statement of their own, where ``parameters`` are several rows: an
        ``executemany`` may be sent as several statements)."""
        if isinstance(parameters, list) and len(parameters) > 1:
            self.flush()
        if self._pending:
            ctes = [w.cte(f"w{i}") for i, w in enumerate(self._pending)]
            statement = statement.add_cte(*ctes)
            self._pending = []
        return self._conn.execute(statement, parameters)

    def flush(self) -> None:
        """Sends the writes added since the last statement, as one statement."""
        if self._pending:
            *first, last = self._pending
            self._pending = first
            self.execute(last)


def _unbounded(column_type: Any) -> Any:
    """An array element type that keeps every value as it is: ``VARCHAR(n)[]`` would be an
    explicit cast, which PostgreSQL truncates to ``n`` characters; from ``VARCHAR[]`` the
    INSERT's assignment to the column refuses a longer value, as a plain INSERT does."""
    return String() if isinstance(column_type, String) else column_type
