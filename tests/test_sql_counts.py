"""How many SQL statements each registry operation sends, on SQLite and PostgreSQL: upper
bounds, so that an N+1 pattern (a statement per version or variant of a page) cannot come back
unnoticed, and so that a change that adds a round trip to a hot path is a choice, made here.

Statements are counted with SQLAlchemy's ``before_cursor_execute`` event on the registry's
engine (``Registry._backend.engine``), leaving out SQLite's ``BEGIN`` (jaxport sends it
itself, to open writes with ``BEGIN IMMEDIATE``; psycopg sends PostgreSQL's);
``pg_advisory_xact_lock_shared``
(the blob lock a push takes on PostgreSQL) is counted. Check-outs from the pool, commits and
pings (``registry/_db.py``: only a connection idle for ``IDLE_PING`` seconds is pinged) are
counted too. Measured before these bounds: listing a page of 50 versions took 103 statements,
a push 16 statements, 3 check-outs and 3 pings on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from sqlalchemy import Engine, event

import jaxport
from _helpers import add_versions
from jaxport.registry import _db

#: The versions of ``big``: more than two pages of 50.
N_VERSIONS = 120


@dataclasses.dataclass
class Counts:
    statements: list[str] = dataclasses.field(default_factory=list)
    checkouts: int = 0
    commits: int = 0
    pings: int = 0

    def __len__(self) -> int:
        return len(self.statements)


@contextlib.contextmanager
def counted(engine: Engine) -> Iterator[Counts]:
    """Counts what ``engine`` sends while the block runs."""
    counts = Counts()

    def on_statement(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if not statement.startswith("BEGIN"):
            counts.statements.append(statement)

    def on_checkout(*args: Any) -> None:
        counts.checkouts += 1

    def on_commit(conn: Any) -> None:
        counts.commits += 1

    ping = engine.dialect.do_ping

    def counting_ping(dbapi_connection: Any) -> bool:
        counts.pings += 1
        return ping(dbapi_connection)

    listeners = [
        (engine, "before_cursor_execute", on_statement),
        (engine, "checkout", on_checkout),
        (engine, "commit", on_commit),
    ]
    for target, name, fn in listeners:
        event.listen(target, name, fn)
    engine.dialect.do_ping = counting_ping  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        for target, name, fn in listeners:
            event.remove(target, name, fn)
        del engine.dialect.do_ping


def _exp(fun=jnp.sin, platforms=None):
    return jax.export.export(jax.jit(fun), platforms=platforms)(
        jax.ShapeDtypeStruct((4,), jnp.float32)
    )


@pytest.fixture
def count(registry):
    """``with count() as c:`` counts what the registry sends in the block."""
    return lambda: counted(registry._backend.engine)


@pytest.fixture
def filled(registry):
    """``m`` (2 versions, ``m@prod`` -> 1) and ``big`` (``N_VERSIONS`` versions)."""
    registry.push(_exp(jnp.sin), "m", aliases=["prod"])
    registry.push(_exp(jnp.cos), "m")
    registry.push(_exp(jnp.tan), "big")
    add_versions(registry, "big", N_VERSIONS - 1)
    return registry


def test_push_is_one_check_out_and_does_not_grow_with_variants(registry, count):
    with count() as first:
        registry.push(_exp(jnp.sin), "p", aliases=["prod"])
    with count() as one:
        registry.push(_exp(jnp.cos), "p")
    with count() as three:
        pushed = registry.push([_exp(jnp.exp, (p,)) for p in ("cpu", "tpu", "cuda")], "p")
    with count() as again:
        assert not registry.push(_exp(jnp.cos), "p").created
    # pending rows (one statement: SQLite's returns which digests have blob rows, PostgreSQL's
    # also takes the blob lock), then the version: SQLite 7 (upsert, blobs, version or nothing
    # where its content is one already, variants, platforms, pending rows, its event);
    # PostgreSQL 4 (the blob lock rides on the upsert, the blobs on the version, the platforms
    # and pending rows on the event: _batch)
    assert len(one) == (5 if registry._backend.engine.dialect.name == "postgresql" else 8), (
        one.statements
    )
    assert len(three) == len(one), three.statements  # one multi-row INSERT per table
    assert len(first) <= len(one) + 4, first.statements  # moving an alias
    # no event, nothing written: the version's number given back, the version read
    assert len(again) == len(one) + (
        2 if registry._backend.engine.dialect.name == "postgresql" else 0
    ), again.statements
    for c in (first, one, three, again):
        assert (c.checkouts, c.commits, c.pings) == (1, 2, 0)
    # what push returns, built from the rows it inserted, is what a read gives
    read = registry.get(f"p:{pushed.version}")
    assert (pushed.variants, pushed.metadata, pushed.created_at) == (
        read.variants,
        read.metadata,
        read.created_at,
    )
    assert [v.platforms for v in pushed.variants] == [("cpu",), ("tpu",), ("cuda",)]


@pytest.mark.parametrize(
    "reference", ["m", "m:1", "m@prod", "big", f"big:{N_VERSIONS // 2}"], ids=str
)
def test_get_and_resolve_are_one_statement(filled, count, reference):
    with count() as got:
        ref = filled.get(reference)
    with count() as resolved:
        resolution = filled.resolve(reference, platform="cpu")
    assert resolution.chosen.version == ref.version
    for c in (got, resolved):
        assert (len(c), c.checkouts, c.commits, c.pings) == (1, 1, 0, 0), c.statements


def test_get_by_digest_is_two_statements(filled, count):
    digest = filled.get("m:2").digests[0]
    with count() as c:
        assert filled.get(f"sha256:{digest[:12]}").version == 2
    assert len(c) == 2, c.statements


def test_resolve_past_the_newest_variants_is_a_few_statements(filled, count):
    """``big``'s newest versions run on tpu only: the cpu one lies past the 101 variants that
    the first statement reads."""
    add_versions(filled, "big", 150, platforms=("tpu",))
    with count() as c:
        assert filled.resolve("big", platform="cpu").chosen.version == N_VERSIONS
    assert len(c) <= 5, c.statements


@pytest.mark.parametrize("limit", [10, 50, 100])
def test_a_page_of_versions_is_one_statement_whatever_its_size(filled, count, limit):
    with count() as c:
        page = filled.list("big", limit=limit)
    with count() as after:
        nxt = filled.list("big", limit=limit, after=("big", page[-1].version))
    with count() as everything:
        filled.list(limit=limit, after=("big", N_VERSIONS - 5))
    assert [r.version for r in page + nxt] == list(range(1, 2 * limit + 1))[:N_VERSIONS]
    for c_ in (c, after, everything):
        assert (len(c_), c_.checkouts, c_.commits) == (1, 1, 0), c_.statements


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"platform": "cpu"},
        {"platform": "rocm"},  # matches nothing
        {"name": "big"},
        {"name": "big", "platform": "tpu"},  # matches nothing
        {"fun_name": "tan"},
        {"fun_name": "nothing"},
        {"jax_version": "0.0"},
        {"nr_devices": 8, "platform": "cpu", "shape_polymorphic": False},
    ],
    ids=str,
)
def test_search_is_one_statement_with_or_without_matches(filled, count, filters):
    with count() as c:
        first = filled.search(**filters, limit=50)
    with count() as after:
        rest = filled.search(**filters, limit=50, after=first[-1].variant_id if first else 1)
    for c_, found in ((c, first), (after, rest)):
        # a name is looked up again only when nothing matched (is it unknown?)
        most = 2 if "name" in filters and not found else 1
        assert len(c_) <= most and (c_.checkouts, c_.commits) == (1, 0), c_.statements


def test_an_unknown_name_is_told_in_a_few_statements(filled, count):
    for read in (
        lambda: filled.list("nope"),
        lambda: filled.search(name="nope"),
        lambda: filled.get("nope"),
        lambda: filled.resolve("nope", platform="cpu"),
    ):
        with count() as c, pytest.raises(jaxport.NotFoundError, match="names: big, m"):
            read()
        assert len(c) <= 4, c.statements


def test_alias_move_and_names(filled, count):
    with count() as moved:
        filled.alias("m", "prod", 2)
    with count() as names:
        assert filled.names() == ["big", "m"]
    # one SELECT, one upsert, its history row, its event, in one transaction
    assert len(moved) <= 5 and (moved.checkouts, moved.commits) == (1, 1), moved.statements
    assert (len(names), names.checkouts) == (1, 1), names.statements


def test_an_idle_postgresql_connection_is_pinged_and_replaced_if_dead(registry, count, monkeypatch):
    """Only a connection idle over ``IDLE_PING`` seconds is pinged (none in the tests above);
    one whose server process is gone is replaced before the operation runs."""
    if registry._backend.engine.dialect.name != "postgresql":
        pytest.skip("SQLite connections are local files: never pinged")
    import sqlalchemy as sa

    assert not registry._backend.engine.pool._pre_ping
    registry.push(_exp(), "idle")
    registry._backend.engine.dispose()  # a pool of one connection from here on
    with registry._backend.engine.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    monkeypatch.setattr(_db, "IDLE_PING", -1.0)
    with count() as c:
        assert registry.get("idle").version == 1
    assert (c.checkouts, c.pings) == (1, 1)
    admin = sa.create_engine(registry._backend.engine.url)
    with admin.connect() as conn:  # the pooled connection's server process ends
        conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
    admin.dispose()
    with count() as c:
        assert registry.get("idle").version == 1  # no error: another connection was taken
    assert c.pings == 1
    monkeypatch.setattr(_db, "IDLE_PING", 30.0)
    with count() as c:
        assert registry.get("idle").version == 1
    assert c.pings == 0
