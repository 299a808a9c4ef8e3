"""``jaxport rescue FILE --jax RELEASE``: a jax-native file the installed jax refuses, converted
under a jax release that reads it (``jaxport/_rescue.py``), optionally pushed with its check.

``jaxport rescue --expiring-before DATE [--prefix P] [--enqueue] [--dry-run]``: fleet rescue
(``Registry.rescue``, ``registry/_fleet_rescue.py``): every variant leaving jax's window, or
with HloSharding-only shardings, re-exported, checked, pushed as a new version derived from its
source; aliases moved where their gates pass. Exit 1 when anything was refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import CliContext, pass_ctx, timeout_option
from jaxport._cli.output import json_option

__all__ = ["fleet_text", "rescue_cmd", "rescued_text"]


def rescued_text(data: dict[str, Any]) -> str:
    """What ``rescue`` did, one fact a line; then what was pushed, if anything."""
    report = data["rescue"]
    lines = [
        f"read {report.source} with jax {report.jax_version} (jaxlib {report.jaxlib_version})",
        f"written by {report.original_writer or 'an unknown jax release'}",
        f"wrote {report.archive} ({report.fun_name}, {', '.join(report.platforms)}, "
        f"{report.nr_devices} device(s), vjp order {report.vjp_order})",
    ]
    if report.check == "recorded":
        lines.append(f"check: recorded: inputs and outputs in {report.examples}")
    else:
        lines.append(f"check: {report.check}: {report.reason}")
    pushed = data.get("pushed")
    if pushed is not None:
        examples = len(report.golden_examples())
        lines.append(f"pushed {pushed} with {examples} golden example(s)")
    return "\n".join(lines)


def fleet_text(report: Any) -> str:
    """A fleet rescue, one line a version rescued, a job queued or a refusal, then the
    summary."""
    lines = []
    for r in report.rescued:
        checks = ", ".join(f"{v.check} ({v.compared} example(s))" for v in r.variants)
        jax = ", ".join(sorted({v.jax_version for v in r.variants}))
        made = "" if r.created else " (already stored)"
        moved = f"; moved {', '.join(r.aliases_moved)}" if r.aliases_moved else ""
        lines.append(
            f"rescued {r.name}:{r.source} as {r.name}:{r.rescued}{made}: {len(r.variants)} "
            f"variant(s) re-exported by jax {jax}, check {checks}{moved}"
        )
    if report.dry_run:
        refused = {(r.name, r.version, r.digest) for r in report.refusals}
        for c in report.candidates:
            if (c.name, c.version, c.digest) not in refused:
                lines.append(
                    f"would rescue {c.name}:{c.version} {c.digest[:12]} ({c.why}) with jax "
                    f"{c.release}"
                )
    for q in report.queued:
        job = "already queued" if q.job_id is None else f"job {q.job_id}"
        lines.append(f"queued {q.name}:{q.version} {q.digest[:12]} on audit-{q.platform}: {job}")
    for r in report.refusals:
        what = f"alias {r.alias}" if r.alias else (r.digest[:12] if r.digest else "")
        lines.append(f"refused {r.name}:{r.version} {what}: {r.reason}")
    from jaxport._cli.wrap import fit_clauses, fit_lines

    return fit_lines(lines + fit_clauses(report.summary()))


@click.command("rescue")
@click.argument(
    "file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--expiring-before",
    metavar="DATE",
    help="Fleet rescue (no FILE): every variant whose jax window ends before DATE "
    "(YYYY-MM-DD), or with HloSharding-only shardings, of each name's newest and aliased "
    "versions.",
)
@click.option("--prefix", metavar="P", help="Fleet rescue: only names starting with P.")
@click.option(
    "--enqueue",
    is_flag=True,
    help="Fleet rescue: one job per variant on the audit queue (PostgreSQL) for "
    "`jaxport audit-worker`, instead of rescuing here.",
)
@click.option("--dry-run", is_flag=True, help="Fleet rescue: list what would be rescued.")
@click.option(
    "--jax",
    "jax_release",
    metavar="RELEASE",
    default="0.10.2",
    show_default=True,
    help="The jax release to read FILE (or re-export each variant) with, in an environment "
    "made once under $JAXPORT_HOME/envs/jax-RELEASE (minutes the first time).",
)
@click.option(
    "--python",
    metavar="PATH",
    help="Read FILE (or re-export) with this interpreter (it has jax and this jaxport) instead "
    "of --jax's environment.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The archive to write (default: FILE with the suffix .jaxport); its golden "
    "examples go beside it as OUTPUT.examples.npz.",
)
@click.option("--push", "push_name", metavar="NAME", help="Push the archive with its examples.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@timeout_option(
    "Seconds the conversion and its check may take (making the environment aside).",
    default=600.0,
)
@json_option
@pass_ctx
def rescue_cmd(
    ctx: CliContext,
    file: Path | None,
    expiring_before: str | None,
    prefix: str | None,
    enqueue: bool,
    dry_run: bool,
    jax_release: str,
    python: str | None,
    output: Path | None,
    push_name: str | None,
    force: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Rescue what jax refuses: a jax-native FILE, or the registry's expiring variants.

    FILE: an Exported.serialize() file that this jax refuses (older than its 6-month window,
    or written by a jax it cannot read), converted into a jaxport archive, read with jax
    RELEASE.

    The function is also run there once on deterministic inputs, and its inputs and outputs
    are stored as a golden example (check: recorded; not-run with the reason where it cannot
    run there: symbolic shapes, another platform, too few devices). With --push NAME the
    archive is pushed with that example, so `jaxport audit NAME` under this jax compares its
    numbers with the old jax's.

    With --expiring-before DATE instead of FILE: fleet rescue. Each variant whose window ends
    before DATE, or whose shardings are HloSharding-only, is re-exported under --jax, checked
    against its version's golden examples (or, without any, against the source on
    deterministic inputs), and pushed as a new version derived from its source (other
    variants carried over); aliases that pointed at the source move where their gates pass.
    Refusals are listed with their reasons (exit 1).
    """
    if expiring_before is not None or file is None:
        _fleet(ctx, file, expiring_before, prefix, enqueue, dry_run, jax_release, python,
               timeout, as_json, output, push_name, force)  # fmt: skip
        return
    if prefix is not None or enqueue or dry_run:
        raise click.UsageError("--prefix, --enqueue and --dry-run are for --expiring-before")
    from jaxport._rescue import rescue

    target = output if output is not None else file.with_suffix(".jaxport")
    report = rescue(file, target, jax=jax_release, python=python, timeout=timeout, overwrite=force)
    data: dict[str, Any] = {"rescue": report}
    if push_name is not None:
        with ctx.registry(create=True) as reg:
            data["pushed"] = reg.push(
                str(report.archive), push_name, examples=report.golden_examples()
            )
    if as_json:
        from jaxport._cli.output import emit_json

        emit_json({"rescue": report, "pushed": data.get("pushed")})
        return
    click.echo(rescued_text(data))


def _fleet(
    ctx: CliContext,
    file: Path | None,
    expiring_before: str | None,
    prefix: str | None,
    enqueue: bool,
    dry_run: bool,
    jax_release: str,
    python: str | None,
    timeout: float,
    as_json: bool,
    *file_only: Any,
) -> None:
    """``rescue --expiring-before``: ``Registry.rescue``, its report printed; exit 1 on any
    refusal.

    Raises:
        click.UsageError: FILE with --expiring-before, neither, or FILE's options.
    """
    if file is not None:
        raise click.UsageError("give FILE or --expiring-before DATE, not both")
    if expiring_before is None:
        raise click.UsageError("give FILE (a jax-native file) or --expiring-before DATE")
    output, push_name, force = file_only
    if output is not None or push_name is not None or force:
        raise click.UsageError("-o, --push and --force are for FILE")
    with ctx.registry(create=False) as reg:
        report = reg.rescue(
            expiring_before, prefix=prefix, jax=jax_release, python=python,
            dry_run=dry_run, enqueue=enqueue, timeout=timeout,
        )  # fmt: skip
    if as_json:
        from jaxport._cli.output import emit_json

        emit_json({"rescue": report, "summary": report.summary()})
    else:
        click.echo(fleet_text(report))
    if report.refusals:
        raise SystemExit(1)
