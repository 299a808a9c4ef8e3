"""``jaxport oci push`` / ``jaxport oci pull``: a version to and from a repository of an OCI
registry (``Registry.oci_push`` / ``oci_pull``). Credentials: ``JAXPORT_OCI_USERNAME`` /
``JAXPORT_OCI_PASSWORD``, else the Docker config's ``auths``; never printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = ["oci"]

_INSECURE = click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Plain http to a registry that is not on a loopback address (or JAXPORT_OCI_INSECURE=1).",
)


@click.group()
def oci() -> None:
    """Push versions to, and pull them from, an OCI registry (oci://HOST/REPO[:TAG]).

    Credentials: JAXPORT_OCI_USERNAME and JAXPORT_OCI_PASSWORD, else the Docker config's
    auths (docker login); credential helpers are not run.
    """


def _data(done: Any) -> dict[str, Any]:
    report = done.report
    return {
        "url": done.url,
        "digest": done.digest,
        "name": done.name,
        "version": done.version,
        "path": None if done.path is None else str(done.path),
        "report": report,
    }


def _pushed_text(data: dict[str, Any]) -> str:
    r = data["report"]
    how = "sent" if r.versions else "already there"
    return (
        f"{data['name']}:{data['version']} {how}: {data['url']} ({r.blobs} blobs, {r.bytes} "
        f"bytes sent, {r.blobs_present} present; {r.manifests} manifests; "
        f"{r.signatures} signatures, {r.findings} findings)"
    )


def _pulled_text(data: dict[str, Any]) -> str:
    r = data["report"]
    if data["path"] is not None:
        fetched = f"{r.blobs} layers, {r.bytes} bytes fetched"
        return f"wrote {data['path']} from {data['url']} ({fetched})"
    lines = [
        f"{data['name']}:{data['version']} from {data['url']} ({r.blobs} layers, {r.bytes} "
        f"bytes fetched; {r.signatures} signatures, {r.findings} findings)"
    ]
    return "\n".join([*lines, *r.notes])


@oci.command("push")
@click.argument("reference", metavar="NAME:VERSION")
@click.argument("destination", metavar="oci://HOST/REPO[:TAG]")
@_INSECURE
@json_option
@pass_ctx
def push(
    ctx: CliContext, reference: str, destination: str, insecure: bool | None, as_json: bool
) -> None:
    """Push NAME:VERSION (variants, aliases, signatures, findings) to oci://HOST/REPO[:TAG].

    Only the layers the repository lacks are sent. Tags: vN, each alias of the version, and
    TAG. NAME@ALIAS and NAME (the newest) work too.
    """
    with ctx.registry() as reg:
        done = reg.oci_push(reference, destination, insecure=insecure)
    emit(as_json, _data(done), _pushed_text)


@oci.command("pull")
@click.argument("source", metavar="oci://HOST/REPO[:TAG|@DIGEST]")
@click.option(
    "-o", "--output", type=Path, help="Write one variant's archive to FILE (no registry)."
)
@click.option(
    "--platform", help="With -o: the variant's platform (default: this machine's; 'any')."
)
@click.option("--devices", type=int, help="With -o: the variant's device count.")
@click.option("--name", help="Store the version under NAME (default: the name it was pushed as).")
@_INSECURE
@json_option
@pass_ctx
def pull(
    ctx: CliContext,
    source: str,
    output: Path | None,
    platform: str | None,
    devices: int | None,
    name: str | None,
    insecure: bool | None,
    as_json: bool,
) -> None:
    """Pull the version at oci://HOST/REPO[:TAG|@DIGEST] into the registry, or one variant.

    No TAG: latest. With -o FILE, the variant for --platform and --devices is written to FILE
    and no registry is opened. Every manifest, layer and the assembled archive are verified
    before anything is stored.
    """
    if output is None:
        if platform is not None or devices is not None:
            raise click.UsageError("--platform and --devices choose the variant written by -o")
        with ctx.registry(create=True) as reg:
            done = reg.oci_pull(source, name=name, insecure=insecure)
    else:
        if name is not None:
            raise click.UsageError("--name stores the version in the registry: not with -o")
        from jaxport.registry import LOCAL_PLATFORM
        from jaxport.registry._internal import oci_pull_file

        chosen: Any = (
            LOCAL_PLATFORM if platform is None else None if platform == "any" else platform
        )
        done = oci_pull_file(source, output, platform=chosen, nr_devices=devices, insecure=insecure)
    emit(as_json, _data(done), _pulled_text)
