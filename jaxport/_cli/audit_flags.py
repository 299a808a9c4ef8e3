"""``jaxport audit [REFERENCE] [--matrix | --upgrade-to X | --expiring-before D | --enqueue |
--static] ...``: the flag form of the last release, kept for one more release.

It takes every option it took, refuses the combinations it refused, and runs the subcommand
that replaces it (``audit.py``), after one line on stderr naming that subcommand. It goes in
the next release: delete this module and its ``add_command`` in ``main.py``.
"""

from __future__ import annotations

import datetime
from typing import Any

import click

from jaxport._cli import audit as modes
from jaxport._cli.common import CliContext, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["flag_form", "replacement"]

#: Options of the flag form that run an audit: meaningless with --matrix, which only reads.
_RUNS_AN_AUDIT = (
    "python", "no_store", "timeout", "force", "static", "workers", "jax_release", "tolerance",
)  # fmt: skip
#: Options of the flag form that --upgrade-to does not take.
_NOT_WITH_UPGRADE = {"force", "static", "workers", "jax_release", "tolerance"}


def replacement(
    *, matrix: bool, upgrade_to: str | None, expiring: bool, enqueue: bool, static: bool
) -> str:
    """The subcommand a flag form is now: ``jaxport audit matrix``, ``upgrade RELEASE``, ...
    (the mode the flag form ran: --enqueue first, then --expiring-before, --upgrade-to,
    --matrix, --static, else run)."""
    if enqueue:
        return "jaxport audit enqueue"
    if expiring:
        return "jaxport audit expiring YYYY-MM-DD"
    if upgrade_to:
        return f"jaxport audit upgrade {upgrade_to}"
    if matrix:
        return "jaxport audit matrix"
    return "jaxport audit static" if static else "jaxport audit run"


@click.command(modes.FLAG_FORM, hidden=True)
@click.option("--matrix", is_flag=True, help="Now: jaxport audit matrix.")
@click.option("--upgrade-to", metavar="RELEASE|PYTHON", help="Now: jaxport audit upgrade.")
@click.option(
    "--expiring-before",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    metavar="YYYY-MM-DD",
    help="Now: jaxport audit expiring.",
)
@click.option("--static", is_flag=True, help="Now: jaxport audit static.")
@click.option("--enqueue", is_flag=True, help="Now: jaxport audit enqueue.")
@modes.reference_argument
@modes.platform_option
@modes.python_option
@modes.jax_option
@modes.no_store_option
@modes.force_option
@modes.jobs_option
@modes.tolerance_option
@modes.audit_timeout_option
@json_option
@pass_ctx
def flag_form(
    ctx: CliContext,
    reference: str | None,
    platform: str | None,
    python: str | None,
    matrix: bool,
    upgrade_to: str | None,
    expiring_before: datetime.datetime | None,
    no_store: bool,
    force: bool,
    static: bool,
    workers: int,
    jax_release: str | None,
    enqueue: bool,
    tolerance: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """The flag form of ``jaxport audit [REFERENCE]`` (deprecated: see jaxport audit -h)."""
    new = replacement(
        matrix=matrix, upgrade_to=upgrade_to, expiring=expiring_before is not None,
        enqueue=enqueue, static=static,
    )  # fmt: skip
    click.echo(
        f"note: the flag form of jaxport audit goes in the next release: use `{new}`", err=True
    )
    _check_flags(click.get_current_context(), matrix, upgrade_to, python)
    if enqueue:
        if (
            python
            or matrix
            or upgrade_to
            or no_store
            or force
            or static
            or jax_release
            or (tolerance is not None)
        ):
            raise click.UsageError("--enqueue takes REFERENCE, --platform and --timeout only")
        modes.queue_audits(ctx, reference, platform, timeout, as_json)
        return
    if expiring_before is not None:
        if matrix or upgrade_to or python or jax_release:
            raise click.UsageError(
                "--expiring-before lists stored facts and runs no audit: it takes REFERENCE only"
            )
        modes.show_expiring(ctx, reference, expiring_before, as_json)
        return
    if upgrade_to:
        modes.show_upgrade(ctx, upgrade_to, reference, platform, no_store, timeout, as_json)
        return
    if matrix:
        modes.show_matrix(ctx, reference, platform, as_json)
        return
    options: dict[str, Any] = {
        "reference": reference, "platform": platform, "python": python,
        "jax_release": jax_release, "no_store": no_store, "force": force, "workers": workers,
        "tolerance": tolerance, "timeout": timeout, "as_json": as_json,
    }  # fmt: skip
    modes.run_audit(ctx, level="static" if static else "full", **options)


def _check_flags(
    ctx: click.Context, matrix: bool, upgrade_to: str | None, python: str | None
) -> None:
    """Refuses flags that cannot combine (a usage error, exit 2), rather than dropping one
    silently.

    Raises:
        click.UsageError: --matrix with --upgrade-to, or with an option that runs an audit
            (--python, --no-store, --timeout); --upgrade-to with --python (--upgrade-to
            PYTHON names the interpreter); --upgrade-to with --force, --static, --jobs or
            --jax.
    """
    given = {
        name
        for name in _RUNS_AN_AUDIT
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    }
    if matrix and upgrade_to:
        raise click.UsageError("--matrix and --upgrade-to are two reports: give one")
    if matrix and given:
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in sorted(given))
        raise click.UsageError(
            f"--matrix prints stored findings and runs no audit: leave out {flags}"
        )
    if upgrade_to and python:
        raise click.UsageError(
            "--upgrade-to PYTHON audits with that interpreter: leave out --python"
        )
    if upgrade_to and (given & _NOT_WITH_UPGRADE):
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in sorted(given & _NOT_WITH_UPGRADE))
        raise click.UsageError(
            f"--upgrade-to compares two releases' findings (auditing what is missing): "
            f"leave out {flags}"
        )
