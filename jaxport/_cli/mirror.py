"""``jaxport mirror SRC DST``: versions, aliases, signatures and findings copied between
registries, registry servers, OCI image layouts and OCI registries (``jaxport.registry.mirror``).
"""

from __future__ import annotations

from typing import Any

import click

from jaxport._cli.bundle import copy_summary
from jaxport._cli.common import CONTEXT
from jaxport._cli.output import json_option

__all__ = ["mirror_cmd"]


@click.command("mirror", context_settings=CONTEXT)
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@click.option("--prefix", metavar="PREFIX", help="Only the names starting with PREFIX.")
@click.option(
    "--name", "names", metavar="NAME", multiple=True,
    help="Only this name (repeatable); an OCI registry as SRC needs them.",
)  # fmt: skip
@click.option("--source-blobs", metavar="DIR|URL", help="SRC's blob store (a database SRC).")
@click.option("--destination-blobs", metavar="DIR|URL", help="DST's blob store (a database DST).")
@json_option
def mirror_cmd(
    source: str, destination: str, prefix: str | None, names: tuple[str, ...],
    source_blobs: str | None, destination_blobs: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Copy versions (with aliases, signatures, findings) from SRC to DST.

    SRC and DST are each a registry URL (sqlite:///..., postgresql+psycopg://..., or a
    registry server's http(s)://...; a server's token from $JAXPORT_TOKEN),
    oci://HOST/NAMESPACE (an OCI registry: name N is NAMESPACE/N) or oci:DIR (an OCI
    image layout directory).

    By digest: only what DST lacks is copied; an interrupted mirror continues where it
    stopped, and a second run copies nothing. A registry numbers what it receives itself.
    """
    from jaxport.registry import mirror

    src = _place(source, source_blobs)
    dst = _place(destination, destination_blobs)
    try:
        report = mirror(src, dst, prefix=prefix, names=names)
    finally:
        for place in (src, dst):
            if hasattr(place, "close"):
                place.close()
    emit_report(as_json, report, f"mirrored {source} -> {destination}")


def _place(url: str, blobs: str | None) -> Any:
    """An OCI URL as given (``mirror`` opens it), else the registry it names."""
    if url.startswith("oci:"):
        if blobs is not None:
            raise click.UsageError("--source-blobs / --destination-blobs are for a database")
        return url
    from jaxport.registry import Registry

    return Registry(url, blobs=blobs)


def emit_report(as_json: bool, report: Any, done: str) -> None:
    from jaxport._cli.common import emit

    emit(as_json, report, lambda r: copy_summary(r, done))
