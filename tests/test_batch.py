"""``WriteBatch`` (``registry/_batch.py``), on SQLite and PostgreSQL: writes that ride on the
next statement land as plain statements would, in one statement on PostgreSQL, whatever the
number of rows (one array per column: no bound parameter limit)."""

from __future__ import annotations

import sqlalchemy as sa

from jaxport.registry._batch import WriteBatch
from jaxport.registry._models import BlobRow, EventRow, PendingBlobRow


def _statements(engine):
    """The statements `engine` sends from now on (not SQLite's BEGIN)."""
    seen = []
    sa.event.listen(
        engine,
        "before_cursor_execute",
        lambda *a: None if a[2].startswith("BEGIN") else seen.append(a[2]),
    )
    return seen


def test_writes_ride_on_the_next_statement(registry):
    engine = registry._backend.engine
    rows = [{"digest": f"{i:064x}", "size": i, "created_at": 1.0} for i in range(30_000)]
    pending = [{"digest": "f" * 64, "token": t, "host": "h", "pid": 1, "created_at": 1.0}
               for t in ("keep", "drop")]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(sa.insert(PendingBlobRow), pending)
    seen = _statements(engine)
    with engine.begin() as conn:
        writes = WriteBatch(conn)
        writes.insert(BlobRow.__table__, rows[:20_000], skip_existing=["digest"])
        writes.insert(BlobRow.__table__, rows[10_000:], skip_existing=["digest"])  # overlaps
        writes.insert(BlobRow.__table__, [])  # nothing
        writes.add(sa.delete(PendingBlobRow).where(PendingBlobRow.token == "drop"))
        event = {"at": 1.0, "actor": "a", "kind": "k", "name": None, "version": None,
                 "detail": "{}"}  # fmt: skip
        event_id = writes.execute(sa.insert(EventRow).returning(EventRow.id), event).scalar_one()
        writes.flush()  # nothing left
    riding = engine.dialect.name == "postgresql"
    assert len(seen) == (1 if riding else 4), seen
    with engine.connect() as conn:
        stored = conn.execute(sa.select(sa.func.count(), sa.func.sum(BlobRow.size))).one()
        tokens = conn.execute(sa.select(PendingBlobRow.token)).scalars().all()
        assert conn.execute(sa.select(EventRow.id)).scalars().all() == [event_id]
    assert tuple(stored) == (30_000, sum(range(30_000)))
    assert tokens == ["keep"]


def test_flush_sends_what_is_left_as_one_statement(registry):
    engine = registry._backend.engine
    seen = _statements(engine)
    with engine.begin() as conn:
        writes = WriteBatch(conn)
        writes.insert(BlobRow.__table__, [{"digest": "a" * 64, "size": 1, "created_at": 1.0}])
        writes.add(sa.delete(PendingBlobRow).where(PendingBlobRow.token == "none"))
        writes.insert(BlobRow.__table__, [{"digest": "b" * 64, "size": 2, "created_at": 1.0}])
        writes.flush()
    assert len(seen) == (1 if engine.dialect.name == "postgresql" else 3), seen
    with engine.connect() as conn:
        assert conn.execute(sa.select(BlobRow.digest).order_by(BlobRow.digest)).scalars().all() == [
            "a" * 64, "b" * 64,
        ]  # fmt: skip


def test_a_value_too_long_for_its_column_is_never_cut(registry):
    """PostgreSQL truncates a value cast explicitly to ``VARCHAR(n)``: the rows' arrays are not
    cast to their column's length, so a longer value is refused, as a plain INSERT refuses it
    (SQLite does not enforce lengths: it keeps the whole value)."""
    engine = registry._backend.engine
    long_token = "t" * 40  # pending_blobs.token is VARCHAR(32)
    row = {"digest": "f" * 64, "token": long_token, "host": "h", "pid": 1, "created_at": 1.0}
    try:
        with engine.begin() as conn:
            writes = WriteBatch(conn)
            writes.insert(PendingBlobRow.__table__, [row])
            writes.flush()
    except sa.exc.DBAPIError:
        assert engine.dialect.name == "postgresql"
        stored = []
    else:
        with engine.connect() as conn:
            stored = conn.execute(sa.select(PendingBlobRow.token)).scalars().all()
    assert stored == ([] if engine.dialect.name == "postgresql" else [long_token])
