"""The ``jaxport`` command line: thin calls into the public API.

Each command catches ``JaxportError`` once, prints ``Type: message`` and exits 1; usage errors
exit 2 (click's own). Issue #4 adds the artifact commands; this module has the database ones.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import click

from jaxport._errors import JaxportError

__all__ = ["main"]


@click.group()
@click.option(
    "--registry",
    "registry_url",
    envvar="JAXPORT_REGISTRY",
    default=None,
    help="Database URL (default: $JAXPORT_REGISTRY, else the embedded SQLite registry).",
)
@click.pass_context
def main(ctx: click.Context, registry_url: str | None) -> None:
    """jaxport: archives and a registry for jax.export.Exported."""
    ctx.obj = registry_url


@main.group()
def db() -> None:
    """The registry database's schema (alembic migrations)."""


def _url(registry_url: str | None) -> str:
    from jaxport.registry._registry import default_home

    if registry_url:
        return registry_url
    home = default_home()
    os.makedirs(home, exist_ok=True)
    return f"sqlite:///{home / 'registry.db'}"


@db.command("current")
@click.pass_obj
def db_current(registry_url: str | None) -> None:
    """Print the database's schema revision and the one this jaxport writes."""
    from jaxport.registry import schema_revision

    with _errors():
        found, head = schema_revision(_url(registry_url))
        click.echo(f"database: {found or 'none'}\njaxport:  {head}")


@db.command("upgrade")
@click.pass_obj
def db_upgrade(registry_url: str | None) -> None:
    """Upgrade the database's schema to this jaxport's (back it up first)."""
    from jaxport.registry import upgrade_database

    with _errors():
        before, after = upgrade_database(_url(registry_url))
        click.echo(f"upgraded from {before or 'empty'} to {after}")


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Prints a JaxportError as ``Type: message`` and exits 1."""
    try:
        yield
    except JaxportError as e:
        click.echo(f"{type(e).__name__}: {e}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
