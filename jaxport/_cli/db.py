"""``jaxport db current|upgrade``: the registry database's schema (alembic migrations)."""

from __future__ import annotations

import click

from jaxport._cli.common import CONTEXT, CliContext, emit, pass_ctx, require_database
from jaxport._cli.output import json_option

__all__ = ["db"]


@click.group(context_settings=CONTEXT)
def db() -> None:
    """The registry database's schema (alembic migrations)."""


def _url(ctx: CliContext, *, create: bool = False) -> str:
    from jaxport.registry._internal import RegistryConfig

    url = ctx.url or RegistryConfig.from_env().database_url()
    if not create:
        require_database(url)
    return url


@db.command("current")
@json_option
@pass_ctx
def db_current(ctx: CliContext, as_json: bool) -> None:
    """Print the database's schema revision and the one this jaxport writes."""
    from jaxport.migrations import HEAD
    from jaxport.registry._internal import (
        RegistryConfig,
        check_sqlite_directory,
        schema_revision,
        sqlite_file,
    )

    config = RegistryConfig.from_env()
    url = ctx.url or config.database_url()
    path = sqlite_file(url)
    if path is not None and not path.exists():  # a read makes no file: there is no schema
        if url != config.default_database_url():
            check_sqlite_directory(url)  # a missing directory is an error, named
        found, head = None, HEAD
    else:
        found, head = schema_revision(url)
    emit(
        as_json,
        {"database": found, "jaxport": head},
        lambda d: f"database: {d['database'] or 'none'}\njaxport:  {d['jaxport']}",
    )


@db.command("upgrade")
@json_option
@pass_ctx
def db_upgrade(ctx: CliContext, as_json: bool) -> None:
    """Upgrade the database's schema to this jaxport's (back it up first); a database already
    at it is said to be so (``already at REVISION (head)``)."""
    from jaxport.registry._internal import upgrade_database

    before, after = upgrade_database(_url(ctx, create=True))
    emit(as_json, {"before": before, "after": after}, _upgraded)


def _upgraded(done: dict[str, str | None]) -> str:
    """What ``db upgrade`` did, in words."""
    if done["before"] == done["after"]:
        return f"already at {done['after']} (head): nothing to upgrade"
    return f"upgraded from {done['before'] or 'empty'} to {done['after']}"
