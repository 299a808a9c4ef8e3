"""``jaxport rescue FILE --jax RELEASE``: a jax-native file the installed jax refuses, converted
under a jax release that reads it (``jaxport/_rescue.py``), optionally pushed with its check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import CliContext, pass_ctx, timeout_option
from jaxport._cli.output import json_option

__all__ = ["rescue_cmd", "rescued_text"]


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


@click.command("rescue")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--jax",
    "jax_release",
    metavar="RELEASE",
    default="0.10.2",
    show_default=True,
    help="The jax release to read FILE with, in an environment made once under "
    "$JAXPORT_HOME/envs/jax-RELEASE (minutes the first time).",
)
@click.option(
    "--python",
    metavar="PATH",
    help="Read FILE with this interpreter (it has jax and this jaxport) instead of --jax's "
    "environment.",
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
    file: Path,
    jax_release: str,
    python: str | None,
    output: Path | None,
    push_name: str | None,
    force: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Convert a jax-native Exported.serialize() FILE that this jax refuses (older than its
    6-month window, or written by a jax it cannot read) into a jaxport archive, reading it
    with jax RELEASE.

    The function is also run there once on deterministic inputs, and its inputs and outputs
    are stored as a golden example (check: recorded; not-run with the reason where it cannot
    run there: symbolic shapes, another platform, too few devices). With --push NAME the
    archive is pushed with that example, so `jaxport audit NAME` under this jax compares its
    numbers with the old jax's.
    """
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
