"""``jaxport lineage``: a version's sources and the versions derived from it, as a tree at 80
columns, then its provenance (``Registry.lineage``; drawn by ``render_lineage``). Imports
neither jax nor SQLAlchemy: through a registry server it is one request."""

from __future__ import annotations

import click

from jaxport._cli.common import CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["lineage_cmd"]


@click.command("lineage")
@click.argument("reference")
@click.option(
    "--depth",
    type=click.IntRange(1, 1000),
    metavar="N",
    help="At most N levels each way (default: all, at most 1,000 versions).",
)
@json_option
@pass_ctx
def lineage_cmd(ctx: CliContext, reference: str, depth: int | None, as_json: bool) -> None:
    """Show what a version derives from and what derives from it, and its provenance.

    REFERENCE names the version (NAME:VERSION; a bare NAME: the newest). Derivations:
    update_params, rescue, examples (the same archives with other golden examples), explicit.
    """
    from jaxport._cli.render_lineage import lineage_text

    with ctx.registry() as reg:
        found = reg.lineage(reference, depth=depth)
    emit(as_json, found, lineage_text)
