"""The ``jaxport`` command line: each command is one call into the public API.

Exit codes: 0 ok; 1 a ``JaxportError`` (printed once as ``Type: message``, no traceback);
2 a usage error (click's). Every read command takes ``--json`` for scripts. The registry is
``--registry URL`` / ``$JAXPORT_REGISTRY`` / the embedded default (``--blobs`` likewise).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from jaxport._errors import JaxportError

__all__ = ["main"]

_PROGRESS_BYTES = 4 * 2**20  # show a progress bar for transfers above this


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Prints a JaxportError as ``Type: message`` and exits 1."""
    try:
        yield
    except JaxportError as e:
        click.echo(f"{type(e).__name__}: {e}", err=True)
        sys.exit(1)


class _Context:
    def __init__(self, url: str | None, blobs: str | None):
        self.url, self.blobs = url, blobs

    def registry(self) -> Any:
        from jaxport.registry import Registry

        return Registry(self.url, blobs=self.blobs)


pass_ctx = click.make_pass_decorator(_Context)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group()
@click.option("--registry", "url", envvar="JAXPORT_REGISTRY", help="Database URL.")
@click.option("--blobs", envvar="JAXPORT_BLOBS", help="Blob directory or fsspec URL.")
@click.version_option(package_name="jaxport")
@click.pass_context
def main(ctx: click.Context, url: str | None, blobs: str | None) -> None:
    """jaxport: archives and a registry for jax.export.Exported."""
    ctx.obj = _Context(url, blobs)


def _emit(as_json: bool, data: Any, render: Any) -> None:
    if as_json:
        click.echo(json.dumps(_plain(data), indent=2, sort_keys=True))
    else:
        from rich.console import Console

        Console().print(render(data))


def _plain(data: Any) -> Any:
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return {f.name: _plain(getattr(data, f.name)) for f in dataclasses.fields(data)}
    if isinstance(data, list | tuple):
        return [_plain(x) for x in data]
    if isinstance(data, dict):
        return {str(k): _plain(v) for k, v in data.items()}
    return data


def _read(path: Path) -> bytes:
    size = path.stat().st_size
    if size < _PROGRESS_BYTES:
        return path.read_bytes()
    import rich.progress

    with rich.progress.open(path, "rb", description=f"reading {path.name}") as f:
        return f.read()


def _write(path: Path, data: bytes) -> None:
    from jaxport._io import atomic_write

    if len(data) < _PROGRESS_BYTES:
        atomic_write(path, [data])
        return
    from rich.progress import Progress

    chunk = 2**20
    with Progress(transient=True) as progress:
        task = progress.add_task(f"writing {path.name}", total=len(data))

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(data), chunk):
                yield data[i : i + chunk]
                progress.advance(task, min(chunk, len(data) - i))

        atomic_write(path, chunks())


# -- artifacts ------------------------------------------------------------------------------


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--name", help="Name to push under (default: the first function's fun_name).")
@click.option("--alias", "aliases", multiple=True, help="Alias to point at the new version.")
@click.option("--meta", multiple=True, help="Metadata KEY=VALUE (repeatable).")
@json_option
@pass_ctx
def push(
    ctx: _Context,
    files: tuple[Path, ...],
    name: str | None,
    aliases: tuple[str, ...],
    meta: tuple[str, ...],
    as_json: bool,
) -> None:
    """Push FILE... (jaxport archives or jax-native serialized Exported) as one version."""
    from jaxport._cli_files import read_exported

    metadata = _parse_meta(meta)
    with _errors():
        loaded = [read_exported(_missing_ok(f), _read(f)) for f in files]
        vjp_order = min(order for _, order in loaded)
        with ctx.registry() as reg:
            ref = reg.push(
                [e for e, _ in loaded],
                name,
                vjp_order=vjp_order,
                aliases=aliases,
                metadata=metadata,
            )
    _emit(as_json, ref, lambda r: f"pushed {r} ({len(r.variants)} variant(s))")


def _missing_ok(path: Path) -> Path:
    if not path.is_file():
        raise click.BadParameter(f"no such file: {path}", param_hint="FILE")
    return path


def _parse_meta(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--meta")
        out[key] = value
    return out


@main.command()
@click.argument("reference")
@click.option("--platform", help="cpu, cuda, rocm, tpu (default: the local jax backend).")
@click.option("--devices", type=int, help="Device count to run on (default: any).")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
@click.option("--format", "fmt", type=click.Choice(["jaxport", "jax"]), default="jaxport")
@pass_ctx
def pull(
    ctx: _Context, reference: str, platform: str | None, devices: int | None, output: Path, fmt: str
) -> None:
    """Pull NAME[@ALIAS|:VERSION] to -o FILE, digest verified."""
    kwargs: dict[str, Any] = {"nr_devices": devices}
    if platform is not None:
        kwargs["platform"] = platform
    with _errors(), ctx.registry() as reg:
        data = reg.pull_bytes(reference, **kwargs)
        if fmt == "jax":
            from jaxport import inspect, loads

            data = bytes(loads(data).serialize(vjp_order=inspect(data).vjp_order))
        _write(output, data)
    click.echo(f"wrote {output} ({len(data):,} bytes, {fmt})")


@main.command("ls")
@click.argument("name", required=False)
@click.option("--limit", default=100, show_default=True)
@click.option("--after", help="NAME:VERSION of the last row of the previous page.")
@json_option
@pass_ctx
def ls(ctx: _Context, name: str | None, limit: int, after: str | None, as_json: bool) -> None:
    """List versions (all names, or NAME's), one page."""
    from jaxport._cli_render import refs_table
    from jaxport.registry._refs import parse_reference

    with _errors(), ctx.registry() as reg:
        cursor = None
        if after:
            a_name, a_version, _ = parse_reference(after)
            cursor = (a_name, a_version or 0)
        refs = reg.list(name, limit=limit, after=cursor)
    _emit(as_json, refs, refs_table)


@main.command()
@click.option("--name")
@click.option("--platform")
@click.option("--devices", type=int, help="Runs on this many devices (jax's rule).")
@click.option("--jax-version")
@click.option("--calling-convention", type=int)
@click.option("--limit", default=100, show_default=True)
@click.option("--after", type=int, help="variant_id of the last row of the previous page.")
@json_option
@pass_ctx
def search(
    ctx: _Context,
    name: str | None,
    platform: str | None,
    devices: int | None,
    jax_version: str | None,
    calling_convention: int | None,
    limit: int,
    after: int | None,
    as_json: bool,
) -> None:
    """Search variants by platform, device count and versions."""
    from jaxport._cli_render import variants_table

    with _errors(), ctx.registry() as reg:
        found = reg.search(
            name=name,
            platform=platform,
            nr_devices=devices,
            jax_version=jax_version,
            calling_convention_version=calling_convention,
            limit=limit,
            after=after,
        )
    _emit(as_json, found, variants_table)


@main.command()
@click.argument("reference")
@json_option
@pass_ctx
def show(ctx: _Context, reference: str, as_json: bool) -> None:
    """Show NAME[:VERSION|@ALIAS] (default: the newest version): its variants and aliases."""
    from jaxport._cli_render import ref_panel

    with _errors(), ctx.registry() as reg:
        ref = reg.get(reference)
        aliases = {a: v for a, v in reg.aliases(ref.name).items() if v == ref.version}
    _emit(as_json, {"ref": ref, "aliases": aliases}, ref_panel)


@main.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@json_option
def inspect_cmd(file: Path, as_json: bool) -> None:
    """Inspect an archive's header: signature, shardings, platforms, versions, sizes."""
    from jaxport import inspect
    from jaxport._cli_render import info_tables

    with _errors():
        info = inspect(_missing_ok(file))
    _emit(as_json, info, info_tables)


# -- audits ---------------------------------------------------------------------------------


@main.command()
@click.argument("reference", required=False)
@click.option("--platform", help="Platform to audit for (default: the local jax backend).")
@click.option(
    "--python",
    type=click.Path(exists=True),
    help="Audit with the jax of another environment (an interpreter with jaxport installed).",
)
@click.option("--matrix", is_flag=True, help="Print stored findings: variants x jax releases.")
@click.option(
    "--upgrade-to",
    help="A jax release (compare its stored findings) or an interpreter path (audit there first).",
)
@click.option("--no-store", is_flag=True, help="Do not record the findings.")
@json_option
@pass_ctx
def audit(
    ctx: _Context,
    reference: str | None,
    platform: str | None,
    python: str | None,
    matrix: bool,
    upgrade_to: str | None,
    no_store: bool,
    as_json: bool,
) -> None:
    """Audit REFERENCE (NAME[:V|@ALIAS]; default: everything): load, compile, run examples.

    Exit 1 when a variant is not ok (or, with --upgrade-to, when one would break).
    """
    from jaxport._cli_render import findings_table, matrix_table, upgrade_table

    kwargs: dict[str, Any] = {} if platform is None else {"platform": platform}
    with _errors(), ctx.registry() as reg:
        if upgrade_to:
            rows = reg.upgrade_report(upgrade_to, reference, platform=platform)
            _emit(as_json, rows, upgrade_table)
            sys.exit(1 if any(r.breaks for r in rows) else 0)
        if matrix:
            findings = reg.audit_results(name=_name_of(reference), platform=platform)
            _emit(as_json, findings, matrix_table)
            return
        findings = reg.audit(reference, python=python, store=not no_store, **kwargs)
    _emit(as_json, findings, findings_table)
    if any(f.status != "ok" for f in findings):
        sys.exit(1)


def _name_of(reference: str | None) -> str | None:
    return reference.split(":")[0].split("@")[0] if reference else None


@main.command()
@click.argument("old")
@click.argument("new")
@json_option
@pass_ctx
def diff(ctx: _Context, old: str, new: str, as_json: bool) -> None:
    """What changed from OLD to NEW (NAME:V or NAME@ALIAS); exit 1 if anything breaks."""
    from jaxport._cli_render import changes_table

    with _errors(), ctx.registry() as reg:
        changes = reg.diff(old, new)
    _emit(as_json, changes, changes_table)
    if any(c.breaking for c in changes):
        sys.exit(1)


# -- registry maintenance -------------------------------------------------------------------


@main.command()
@click.argument("name")
@click.argument("alias")
@click.argument("version", type=int, required=False)
@click.option("--remove", is_flag=True, help="Remove the alias.")
@pass_ctx
def alias(ctx: _Context, name: str, alias: str, version: int | None, remove: bool) -> None:
    """Point NAME@ALIAS at VERSION (or --remove it)."""
    if version is None and not remove:
        raise click.UsageError("give a VERSION, or --remove")
    with _errors(), ctx.registry() as reg:
        reg.alias(name, alias, None if remove else version)
    click.echo(f"{name}@{alias} -> {'removed' if remove else version}")


@main.command()
@click.argument("reference")
@click.option("--force", is_flag=True, help="Also remove aliases pointing at it.")
@pass_ctx
def rm(ctx: _Context, reference: str, force: bool) -> None:
    """Delete NAME:VERSION (its blobs stay until gc)."""
    from jaxport.registry._refs import parse_reference

    with _errors():
        name, version, _ = parse_reference(reference)
        if version is None:
            raise click.UsageError("give NAME:VERSION")
        with ctx.registry() as reg:
            reg.delete(name, version, force=force)
    click.echo(f"deleted {name}:{version}")


@main.command()
@click.option("--dry-run", is_flag=True)
@click.option("--min-age", default=3600.0, show_default=True, help="Seconds; younger blobs stay.")
@json_option
@pass_ctx
def gc(ctx: _Context, dry_run: bool, min_age: float, as_json: bool) -> None:
    """Remove blobs no variant refers to."""
    with _errors(), ctx.registry() as reg:
        report = reg.gc(dry_run=dry_run, min_age=min_age)
    verb = "would remove" if dry_run else "removed"
    _emit(as_json, report, lambda r: f"{verb} {len(r.digests)} blob(s), {r.bytes:,} bytes")


@main.command()
@json_option
@pass_ctx
def verify(ctx: _Context, as_json: bool) -> None:
    """Recompute every digest; check that database and blob store agree (exit 1 if not)."""
    with _errors(), ctx.registry() as reg:
        report = reg.verify()
    _emit(
        as_json,
        report,
        lambda r: (
            f"checked {r.checked}: {len(r.missing)} missing, {len(r.corrupt)} corrupt, "
            f"{len(r.unreferenced)} unreferenced"
        ),
    )
    if not report.ok:
        sys.exit(1)


@main.group()
def db() -> None:
    """The registry database's schema (alembic migrations)."""


def _url(ctx: _Context) -> str:
    from jaxport.registry._registry import default_url

    return ctx.url or default_url()


@db.command("current")
@json_option
@pass_ctx
def db_current(ctx: _Context, as_json: bool) -> None:
    """Print the database's schema revision and the one this jaxport writes."""
    from jaxport.registry import schema_revision

    with _errors():
        found, head = schema_revision(_url(ctx))
    _emit(
        as_json,
        {"database": found, "jaxport": head},
        lambda d: f"database: {d['database'] or 'none'}\njaxport:  {d['jaxport']}",
    )


@db.command("upgrade")
@pass_ctx
def db_upgrade(ctx: _Context) -> None:
    """Upgrade the database's schema to this jaxport's (back it up first)."""
    from jaxport.registry import upgrade_database

    with _errors():
        before, after = upgrade_database(_url(ctx))
    click.echo(f"upgraded from {before or 'empty'} to {after}")


if __name__ == "__main__":
    main()
