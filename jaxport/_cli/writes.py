"""``jaxport push``, ``rm`` and ``gc``: the commands that change a registry (``alias`` is
``aliases.py``).

``push``'s options are one decorator and one keyword each, passed on to ``Registry.push``:
a new one (``--description FILE``) is one more of each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import CliContext, allow_custom_call_option, emit, parse_meta, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["gc", "push", "rm"]


@click.command()
@click.argument(
    "files",
    nargs=-1,
    required=True,
    metavar="FILE...",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option("--name", help="Name to push under (default: the first file's function name).")
@click.option("--alias", "aliases", multiple=True, help="Alias to point at the version (repeat).")
@click.option(
    "--meta",
    "metadata",
    multiple=True,
    callback=parse_meta,
    metavar="KEY=VALUE",
    help="Metadata of the version (repeat); archives are never rewritten, they keep their own.",
)
@click.option(
    "--description",
    "description_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A Markdown file (UTF-8, at most 64 KiB): the version's description, its metadata key "
    "'description', which the server's pages render (HTML disabled).",
)
@click.option(
    "--max-size",
    type=click.IntRange(min=0),
    default=64 << 30,
    show_default="64 GiB",
    metavar="BYTES",
    help="Refuse a file larger than this, before reading it.",
)
@allow_custom_call_option
@click.option("--audit", is_flag=True, help="Queue audit jobs for the version (see audit enqueue).")
@json_option
@pass_ctx
def push(
    ctx: CliContext,
    files: tuple[Path, ...],
    name: str | None,
    aliases: tuple[str, ...],
    metadata: dict[str, str],
    description_file: Path | None,
    max_size: int,
    allow_custom_calls: tuple[str, ...],
    audit: bool,
    as_json: bool,
) -> None:
    """Push files as the variants of one version.

    Each of FILE... is a jaxport archive (stored as it is) or jax-native bytes from
    Exported.serialize() (converted, keeping its VJP order); they are told apart by content.
    Pushing archives that are already a version changes nothing and names that version.
    """
    if description_file is not None:
        metadata = {**metadata, **_description(description_file)}
    with ctx.registry(create=True) as reg:
        if audit:
            reg.check_audit_queue()  # refused before anything is pushed
        result = reg.push(
            list(files), name, aliases=aliases, metadata=metadata, max_size=max_size,
            allow_custom_calls=allow_custom_calls,
        )  # fmt: skip
        jobs = reg.enqueue_audits(f"{result.name}:{result.version}") if audit else None
    if jobs is None:
        emit(as_json, result, _pushed)
        return
    from jaxport._cli.queue import enqueued_text

    data = {"pushed": result, "queued": jobs}
    emit(as_json, data, lambda d: f"{_pushed(d['pushed'])}\n{enqueued_text(d['queued'])}")


def _description(path: Path) -> dict[str, str]:
    """``--description FILE`` as push metadata: ``{"description": TEXT}`` (it replaces a
    ``--meta description=...``).

    Raises:
        InvalidNameError: the file is over 64 KiB, not a regular file or not UTF-8.
    """
    from jaxport import InvalidNameError
    from jaxport._files import read_regular
    from jaxport.registry import DESCRIPTION_KEY, MAX_DESCRIPTION_BYTES

    data = read_regular(path, InvalidNameError, max_size=MAX_DESCRIPTION_BYTES)
    try:
        return {DESCRIPTION_KEY: data.decode("utf-8")}
    except UnicodeDecodeError:
        raise InvalidNameError(f"the description {path} is not UTF-8 text") from None


def _pushed(result: Any) -> str:
    lines = [
        f"pushed {result} ({len(result.variants)} variant(s))"
        if result.created
        else f"{result} already holds these archives: nothing pushed"
    ]
    lines += [f"repaired blob {d}" for d in result.repaired]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


@click.command()
@click.argument("reference", metavar="NAME[:VERSION]")
@click.option("--force", is_flag=True, help="Delete even while aliases point at it.")
@json_option
@pass_ctx
def rm(ctx: CliContext, reference: str, force: bool, as_json: bool) -> None:
    """Delete a version, or a whole name.

    NAME[:VERSION]: one version, or every version of NAME. Blobs stay until gc.
    """
    from jaxport.registry import parse_reference

    ref = parse_reference(reference)
    if ref.name is None or ref.alias is not None:
        raise click.BadParameter("expected NAME or NAME:VERSION", param_hint="NAME[:VERSION]")
    with ctx.registry() as reg:
        reg.delete(ref.name, ref.version, force=force)
    emit(as_json, {"name": ref.name, "version": ref.version}, lambda _: f"deleted {ref}")


@click.command()
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
@click.option(
    "--min-age",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds: unreferenced blobs younger than this stay: the parts an interrupted "
    "upload through a server sent (so that it resumes) and writes of older jaxport releases "
    "(pushes in flight are protected anyway); 0 frees them now.",
)
@click.option(
    "--temp-age",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds: temporary files of writes older than this are removed.",
)
@json_option
@pass_ctx
def gc(ctx: CliContext, dry_run: bool, min_age: float, temp_age: float, as_json: bool) -> None:
    """Remove blobs nothing refers to, and stale temporary files."""
    from jaxport._cli.render import gc_summary

    with ctx.registry() as reg:
        report = reg.gc(dry_run=dry_run, min_age=min_age, temp_age=temp_age)
    emit(as_json, report, gc_summary)
