"""``jaxport pull``, ``ls``, ``search``, ``show``, ``log`` and ``diff``: the commands that read
a registry.

Through a registry server (``--registry https://...``) none of them imports jax or SQLAlchemy
here: ``pull --format jax`` and ``--method`` (which convert or re-export) and ``show``'s check
of variants a newer jax wrote are the only paths that reach jax, and only when asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import (
    CliContext,
    allow_custom_call_option,
    emit,
    paged,
    pass_ctx,
    resolve_variant,
)
from jaxport._cli.output import json_option
from jaxport._errors import NotFoundError, UnsupportedFeatureError
from jaxport._window import release_key

__all__ = ["diff", "log_cmd", "ls", "pull", "search", "show"]


@click.command()
@click.argument("reference")
@click.option(
    "--platform",
    help="cpu, cuda, rocm, tpu or gpu (the local GPU kind); any case. Default: this machine's.",
)
@click.option(
    "--devices", type=click.IntRange(min=1), help="Device count to run on (default: any)."
)
@click.option(
    "-o",
    "--output",
    help="File to write; '-' writes the bytes to stdout. Default: NAME-VERSION.jaxport "
    "(NAME-VERSION-METHOD with --method; .jaxexport with --format jax) in the current "
    "directory.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jaxport", "jax"]),
    default="jaxport",
    show_default=True,
    help="jaxport: the archive as stored; jax: jax-native Exported.serialize() bytes.",
)
@click.option(
    "--method",
    help="A model's method: write it alone as a function archive (its first argument is "
    "the parameter tree).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@allow_custom_call_option
@json_option
@pass_ctx
def pull(
    ctx: CliContext,
    reference: str,
    platform: str | None,
    devices: int | None,
    output: str | None,
    fmt: str,
    method: str | None,
    force: bool,
    allow_custom_calls: tuple[str, ...],
    as_json: bool,
) -> None:
    """Pull a version's archive, digest verified.

    REFERENCE (see jaxport -h) names the version; --platform and --devices choose its variant.
    """
    from jaxport._cli.output import STDOUT, check_output, write_output

    if output == STDOUT and as_json:
        raise click.UsageError("-o - writes the archive to stdout: leave out --json")
    if output not in (None, STDOUT):
        check_output(Path(output), force=force)
    with ctx.registry() as reg:
        chosen = resolve_variant(reg, reference, platform, devices)
        if fmt == "jax" and chosen.kind == "model" and method is None:
            from jaxport._errors import WrongKindError

            raise WrongKindError(
                f"{chosen.name}:{chosen.version} is a model: jax has no format for it; "
                "leave out --format jax, or pull one method with --method",
                found="model",
            )
        target = output or _default_output(chosen, fmt, method)
        if output is None:
            check_output(Path(target), force=force)
        if method is not None:
            data = _method_archive(reg, chosen, method, fmt, allow_custom_calls)
        elif chosen.kind == "model" and target != STDOUT:
            reg.pull_file(f"sha256:{chosen.digest}", target)  # one part at a time
            emit(as_json, _pulled_facts(target, chosen.size_bytes, fmt, chosen), _pulled)
            return
        else:
            data = reg.read_blob(chosen.digest)
    if fmt == "jax" and method is None:
        from jaxport import loads

        data = _jax_native(loads(data, allow_custom_calls=allow_custom_calls), chosen.vjp_order)
    write_output(target, data)
    if target != STDOUT:
        emit(as_json, _pulled_facts(target, len(data), fmt, chosen), _pulled)


def _pulled_facts(target: str, size: int, fmt: str, chosen: Any) -> dict[str, Any]:
    return {"path": target, "bytes": size, "format": fmt, "variant": chosen}


def _method_archive(
    reg: Any, chosen: Any, method: str, fmt: str, allow_custom_calls: tuple[str, ...]
) -> bytes:
    """One method of a model variant as a function archive (jaxport, or jax-native bytes),
    with the VJP orders the model stored for it."""
    from jaxport import dumps

    exported = reg.pull(
        f"sha256:{chosen.digest}", method=method, allow_custom_calls=allow_custom_calls
    )
    vjp_order = next((m.vjp_order for m in chosen.methods if m.name == method), 0)
    if fmt == "jax":
        return _jax_native(exported, vjp_order)
    return bytes(dumps(exported, vjp_order=vjp_order))


def _jax_native(exported: Any, vjp_order: int) -> bytes:
    """``Exported.serialize``, whose refusals (e.g. jax >= 0.9.2 of an Exported sharded in
    the HloSharding form only, as jax < 0.9 wrote it) are an ``UnsupportedFeatureError``."""
    from jaxport._errors import UnsupportedFeatureError

    try:
        return bytes(exported.serialize(vjp_order=vjp_order))
    except (ValueError, NotImplementedError) as e:
        raise UnsupportedFeatureError(
            f"jax {_jax_version()} cannot write this variant in its own format: "
            f"{str(e).rstrip('.')}; pull it as a jaxport archive (--format jaxport)"
        ) from e


def _jax_version() -> str:
    import jax

    return str(jax.__version__)


def _pulled(p: dict[str, Any]) -> str:
    v = p["variant"]
    size = f"{p['bytes']:,} bytes, {p['format']}"
    return f"wrote {p['path']} ({size}): {v.name}:{v.version} {v.short_digest}"


def _default_output(chosen: Any, fmt: str, method: str | None = None) -> str:
    """``NAME-VERSION[-METHOD].jaxport`` (``.jaxexport`` for jax-native bytes), in the current
    directory."""
    stem = f"{chosen.name}-{chosen.version}" + (f"-{method}" if method else "")
    return stem + (".jaxexport" if fmt == "jax" else ".jaxport")


@click.command("ls")
@click.argument("name", required=False)
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Page size."
)
@click.option("--after", metavar="NAME:VERSION", help="Start after this row (the next page).")
@json_option
@pass_ctx
def ls(ctx: CliContext, name: str | None, limit: int, after: str | None, as_json: bool) -> None:
    """List versions, one page.

    Every name's versions, or NAME's, in name and version order (a deleted name has none:
    it is not found). With NAME, --after names a row of NAME.
    """
    from jaxport._cli.render import refs_table

    cursor = _cursor(after)
    if name is not None and cursor is not None and cursor[0] != name:
        raise click.UsageError(
            f"--after {after} is a row of another name than {name}: give --after {name}:VERSION"
        )
    with ctx.registry() as reg:
        refs = reg.list(name, limit=limit, after=cursor)
    more = f"--after {refs[-1]}" if len(refs) == limit else None
    emit(as_json, refs, lambda r: paged(refs_table(r), more))


def _cursor(after: str | None) -> tuple[str, int] | None:
    if after is None:
        return None
    from jaxport.registry import parse_reference

    ref = parse_reference(after)
    if ref.name is None or ref.version is None:
        raise click.BadParameter("expected NAME:VERSION", param_hint="--after")
    return ref.name, ref.version


@click.command()
@click.option("--name", help="Only this name's variants.")
@click.option("--platform", help="Runs on this platform (any case; gpu: the local GPU kind).")
@click.option("--devices", type=click.IntRange(min=1), help="Runs on this many devices.")
@click.option("--jax-version", help="Exported by this jax release, or a prefix (0.10: 0.10.x).")
@click.option("--calling-convention", type=int, help="With this calling convention version.")
@click.option("--fun-name", help="Exported from the function of this name.")
@click.option(
    "--shape-polymorphic/--static-shapes",
    "shape_polymorphic",
    default=None,
    help="Only variants with symbolic dimensions (or only without).",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Page size."
)
@click.option("--after", type=int, metavar="ID", help="Start after this variant_id (next page).")
@json_option
@pass_ctx
def search(
    ctx: CliContext,
    name: str | None,
    platform: str | None,
    devices: int | None,
    jax_version: str | None,
    calling_convention: int | None,
    fun_name: str | None,
    shape_polymorphic: bool | None,
    limit: int,
    after: int | None,
    as_json: bool,
) -> None:
    """Search variants by platform, devices, versions."""
    from jaxport._cli.render import variants_table

    with ctx.registry() as reg:
        found = reg.search(
            name=name,
            platform=platform,
            nr_devices=devices,
            jax_version=jax_version,
            calling_convention_version=calling_convention,
            fun_name=fun_name,
            shape_polymorphic=shape_polymorphic,
            limit=limit,
            after=after,
        )
    more = f"--after {found[-1].variant_id}" if len(found) == limit else None
    emit(as_json, found, lambda f: paged(variants_table(f), more))


@click.command()
@click.argument("reference")
@json_option
@pass_ctx
def show(ctx: CliContext, reference: str, as_json: bool) -> None:
    """Show a version: time, metadata, aliases, provenance, variants, their jax window, and
    the gates of the name's protected aliases (pass / FAIL at the versions they point at).

    REFERENCE names it (a bare NAME: the newest version).
    """
    from jaxport._cli.render import ref_panel

    with ctx.registry() as reg:
        ref = reg.get(reference)
        aliases = {a: v for a, v in reg.aliases(ref.name).items() if v == ref.version}
        signatures = reg.signatures(f"{ref.name}:{ref.version}")
        try:
            windows = reg.windows(f"{ref.name}:{ref.version}")
        except UnsupportedFeatureError:  # through a registry server: not reported (null)
            windows = None
        loads_here = _unloadable_variants(reg, ref)
        gates = reg.gates(ref.name)  # each protected alias, for the version it points at
        try:
            lineage = reg.lineage(f"{ref.name}:{ref.version}", depth=1)  # provenance, source
        except NotFoundError:  # a server older than lineage (or the version just deleted)
            lineage = None
    document = {"ref": ref, "aliases": aliases, "signatures": signatures, "windows": windows,
                "loads_here": loads_here, "lineage": lineage, "gates": gates}  # fmt: skip
    emit(as_json, document, ref_panel)


def _unloadable_variants(reg: Any, ref: Any) -> dict[str, str]:
    """Per variant (short digest) that the installed jax cannot load, why: its header read
    (``jaxport.export._internal.unloadable_here``). Only variants a newer jax wrote are read, and
    only
    then is jax imported (its jaxlib's StableHLO range decides): ``show`` of variants this
    jax or an older one wrote imports no jax, through a registry server too."""
    installed = _installed_jax()
    newer = [
        v
        for v in ref.variants
        if installed is not None
        and v.jax_version != "unknown"
        and release_key(v.jax_version) > release_key(installed)
    ]
    if not newer:
        return {}
    from jaxport.export._internal import unloadable_here

    out = {}
    for v in newer:
        info = reg.inspect(f"{ref.name}:{ref.version}", platform=v.platforms[0],
                           nr_devices=v.nr_devices)  # fmt: skip
        out[v.short_digest] = unloadable_here(info)
    return {k: v for k, v in out.items() if v}


def _installed_jax() -> str | None:
    """The installed jax release, from its package metadata (jax itself is not imported);
    None where jax is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jax")
    except PackageNotFoundError:
        return None


@click.command()
@click.argument("old")
@click.argument("new")
@json_option
@pass_ctx
def diff(ctx: CliContext, old: str, new: str, as_json: bool) -> None:
    """What changed between two versions.

    OLD and NEW are references; exit 1 if anything breaks.
    """
    from jaxport._cli.render import changes_table

    with ctx.registry() as reg:
        changes = reg.diff(old, new)
    emit(as_json, changes, changes_table)
    if any(c.breaking for c in changes):
        click.get_current_context().exit(1)


@click.command("log")
@click.argument("name", required=False)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Events per page.",
)
@click.option(
    "--before",
    type=click.IntRange(min=1),
    metavar="ID",
    help="Only events older than this id (the next page).",
)
@json_option
@pass_ctx
def log_cmd(
    ctx: CliContext, name: str | None, limit: int, before: int | None, as_json: bool
) -> None:
    """The event log (of NAME only, if given), newest first: pushes, alias moves, deletes, gc,
    signing and token changes, with who made each (a token's name, or local:USER)."""
    with ctx.registry() as reg:
        events = reg.events(name=name, limit=limit, before=before)
    if as_json:
        from jaxport._cli.output import emit_json, to_json

        emit_json({"events": to_json(events)})
        return
    from jaxport._cli.wrap import fit

    for e in events:  # a long detail goes on under itself, within 80 columns
        head = f"{e.id:>6} {_when(e.at)} {e.actor:<16} {e.kind:<12} "
        click.echo(fit(head + _what(e), hang=len(head.lstrip())))


def _when(seconds: float) -> str:
    """Local time, as every other table shows it (JSON gives ISO 8601 in UTC)."""
    from jaxport._cli.render import local_time

    return local_time(seconds, to_the_second=True)


def _what(event: Any) -> str:
    where = f"{event.name}:{event.version}" if event.version else (event.name or "")
    detail = event.detail
    extra = {
        "alias": lambda: (
            f"@{detail.get('alias')}" + (" (gates overridden)" if detail.get("override") else "")
        ),
        "protect": lambda: f"@{detail.get('alias')}",
        "unprotect": lambda: f"@{detail.get('alias')}",
        "token-create": lambda: f"token {detail.get('token')} ({detail.get('scope')})",
        "token-revoke": lambda: f"token {detail.get('token')}",
        "gc": lambda: f"{detail.get('removed')} blob(s), {detail.get('bytes')} bytes",
    }.get(event.kind)
    return f"{where} {extra()}".strip() if extra else where
