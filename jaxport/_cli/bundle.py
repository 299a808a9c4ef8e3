"""``jaxport bundle export`` / ``bundle import``: versions carried to an air-gapped site as
one tar file, an OCI image layout (``jaxport.registry.bundle_export`` / ``bundle_import``;
``schema/OCI.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import CONTEXT, CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["bundle", "copy_summary", "export_cmd", "import_cmd"]


@click.group(context_settings=CONTEXT)
def bundle() -> None:
    """Carry versions to an air-gapped site: one tar file (an OCI image layout).

    \b
    jaxport bundle export mlp fn:3 -o site.tar   every version of mlp, and fn:3
    jaxport bundle import site.tar               into --registry, every digest verified

    A bundle holds each version with its aliases, signatures and audit findings. An import
    reads and verifies the whole bundle first: a changed byte, a missing blob, an extra file,
    a path outside the layout or a link exits 1 and imports nothing.
    """


@bundle.command("export")
@click.argument("references", metavar="NAME[:VERSION]...", nargs=-1, required=True)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
    help="The bundle to write (a tar file; replaced atomically).",
)  # fmt: skip
@json_option
@pass_ctx
def export_cmd(ctx: CliContext, references: tuple[str, ...], output: Path, as_json: bool) -> None:
    """Write NAME[:VERSION]... to a bundle: NAME is every version of it, NAME:VERSION or
    NAME@ALIAS one."""
    from jaxport.registry import bundle_export

    with ctx.registry() as reg:
        report = bundle_export(reg, list(references), output)
    emit(as_json, report, lambda r: copy_summary(r, f"wrote {output}"))


@bundle.command("import")
@click.argument("path", metavar="BUNDLE", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@pass_ctx
def import_cmd(ctx: CliContext, path: Path, as_json: bool) -> None:
    """Push every version of the bundle BUNDLE into the registry (versions it holds are
    kept)."""
    from jaxport.registry import bundle_import

    with ctx.registry(create=True) as reg:
        report = bundle_import(reg, path)
    emit(as_json, report, lambda r: copy_summary(r, f"imported {path}"))


def copy_summary(report: Any, done: str) -> str:
    """One paragraph: what a ``CopyReport`` says was copied, and its notes."""
    lines = [
        f"{done}: {len(report.versions)} version(s) copied, {len(report.skipped)} held "
        f"already; {report.blobs} blob(s), {report.bytes} bytes sent ({report.blobs_present} "
        f"present); {report.signatures} signature(s), {report.findings} finding(s), "
        f"{len(report.aliases)} alias(es) set"
    ]
    lines += [f"  {v}" for v in report.versions]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
