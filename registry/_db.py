"""Database engines and schema revisions; everything that differs per backend is here.

- SQLite: WAL journal, a 30 s busy timeout, foreign keys on, and write transactions opened
  with ``BEGIN IMMEDIATE`` so concurrent writers queue instead of failing to upgrade a lock.
  Safe for several processes on one machine.
- PostgreSQL (psycopg 3): version numbers are allocated under the ``models`` row's lock;
  schema creation is serialized with an advisory lock; ``gc`` takes an exclusive advisory lock
  that pushes take shared (``blob_lock``), so gc never deletes a blob between a push's check
  and its commit. On SQLite every write transaction already excludes the others. Reads run in
  autocommit (``read_connection``): no BEGIN and ROLLBACK around a one-statement read, whose
  snapshot is the statement's, as in a READ COMMITTED transaction.

Stale pooled connections (PostgreSQL): a connection is pinged at check-out only when it has
sat idle in the pool for more than ``IDLE_PING`` seconds, and replaced if the ping fails (the
pool takes another). SQLAlchemy's ``pool_pre_ping`` pings at every check-out: a round trip
before each operation of a busy registry. ``pool_recycle`` alone would not notice a server
restart, and retrying an operation after a disconnect cannot be done safely for writes (a
COMMIT whose answer was lost may have happened). What is left: a server restart less than
``IDLE_PING`` seconds after a connection's last use fails the next operation on that
connection once (``RegistryError``); SQLAlchemy then discards every pooled connection made
before the error, so later operations connect afresh.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    create_engine,
    event,
    func,
    inspect,
    literal,
    select,
    text,
)
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError

from jaxport import RegistryError, SchemaVersionError, __version__
from jaxport.migrations import HEAD, alembic_config, known_revisions
from jaxport.registry._config import safe_url
from jaxport.registry._models import Base
from jaxport.registry._queue_schema import install_queue_schema

__all__ = [
    "IDLE_PING",
    "blob_lock",
    "create_registry_engine",
    "current_revision",
    "ensure_schema",
    "insert_ignoring_duplicates",
    "insert_on_conflict",
    "key_lock",
    "read_connection",
    "safe_url",
    "schema_revision",
    "schema_writer",
    "shared_blob_lock",
    "translating_db_errors",
    "upgrade",
    "upgrade_database",
    "write_connection",
    "write_transaction",
]

_WRITE = "jaxport_write"
_PG_SCHEMA_LOCK = 0x6A78706F  # "jxpo"
_PG_BLOB_LOCK = 0x6A78626C  # "jxbl"
#: ``key_lock``'s class: PostgreSQL's two-integer advisory keys, apart from the bigint ones.
_PG_KEY_LOCKS = 0x6A786B79  # "jxky"
#: Seconds a pooled PostgreSQL connection may sit idle and still be used without a ping.
IDLE_PING = 30.0
_IDLE_SINCE = "jaxport_idle_since"


def create_registry_engine(url: str) -> Engine:
    """An Engine for ``url`` with jaxport's per-backend settings.

    Raises:
        RegistryError: a malformed URL, or its database driver is not installed.
    """
    try:
        return _create_engine(url)
    except ImportError as e:
        raise RegistryError(
            f"the database driver for {url.split(':', 1)[0]} is not installed ({e}); "
            "for PostgreSQL: pip install 'jaxport[postgres]'"
        ) from None
    except (SQLAlchemyError, ValueError) as e:
        # SQLAlchemy's messages quote the URL: never show it, it may hold a password.
        raise RegistryError(f"bad database URL {safe_url(url)!r}: {type(e).__name__}") from None


def _create_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    engine = create_engine(url)
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Pings a pooled connection at check-out if it sat idle over ``IDLE_PING`` seconds; a
    failed ping makes the pool take another connection (see the module docstring)."""

    def checkin(dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None or time.monotonic() - since <= IDLE_PING:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as e:
            raise DisconnectionError(f"idle connection lost: {type(e).__name__}") from e
        if not alive:
            raise DisconnectionError("idle connection lost")

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    immediate = connection.get_execution_options().get(_WRITE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextlib.contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a write transaction: committed on success, rolled back on any error."""
    with write_connection(engine) as conn, conn.begin():
        yield conn


@contextlib.contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """One connection (one check-out) for several write transactions, each ``conn.begin()``
    (SQLite: ``BEGIN IMMEDIATE``)."""
    with engine.connect().execution_options(**{_WRITE: True}) as conn:
        yield conn


@contextlib.contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A connection for reads: autocommit on PostgreSQL (each statement its own snapshot, as
    in READ COMMITTED, without BEGIN and ROLLBACK round trips); on SQLite a read transaction
    (one snapshot for all its statements)."""
    conn = engine.connect()
    with conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn


def blob_lock(conn: Connection, *, exclusive: bool) -> None:
    """Takes the blob lock for the rest of ``conn``'s transaction: shared by pushes registering
    or committing digests, exclusive for ``gc`` (PostgreSQL; SQLite's write transactions
    already exclude each other)."""
    if conn.dialect.name == "postgresql":
        fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        conn.execute(text(f"SELECT {fn}(:k)"), {"k": _PG_BLOB_LOCK})


def key_lock(conn: Connection, key: str) -> None:
    """Takes a lock on ``key`` (a row's unique key as text) for the rest of ``conn``'s
    transaction, so that two writers of one key queue: the second reads what the first
    committed instead of both inserting and one failing on the unique constraint. PostgreSQL:
    an advisory lock on 32 bits of ``key``'s sha256 (two keys of one hash only wait for each
    other); SQLite's write transactions already exclude each other."""
    if conn.dialect.name == "postgresql":
        import hashlib

        number = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big", signed=True)
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": _PG_KEY_LOCKS, "k": number}
        )


def shared_blob_lock() -> Any:
    """The shared blob lock as a one-row SELECT, for a statement that takes it first, in the
    same round trip (PostgreSQL; ``blob_lock``)."""
    lock = func.pg_advisory_xact_lock_shared(literal(_PG_BLOB_LOCK, BigInteger))
    return select(lock.label("granted"))


#: A push's pending rows on PostgreSQL in one statement, its own transaction: the shared blob
#: lock (``lock`` runs first: the INSERT reads from it), the rows, and the digests that
#: already have a ``blobs`` row. Its snapshot is taken before the lock is granted, so a gc
#: that commits meanwhile may leave a digest in the answer that it just deleted: the answer
#: only tells a repair from a first write (``_publish``), and the version's own transaction
#: inserts its blob rows whatever it says. ``synchronous_commit`` is off for this transaction
#: alone: other sessions (gc) see the rows at commit either way; only a crash of the database
#: before its WAL flush loses them, and the push they guard dies with it.
_PG_PENDING = text(
    "WITH lock AS (SELECT pg_advisory_xact_lock_shared(:k) AS granted,"
    " set_config('synchronous_commit', 'off', true) AS durability),"
    " pending AS (INSERT INTO pending_blobs (digest, token, host, pid, created_at)"
    " SELECT d, :token, :host, :pid, :now FROM lock, unnest(CAST(:digests AS varchar[])) AS d)"
    " SELECT digest FROM blobs WHERE digest = ANY(CAST(:digests AS varchar[]))"
)


def register_pending_at_once(
    conn: Connection, digests: list[str], *, token: str, host: str, pid: int, now: float
) -> set[str]:
    """Step 1 of the blob protocol on PostgreSQL: ``_PG_PENDING`` on ``conn`` in autocommit
    (one round trip instead of BEGIN, three statements and COMMIT); returns the digests that
    already have a ``blobs`` row. ``conn`` is back in its own isolation level after."""
    level = conn.default_isolation_level
    conn.execution_options(isolation_level="AUTOCOMMIT")
    try:
        params = {"k": _PG_BLOB_LOCK, "token": token, "host": host, "pid": pid, "now": now,
                  "digests": digests}  # fmt: skip
        with conn.begin():  # SQLAlchemy's own bookkeeping: psycopg sends no BEGIN or COMMIT
            return set(conn.execute(_PG_PENDING, params).scalars())
    finally:
        conn.execution_options(isolation_level=level)


@contextlib.contextmanager
def translating_db_errors() -> Iterator[None]:
    """Turns SQLAlchemy's errors into ``RegistryError`` (jaxport's own pass through)."""
    try:
        yield
    except SQLAlchemyError as e:
        # The statement and parameters are left out: they may hold user data or credentials.
        detail = str(getattr(e, "orig", None) or (e.args[0] if e.args else e)).splitlines()
        raise RegistryError(
            f"database error: {type(e).__name__}: {detail[0] if detail else ''}"
        ) from e


def insert_ignoring_duplicates(
    conn: Connection, table: Any, rows: list[dict[str, Any]], keys: list[str]
) -> None:
    """INSERT ``rows``, skipping those whose ``keys`` already exist (per-backend syntax)."""
    if not rows:
        return
    if conn.dialect.name in ("postgresql", "sqlite"):
        ignoring = insert_on_conflict(conn, table).on_conflict_do_nothing(index_elements=keys)
        conn.execute(ignoring, rows)
    else:
        from sqlalchemy import insert

        conn.execute(insert(table).prefix_with("IGNORE"), rows)


def insert_on_conflict(conn: Connection, table: Any) -> Any:
    """The backend's INSERT into ``table``, with ``on_conflict_do_nothing`` and
    ``on_conflict_do_update`` (PostgreSQL, SQLite).

    Raises:
        RegistryError: another database.
    """
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
    raise RegistryError(f"jaxport supports SQLite and PostgreSQL, not {conn.dialect.name}")


def current_revision(conn: Connection) -> str | None:
    """The database's alembic revision, or None for a database without one (read with plain
    SQL, so opening a registry does not import alembic)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    revisions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return revisions[0] if len(revisions) == 1 else None


def ensure_schema(engine: Engine, *, upgrade_db: bool) -> bool:
    """Creates the schema in an empty database; checks the revision of an existing one.

    Returns:
        Whether this jaxport may write to the database (False: it is newer than this jaxport).

    Raises:
        SchemaVersionError: the database is older than this jaxport and ``upgrade_db`` is False.
    """
    with engine.connect() as conn:  # the usual case, without a write lock
        if current_revision(conn) == HEAD:
            return True
    from alembic import command

    with write_transaction(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
        revision = current_revision(conn)
        if revision is None and not inspect(conn).has_table("models"):
            Base.metadata.create_all(conn)
            command.stamp(alembic_config(conn, Base.metadata), HEAD)
            _record_writer(conn)
            return True
        if revision == HEAD:
            return True
        if revision in known_revisions():
            if not upgrade_db:
                raise SchemaVersionError(
                    f"the registry database is at schema revision {revision}, this jaxport "
                    f"uses {HEAD}: upgrade it with Registry(..., upgrade=True) or "
                    "`jaxport db upgrade` (back it up first)",
                    found=revision,
                    expected=HEAD,
                )
            command.upgrade(alembic_config(conn, Base.metadata), HEAD)
            _record_writer(conn)
            return True
        return False


def schema_writer(conn: Connection) -> str | None:
    """The jaxport release that last created or upgraded the schema, if recorded."""
    if not inspect(conn).has_table("registry_info"):
        return None
    return conn.execute(
        text("SELECT value FROM registry_info WHERE key = 'jaxport_version'")
    ).scalar_one_or_none()


def _record_writer(conn: Connection) -> None:
    conn.execute(text("DELETE FROM registry_info WHERE key = 'jaxport_version'"))
    conn.execute(
        text("INSERT INTO registry_info (key, value) VALUES ('jaxport_version', :v)"),
        {"v": __version__},
    )


def upgrade(engine: Engine) -> str | None:
    """Upgrades the database to this jaxport's head revision; returns the revision it had. On
    PostgreSQL with procrastinate installed, also installs or upgrades the audit queue's tables.

    Raises:
        SchemaVersionError: the database is newer than this jaxport (a revision it does not
            know): only a newer jaxport can write to it.
    """
    from alembic import command

    with write_transaction(engine) as conn:
        before = current_revision(conn)
        if before is not None and before not in known_revisions():
            writer = schema_writer(conn)
            raise SchemaVersionError(
                f"the registry database is at schema revision {before}, newer than this "
                f"jaxport's {HEAD}: use jaxport {writer or 'newer'} or newer, not db upgrade",
                found=before,
                expected=HEAD,
            )
        command.upgrade(alembic_config(conn, Base.metadata), HEAD)
        _record_writer(conn)
        install_queue_schema(conn)  # the audit queue's tables (PostgreSQL, jaxport[queue])
        return before


def schema_revision(url: str) -> tuple[str | None, str]:
    """``(the database's alembic revision or None, the revision this jaxport writes)``.

    Raises:
        RegistryError: the database cannot be reached.
    """
    engine = create_registry_engine(url)
    try:
        with translating_db_errors(), engine.connect() as conn:
            return current_revision(conn), HEAD
    finally:
        engine.dispose()


def upgrade_database(url: str) -> tuple[str | None, str]:
    """Upgrades a registry database to this jaxport's schema: ``(revision before, after)``.

    An empty database is created at head.

    Raises:
        RegistryError: the database cannot be reached.
    """
    engine = create_registry_engine(url)
    try:
        with translating_db_errors():
            return upgrade(engine), HEAD
    finally:
        engine.dispose()
