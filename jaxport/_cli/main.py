"""The ``jaxport`` command line: each command is one call into the public API.

Exit codes: 0 ok; 1 an error (a ``JaxportError``, or an ``OSError`` such as an output file that
exists), printed once on stderr as ``Type: message`` in the CLI's words (``--force``, not
``force=True``) and never as a traceback; 2 a usage error (click's). Under ``--json`` the
result is one JSON document on stdout and an error is ``{"error": {"type", "message"}}`` on
stderr. jax, SQLAlchemy and rich are imported only by the commands that use them, so
``jaxport --help`` starts fast and the commands a registry server's client runs import
neither jax nor SQLAlchemy here (``tests/test_cli_thin_client.py``).

This module is the group, its options and its one error boundary; each command group is a module
of its own (``reads``: pull, ls, search, show, log, diff; ``writes``: push, rm, gc; ``aliases``:
alias, alias protect / unprotect; ``archive``: inspect, run, verify; ``audit`` and its flag form
``audit_flags``; ``sign``; ``tokens``; ``db``; ``server``: serve; ``queue``: audit-worker;
``rescue``; ``retain``: retain, restore; ``lineage``), sharing ``common`` (the registry the
options name, printing, the options several commands take).
"""

from __future__ import annotations

import warnings
from typing import Any

import click

from jaxport._cli import (
    aliases,
    archive,
    audit,
    audit_flags,
    bundle,
    compiled,
    db,
    lineage,
    mirror,
    oci,
    queue,
    reads,
    rescue,
    retain,
    server,
    sign,
    tokens,
    watch,
    writes,
)
from jaxport._cli.common import CONTEXT, CliContext
from jaxport._errors import JaxportError
from jaxport._version import __version__

__all__ = ["main"]

_JSON = "jaxport.json"  # ctx.meta key: --json was given (errors are then JSON too)
_ENVIRONMENT = (
    ("JAXPORT_REGISTRY", "database URL (SQLAlchemy) or server URL, as --registry"),
    ("JAXPORT_TOKEN", "a registry server's bearer token, as --token"),
    ("JAXPORT_BLOBS", "blob store: a directory or an fsspec URL, as --blobs"),
    ("JAXPORT_BLOBS_OPTIONS", "storage options of a blob store URL (s3fs's): a JSON object"),
    ("JAXPORT_HOME", "directory of the embedded default registry"),
    ("XDG_DATA_HOME", "without JAXPORT_HOME: $XDG_DATA_HOME/jaxport, else ~/.local/share/jaxport"),
)


def _notes(error: BaseException) -> None:
    """Prints on stderr what was added to ``error`` on its way (a push stopped after sending
    parts says what it left on the server)."""
    for note in getattr(error, "__notes__", ()):
        click.echo(note, err=True)


def _wants_json(args: list[str]) -> bool:
    options = args[: args.index("--")] if "--" in args else args
    return "--json" in options


class _Cli(click.Group):
    """The ``jaxport`` group: the one error boundary of every command, and the help epilog."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_JSON] = _wants_json(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from jaxport._cli.output import report_error
        from jaxport._standins import standins_allowed

        as_json = bool(ctx.meta.get(_JSON))
        try:
            with standins_allowed():  # the user's custom pytree nodes are not imported here
                return super().invoke(ctx)
        except (JaxportError, OSError) as e:
            report_error(e, as_json)
            _notes(e)
            ctx.exit(1)
        except KeyboardInterrupt as e:  # click then says "Aborted!"
            _notes(e)
            raise
        except click.ClickException as e:
            if not as_json:
                raise
            report_error(e, as_json)
            ctx.exit(e.exit_code)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from jaxport.registry._internal import RegistryConfig, safe_url

        config = RegistryConfig.from_env()
        with formatter.section("Environment"):
            formatter.write_dl(_ENVIRONMENT)
        with formatter.section("Registry used here"):
            database = config.url or f"sqlite:///{config.home / 'registry.db'}"
            database = safe_url(database)  # help text may be shared
            sqlite = database.startswith("sqlite")
            blobs = (
                safe_url(config.blobs)
                if config.blobs
                else ("blobs/ beside the database file" if sqlite else "none: set JAXPORT_BLOBS")
            )
            # Written as they are: a wrapped path or URL could not be copied.
            formatter.write(f"  database  {database}\n  blobs     {blobs}\n")


@click.group(cls=_Cli, context_settings=CONTEXT)
@click.option(
    "--registry",
    "url",
    metavar="URL",
    help="Database URL (SQLAlchemy) or a registry server's http(s):// URL. Default: "
    "$JAXPORT_REGISTRY, else the embedded SQLite one.",
)
@click.option(
    "--token",
    metavar="TOKEN",
    help="A registry server's bearer token (jxp_...). Default: $JAXPORT_TOKEN, which keeps it "
    "out of the process list and shell history.",
)
@click.option(
    "--blobs",
    metavar="DIR|URL",
    help="Blob store: a directory or an fsspec URL. Default: $JAXPORT_BLOBS, else blobs/ "
    "beside a SQLite database (a server database needs one).",
)
@click.version_option(__version__, "-V", "--version", prog_name="jaxport")
@click.pass_context
def main(ctx: click.Context, url: str | None, token: str | None, blobs: str | None) -> None:
    """jaxport: archives, a registry and compatibility audits for jax.export.Exported
    functions and for models (parameters and methods).

    References: NAME (the newest version), NAME:VERSION, NAME@ALIAS, or a digest prefix
    sha256:HEX (at least 6 hex digits, e.g. the short form the tables show).
    """
    ctx.obj = CliContext(url, blobs, token)
    warnings.showwarning = _show_warning


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """jaxport's warnings as ``Type: message`` on stderr, like its errors (no source line)."""
    from jaxport._errors import JaxportWarning

    if issubclass(category, JaxportWarning):
        click.echo(f"{category.__name__}: {message}", err=True)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning


#: Every command, by group: ``jaxport -h`` lists them in name order.
_COMMANDS: tuple[click.Command, ...] = (
    writes.push, reads.pull, reads.ls, reads.search, reads.show, reads.log_cmd, reads.diff,
    archive.inspect_cmd, archive.run, archive.verify, aliases.alias, writes.rm, writes.gc,
    audit.audit, queue.audit_worker, sign.sign, db.db, server.serve, tokens.token,
    rescue.rescue_cmd, retain.retain, retain.restore, watch.watch, lineage.lineage_cmd,
    oci.oci, bundle.bundle, mirror.mirror_cmd, compiled.compile_cmd,
)  # fmt: skip
for _command in _COMMANDS:
    main.add_command(_command)
audit.audit.add_command(audit_flags.flag_form)
