"""The audit queue's tables: procrastinate's schema, kept in the registry's PostgreSQL database.

``jaxport db upgrade`` (``upgrade_database``) installs it after the registry's own migrations,
when procrastinate is installed (``jaxport[queue]``): the whole ``schema.sql`` of the installed
procrastinate on a database without it, else the procrastinate migrations released after the
version recorded in ``registry_info`` (``procrastinate_version``). The tables are created in the
connection's ``search_path`` schema, beside the registry's. SQLite registries have no queue.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import Connection, inspect, text

from jaxport import RegistryError, UnsupportedFeatureError

__all__ = ["check_queue_schema", "install_queue_schema", "procrastinate_version"]

_KEY = "procrastinate_version"
_JOBS = "procrastinate_jobs"
_MIGRATION = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)_[0-9]+_.*\.sql")


def procrastinate_version() -> str | None:
    """The installed procrastinate's version, or None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("procrastinate")
    except metadata.PackageNotFoundError:
        return None


def install_queue_schema(conn: Connection) -> str | None:
    """Installs or upgrades procrastinate's schema on a PostgreSQL registry, in ``conn``'s
    transaction (which the caller holds under the schema lock).

    Returns:
        What was done (``"procrastinate 3.10.0 schema installed"``), or None: not PostgreSQL,
        procrastinate not installed, or the schema already at the installed version.
    """
    version = procrastinate_version()
    if conn.dialect.name != "postgresql" or version is None:
        return None
    from procrastinate.schema import SchemaManager

    recorded = _recorded(conn)
    if not inspect(conn).has_table(_JOBS):
        _run_script(conn, SchemaManager.get_schema())
        done = f"procrastinate {version} schema installed"
    elif recorded is not None and _release(recorded) < _release(version):
        scripts = _migrations_after(Path(SchemaManager.get_migrations_path()), recorded, version)
        for script in scripts:
            _run_script(conn, script.read_text(encoding="utf-8"))
        done = f"procrastinate schema upgraded from {recorded} to {version}"
    else:
        return None
    conn.execute(text("DELETE FROM registry_info WHERE key = :k"), {"k": _KEY})
    conn.execute(
        text("INSERT INTO registry_info (key, value) VALUES (:k, :v)"), {"k": _KEY, "v": version}
    )
    return done


def check_queue_schema(conn: Connection) -> None:
    """Checks that this registry can hold the audit queue.

    Raises:
        UnsupportedFeatureError: the registry is not PostgreSQL (SQLite audits in process:
            ``jaxport audit``), or procrastinate is not installed (``jaxport[queue]``).
        RegistryError: the queue's tables are missing (``jaxport db upgrade`` installs them).
    """
    if conn.dialect.name != "postgresql":
        raise UnsupportedFeatureError(
            f"the audit queue needs a PostgreSQL registry, this one is {conn.dialect.name}: "
            "run the work in this process instead (`jaxport audit run`, or `jaxport rescue` "
            "without --enqueue)"
        )
    if procrastinate_version() is None:
        raise UnsupportedFeatureError(
            "the audit queue needs procrastinate: pip install 'jaxport[queue]'"
        )
    if not inspect(conn).has_table(_JOBS):
        raise RegistryError(
            "the registry database has no audit queue yet: run `jaxport db upgrade` "
            "(with jaxport[queue] installed) to install it"
        )


def _recorded(conn: Connection) -> str | None:
    row = conn.execute(text("SELECT value FROM registry_info WHERE key = :k"), {"k": _KEY})
    return row.scalar_one_or_none()


def _release(version: str) -> tuple[int, ...]:
    """``"3.10.0"`` -> ``(3, 10, 0)``; a pre-release suffix is ignored."""
    return tuple(int(n) for n in re.findall(r"[0-9]+", version)[:3])


def _migrations_after(folder: Path, recorded: str, version: str) -> list[Path]:
    """procrastinate's migration scripts released after ``recorded``, up to ``version``, in
    order (``03.04.00_01_pre_....sql``: the release, then the step)."""
    low, high = _release(recorded), _release(version)
    chosen = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION.fullmatch(path.name)
        if match and low < tuple(int(g) for g in match.groups()) <= high:
            chosen.append(path)
    return chosen


def _run_script(conn: Connection, script: str) -> None:
    """Runs a script of several statements (psycopg's simple query protocol, no parameters)."""
    conn.connection.driver_connection.execute(script)  # type: ignore[union-attr]
