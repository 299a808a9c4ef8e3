"""``jaxport audit run|static|matrix|upgrade|expiring|forecast|enqueue``: compatibility audits
and the reports of their stored findings (``forecast``: ``render_watch.py``).

Each mode of the former flag form is a subcommand (``audit --matrix`` is ``audit matrix``,
``--upgrade-to R`` is ``upgrade R``, ``--expiring-before D`` is ``expiring D``, ``--enqueue``
is ``enqueue``, ``--static`` is ``static``, no flag is ``run``). ``jaxport audit`` without a
subcommand still runs the flag form for one release (``audit_flags.py``, the group's hidden
command ``FLAG_FORM``), with a one-line note on stderr naming the subcommand.

Each option is declared once here and given to every subcommand that takes it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, TypeVar

import click

from jaxport._cli.common import CONTEXT, CliContext, emit, pass_ctx, timeout_option
from jaxport._cli.output import json_option

__all__ = [
    "FLAG_FORM",
    "audit",
    "enqueue",
    "expiring",
    "matrix",
    "queue_audits",
    "run",
    "run_audit",
    "show_expiring",
    "show_matrix",
    "show_upgrade",
    "static",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The hidden command that ``jaxport audit`` without a subcommand runs (the flag form); not a
#: registry name (those start with a letter or digit), so no reference is mistaken for it.
FLAG_FORM = "_flags"

reference_argument = click.argument("reference", required=False)
platform_option = click.option(
    "--platform",
    help="Audit only for this platform (cpu, cuda, rocm, tpu, gpu; default: every platform "
    "each variant was exported for; those without a device here are not-run).",
)
python_option = click.option(
    "--python",
    type=click.Path(exists=True, dir_okay=False),
    help="Audit with the jax of another environment (an interpreter with jaxport installed).",
)
jax_option = click.option(
    "--jax",
    "jax_release",
    metavar="RELEASE",
    help="Audit with this jax release, in an environment made once under "
    "$JAXPORT_HOME/envs/jax-RELEASE (minutes the first time).",
)
no_store_option = click.option("--no-store", is_flag=True, help="Do not record the findings.")
force_option = click.option(
    "--force", is_flag=True, help="Measure again even where an identical finding is stored."
)
jobs_option = click.option(
    "-j",
    "--jobs",
    "workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Worker processes auditing at once (each imports jax once).",
)
tolerance_option = click.option(
    "--tolerance",
    metavar="TOL|rtol=R,atol=A",
    help="Compare golden examples with this tolerance instead of the stored one (push's "
    "tolerance, else the rule per dtype and output magnitude); its findings are kept apart.",
)
audit_timeout_option = timeout_option(
    "Seconds one variant's audit may take before it is killed (a crash)."
)


def _options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """The ``decorators`` applied in the order written (the first is the outermost)."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


#: What ``audit run`` and ``audit static`` take (``run`` also --tolerance).
_AUDITING = (
    reference_argument, platform_option, python_option, jax_option, no_store_option,
    force_option, jobs_option,
)  # fmt: skip


class _AuditGroup(click.Group):
    """``jaxport audit``: a subcommand, or else (``jaxport audit [REFERENCE] [--flags]``) the
    flag form, for one more release."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        help_names = set(ctx.help_option_names)
        if args and (args[0] in self.commands or args[0] in help_names):
            return super().parse_args(ctx, args)
        return super().parse_args(ctx, [FLAG_FORM, *args])


@click.group(cls=_AuditGroup, context_settings=CONTEXT)
def audit() -> None:
    """Audit artifacts (load, compile, run examples), or report stored findings.

    REFERENCE names what to audit (default: everything; an unknown or deleted name is an
    error). Statuses: ok, incompatible, compile-error, mismatch, error, crash, not-run (could
    not be measured here: no such device, too few devices), unknown (static: nothing recorded
    refuses it; never ok). run and static exit 1 when a measured status is not ok (upgrade:
    when one would break); not-run and unknown alone exit 0. Incremental: a finding stored
    for the same archive, check level, jax, jaxlib, platform and device count is reused
    (--force: measure again). A progress bar is drawn on stderr when it is a terminal (never
    with --json). Every report says which jax and jaxlib made it, and when (UTC).

    The flag form of the last release (jaxport audit [REFERENCE] --matrix, --upgrade-to,
    --expiring-before, --enqueue, --static) still works, with a note naming the subcommand;
    it goes in the next release.
    """


@audit.command("run")
@_options(*_AUDITING, tolerance_option, audit_timeout_option, json_option)
@pass_ctx
def run(ctx: CliContext, /, **options: Any) -> None:
    """Audit REFERENCE (default: every variant): load, compile and run its golden examples
    under this jax (or --python's, --jax's), for each platform."""
    run_audit(ctx, level="full", **options)


@audit.command("static")
@_options(*_AUDITING, audit_timeout_option, json_option)
@pass_ctx
def static(ctx: CliContext, /, **options: Any) -> None:
    """Check REFERENCE (default: every variant) statically: only the facts recorded at push
    against this jax's capabilities, nothing compiled (seconds for 10,000 variants):
    incompatible where they decide a refusal, else unknown (never ok)."""
    run_audit(ctx, level="static", tolerance=None, **options)


@audit.command("matrix")
@_options(reference_argument, platform_option, json_option)
@pass_ctx
def matrix(ctx: CliContext, reference: str | None, platform: str | None, as_json: bool) -> None:
    """Print stored findings: variants x (jax release, platform), of REFERENCE (a name, or one
    version) or of every variant. Runs no audit."""
    show_matrix(ctx, reference, platform, as_json)


@audit.command("upgrade")
@click.argument("target", metavar="RELEASE|PYTHON")
@_options(reference_argument, platform_option, no_store_option, audit_timeout_option)
@json_option
@pass_ctx
def upgrade(
    ctx: CliContext, target: str, reference: str | None, platform: str | None, no_store: bool,
    timeout: float, as_json: bool,
) -> None:  # fmt: skip
    """What breaks if we move to RELEASE|PYTHON: a jax release (compare its stored findings)
    or the jax of an interpreter path (audit there first, what is not stored). REFERENCE: a
    name or one version (default: every variant). Exit 1 when a row breaks."""
    show_upgrade(ctx, target, reference, platform, no_store, timeout, as_json)


@audit.command("expiring")
@click.argument("before", metavar="YYYY-MM-DD", type=click.DateTime(formats=["%Y-%m-%d"]))
@_options(reference_argument, json_option)
@pass_ctx
def expiring(
    ctx: CliContext, before: datetime.datetime, reference: str | None, as_json: bool
) -> None:
    """List the variants (of REFERENCE, default every one) whose jax 6-month window ends
    before YYYY-MM-DD (and those whose end is unknown), with the newest jax an audit found
    each ok under; runs nothing, exits 0."""
    show_expiring(ctx, reference, before, as_json)


@audit.command("forecast")
@_options(reference_argument, json_option)
@pass_ctx
def forecast(ctx: CliContext, reference: str | None, as_json: bool) -> None:
    """Per variant (of REFERENCE, default every one): the jax releases full audits found it
    ok under, when jax's 6-month window for it ends, and what the newest jax release
    `jaxport watch` has seen says of it (ok, expires, refused); runs nothing, exits 0."""
    from jaxport._cli.render_watch import forecast_table

    with ctx.registry() as reg:
        rows = reg.forecast(reference)
    emit(as_json, rows, forecast_table)


@audit.command("enqueue")
@_options(reference_argument, platform_option, audit_timeout_option, json_option)
@pass_ctx
def enqueue(
    ctx: CliContext, reference: str | None, platform: str | None, timeout: float, as_json: bool
) -> None:
    """Queue the audits of REFERENCE (default: everything) for `jaxport audit-worker` on each
    platform's hosts (a PostgreSQL registry with jaxport[queue])."""
    queue_audits(ctx, reference, platform, timeout, as_json)


def queue_audits(
    ctx: CliContext, reference: str | None, platform: str | None, timeout: float, as_json: bool
) -> None:
    """``audit enqueue``: queues the audits, prints how many."""
    from jaxport._cli.queue import enqueued_text

    with ctx.registry() as reg:
        jobs = reg.enqueue_audits(reference, platform=platform, timeout=timeout)
    emit(as_json, jobs, enqueued_text)


def run_audit(
    ctx: CliContext,
    *,
    reference: str | None,
    platform: str | None,
    python: str | None,
    jax_release: str | None,
    no_store: bool,
    force: bool,
    workers: int,
    tolerance: str | None,
    timeout: float,
    level: str,
    as_json: bool,
) -> None:
    """``audit run`` (``level="full"``) and ``audit static``: audits, prints the report, exits
    1 when a measured status is not ok.

    Raises:
        click.UsageError: both --python and --jax.
    """
    from jaxport._cli import audit_reports
    from jaxport._cli.progress import audit_progress
    from jaxport._cli.render_audit import findings_table

    if python is not None and jax_release is not None:
        raise click.UsageError("give --python or --jax, not both")
    kwargs: dict[str, Any] = {} if platform is None else {"platform": platform}
    if tolerance is not None:
        kwargs["tolerance"] = tolerance
    with ctx.registry() as reg, audit_progress(as_json) as progress:
        findings = reg.audit(
            reference, python=python, store=not no_store, timeout=timeout, force=force,
            level=level, workers=workers, jax=jax_release, progress=progress, **kwargs,
        )  # fmt: skip
    report = audit_reports.audit_report(
        findings, other_python=python is not None or jax_release is not None
    )
    emit(as_json, report, findings_table)
    if any(f.status not in ("ok", "not-run", "unknown") for f in findings):
        click.get_current_context().exit(1)


def show_matrix(
    ctx: CliContext, reference: str | None, platform: str | None, as_json: bool
) -> None:
    """``audit matrix``: the stored findings of REFERENCE (or every variant) as a matrix."""
    from jaxport._cli import audit_reports
    from jaxport._cli.render_audit import matrix_table

    with ctx.registry() as reg:
        findings = _stored_findings(reg, reference, platform)
    emit(as_json, audit_reports.matrix_report(findings), matrix_table)


def show_upgrade(
    ctx: CliContext, target: str, reference: str | None, platform: str | None, no_store: bool,
    timeout: float, as_json: bool,
) -> None:  # fmt: skip
    """``audit upgrade``: the upgrade report towards ``target``; exits 1 when a row breaks."""
    from jaxport._cli import audit_reports
    from jaxport._cli.render_audit import upgrade_table

    with ctx.registry() as reg:
        rows = reg.upgrade_report(
            target, reference, platform=platform, store=not no_store, timeout=timeout
        )
    emit(as_json, audit_reports.upgrade_report(rows, target), upgrade_table)
    click.get_current_context().exit(1 if any(r.breaks for r in rows) else 0)


def show_expiring(
    ctx: CliContext, reference: str | None, before: datetime.datetime, as_json: bool
) -> None:
    """``audit expiring``: the variants whose jax window ends before ``before``."""
    from jaxport._cli.render_audit import windows_table

    with ctx.registry() as reg:
        rows = reg.windows(reference, expiring_before=before.date())
    emit(as_json, rows, windows_table)


def _stored_findings(reg: Any, reference: str | None, platform: str | None) -> list[Any]:
    """The stored findings ``audit matrix`` shows: every variant's, a name's, or those of the
    one version a reference names (``NAME:VERSION``, ``NAME@ALIAS``, a digest prefix)."""
    from jaxport.registry import parse_reference

    if reference is None:
        return list(reg.audit_results(platform=platform, limit=1_000_000))
    ref = parse_reference(reference)
    if ref.name is not None and ref.version is None and ref.alias is None:
        return list(reg.audit_results(name=ref.name, platform=platform, limit=1_000_000))
    version = reg.get(reference)
    found = reg.audit_results(name=version.name, platform=platform, limit=1_000_000)
    return [f for f in found if f.version == version.version]
