"""The ``jaxport`` command line: each command is one call into the public API.

Exit codes: 0 ok; 1 an error (a ``JaxportError``, or an ``OSError`` such as an output file that
exists), printed once on stderr as ``Type: message`` in the CLI's words (``--force``, not
``force=True``) and never as a traceback; 2 a usage error (click's). Under ``--json`` the
result is one JSON document on stdout and an error is ``{"error": {"type", "message"}}`` on
stderr. jax, SQLAlchemy and rich are imported only by the commands that use them, so
``jaxport --help`` starts fast.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from jaxport._cli.output import json_option
from jaxport._cli.queue import audit_worker
from jaxport._cli.rescue import rescue_cmd
from jaxport._cli.server import log_cmd, serve, token
from jaxport._errors import (
    InvalidNameError,
    JaxportError,
    NotFoundError,
    UnsupportedFeatureError,
)
from jaxport._version import __version__

__all__ = ["main"]

_JSON = "jaxport.json"  # ctx.meta key: --json was given (errors are then JSON too)
_CONTEXT = {"help_option_names": ["-h", "--help"]}
_ENVIRONMENT = (
    ("JAXPORT_REGISTRY", "database URL (SQLAlchemy) or server URL, as --registry"),
    ("JAXPORT_TOKEN", "a registry server's bearer token, as --token"),
    ("JAXPORT_BLOBS", "blob store: a directory or an fsspec URL, as --blobs"),
    ("JAXPORT_BLOBS_OPTIONS", "storage options of a blob store URL (s3fs's): a JSON object"),
    ("JAXPORT_HOME", "directory of the embedded default registry"),
    ("XDG_DATA_HOME", "without JAXPORT_HOME: $XDG_DATA_HOME/jaxport, else ~/.local/share/jaxport"),
)


def _notes(error: BaseException) -> None:
    """Prints on stderr what was added to ``error`` on its way (a push stopped after sending
    parts says what it left on the server: ``registry/_remote.py``)."""
    for note in getattr(error, "__notes__", ()):
        click.echo(note, err=True)


def _wants_json(args: list[str]) -> bool:
    options = args[: args.index("--")] if "--" in args else args
    return "--json" in options


class _Cli(click.Group):
    """The ``jaxport`` group: the one error boundary of every command, and the help epilog."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_JSON] = _wants_json(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from jaxport._cli.output import report_error
        from jaxport._standins import standins_allowed

        as_json = bool(ctx.meta.get(_JSON))
        try:
            with standins_allowed():  # the user's custom pytree nodes are not imported here
                return super().invoke(ctx)
        except (JaxportError, OSError) as e:
            report_error(e, as_json)
            _notes(e)
            ctx.exit(1)
        except KeyboardInterrupt as e:  # click then says "Aborted!"
            _notes(e)
            raise
        except click.ClickException as e:
            if not as_json:
                raise
            report_error(e, as_json)
            ctx.exit(e.exit_code)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from jaxport.registry import RegistryConfig, safe_url

        config = RegistryConfig.from_env()
        with formatter.section("Environment"):
            formatter.write_dl(_ENVIRONMENT)
        with formatter.section("Registry used here"):
            database = config.url or f"sqlite:///{config.home / 'registry.db'}"
            database = safe_url(database)  # help text may be shared
            sqlite = database.startswith("sqlite")
            blobs = (
                safe_url(config.blobs)
                if config.blobs
                else ("blobs/ beside the database file" if sqlite else "none: set JAXPORT_BLOBS")
            )
            # Written as they are: a wrapped path or URL could not be copied.
            formatter.write(f"  database  {database}\n  blobs     {blobs}\n")


class _Context:
    """The registry the options and environment name: ``--registry`` else
    ``$JAXPORT_REGISTRY``, ``--blobs`` else ``$JAXPORT_BLOBS``, ``--token`` else
    ``$JAXPORT_TOKEN`` (for a server URL), as ``jaxport.Registry()`` reads them."""

    def __init__(self, url: str | None, blobs: str | None, token: str | None = None):
        self.url, self.blobs, self.token = url, blobs, token

    def registry(self, *, create: bool = False) -> Any:
        """The registry. A command that only reads passes ``create=False``: a SQLite file
        that does not exist is then ``NotFoundError`` naming its absolute path, never created;
        ``push`` and ``token create`` make it.

        Raises:
            NotFoundError: as above.
            InvalidNameError: ``--token`` for a database URL.
            MissingExtraError: a server URL without httpx (``jaxport[client]``).
        """
        from jaxport.registry import Registry, RegistryConfig, is_server_url

        config = RegistryConfig.from_env()
        url = self.url or config.url
        if is_server_url(url):  # --blobs is refused there: the server has its own store
            return Registry(url, blobs=self.blobs, token=self.token)
        if self.token is not None:
            raise InvalidNameError(
                "--token is for a registry server (an http(s):// --registry or "
                "$JAXPORT_REGISTRY); a database registry takes none"
            )
        if not create:
            _require_database(url or config.database_url())
        return Registry(url, blobs=self.blobs)


def _require_database(url: str) -> None:
    """Refuses a SQLite URL whose file does not exist (a read must not create one).

    Raises:
        NotFoundError: the file is missing; the message names its absolute path.
    """
    from jaxport.registry import sqlite_file

    path = sqlite_file(url)
    if path is not None and not path.exists():
        raise NotFoundError(
            f"no registry database at {path}: nothing was pushed there yet (jaxport push "
            "creates it), or --registry / $JAXPORT_REGISTRY names another file"
        )


pass_ctx = click.make_pass_decorator(_Context)
_PEM = click.Path(exists=True, dir_okay=False, path_type=Path)
allow_custom_call_option = click.option(
    "--allow-custom-call",
    "allow_custom_calls",
    multiple=True,
    metavar="TARGET",
    help="Accept modules that call this custom-call target (repeat), besides those some jax "
    "release since 0.4.30 guarantees stable: only for archives from authors you trust.",
)


@click.group(cls=_Cli, context_settings=_CONTEXT)
@click.option(
    "--registry",
    "url",
    metavar="URL",
    help="Database URL (SQLAlchemy) or a registry server's http(s):// URL. Default: "
    "$JAXPORT_REGISTRY, else the embedded SQLite one.",
)
@click.option(
    "--token",
    metavar="TOKEN",
    help="A registry server's bearer token (jxp_...). Default: $JAXPORT_TOKEN, which keeps it "
    "out of the process list and shell history.",
)
@click.option(
    "--blobs",
    metavar="DIR|URL",
    help="Blob store: a directory or an fsspec URL. Default: $JAXPORT_BLOBS, else blobs/ "
    "beside a SQLite database (a server database needs one).",
)
@click.version_option(__version__, "-V", "--version", prog_name="jaxport")
@click.pass_context
def main(ctx: click.Context, url: str | None, token: str | None, blobs: str | None) -> None:
    """jaxport: archives, a registry and compatibility audits for jax.export.Exported
    functions and for models (parameters and methods).

    References: NAME (the newest version), NAME:VERSION, NAME@ALIAS, or a digest prefix
    sha256:HEX (at least 6 hex digits, e.g. the short form the tables show).
    """
    ctx.obj = _Context(url, blobs, token)
    warnings.showwarning = _show_warning


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """jaxport's warnings as ``Type: message`` on stderr, like its errors (no source line)."""
    from jaxport._errors import JaxportWarning

    if issubclass(category, JaxportWarning):
        click.echo(f"{category.__name__}: {message}", err=True)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning


def _emit(as_json: bool, data: Any, render: Any) -> None:
    if as_json:
        from jaxport._cli.output import emit_json

        emit_json(data)
        return
    from rich.console import Console

    from jaxport._cli.render import Trimmed

    rendered = render(data)
    if isinstance(rendered, str):  # a message: the terminal wraps it, paths stay whole
        Console(highlight=False, soft_wrap=True).print(rendered)
        return
    Console(highlight=False).print(Trimmed(rendered))


def _parse_meta(
    ctx: click.Context, param: click.Parameter, pairs: tuple[str, ...]
) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", ctx, param)
        out[key] = value
    return out


# -- artifacts ------------------------------------------------------------------------------


@main.command()
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
    callback=_parse_meta,
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
@click.option(
    "--audit", is_flag=True, help="Queue audit jobs for the version (see audit --enqueue)."
)
@json_option
@pass_ctx
def push(
    ctx: _Context,
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
        _emit(as_json, result, _pushed)
        return
    from jaxport._cli.queue import enqueued_text

    data = {"pushed": result, "queued": jobs}
    _emit(as_json, data, lambda d: f"{_pushed(d['pushed'])}\n{enqueued_text(d['queued'])}")


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


@main.command()
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
    ctx: _Context,
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
        chosen = _resolve(reg, reference, platform, devices)
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
            _emit(as_json, _pulled_facts(target, chosen.size_bytes, fmt, chosen), _pulled)
            return
        else:
            data = reg.read_blob(chosen.digest)
    if fmt == "jax" and method is None:
        from jaxport import loads

        data = _jax_native(loads(data, allow_custom_calls=allow_custom_calls), chosen.vjp_order)
    write_output(target, data)
    if target != STDOUT:
        _emit(as_json, _pulled_facts(target, len(data), fmt, chosen), _pulled)


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


def _resolve(reg: Any, reference: str, platform: str | None, devices: int | None) -> Any:
    """The variant ``pull`` chooses (``Registry.resolve``), for its name and version."""
    kwargs: dict[str, Any] = {"nr_devices": devices}
    if platform is not None:
        kwargs["platform"] = platform
    chosen = reg.resolve(reference, **kwargs).chosen
    if chosen is None:
        reg.pull_bytes(reference, **kwargs)  # raises the NotFoundError saying what exists
    return chosen


def _pulled(p: dict[str, Any]) -> str:
    v = p["variant"]
    size = f"{p['bytes']:,} bytes, {p['format']}"
    return f"wrote {p['path']} ({size}): {v.name}:{v.version} {v.short_digest}"


def _default_output(chosen: Any, fmt: str, method: str | None = None) -> str:
    """``NAME-VERSION[-METHOD].jaxport`` (``.jaxexport`` for jax-native bytes), in the current
    directory."""
    stem = f"{chosen.name}-{chosen.version}" + (f"-{method}" if method else "")
    return stem + (".jaxexport" if fmt == "jax" else ".jaxport")


@main.command("ls")
@click.argument("name", required=False)
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Page size."
)
@click.option("--after", metavar="NAME:VERSION", help="Start after this row (the next page).")
@json_option
@pass_ctx
def ls(ctx: _Context, name: str | None, limit: int, after: str | None, as_json: bool) -> None:
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
    _emit(as_json, refs, lambda r: _paged(refs_table(r), more))


def _cursor(after: str | None) -> tuple[str, int] | None:
    if after is None:
        return None
    from jaxport.registry import parse_reference

    ref = parse_reference(after)
    if ref.name is None or ref.version is None:
        raise click.BadParameter("expected NAME:VERSION", param_hint="--after")
    return ref.name, ref.version


def _paged(table: Any, more: str | None) -> Any:
    if more is None:
        return table
    from rich.console import Group
    from rich.text import Text

    return Group(table, Text(f"more: {more}"))


@main.command()
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
    ctx: _Context,
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
    _emit(as_json, found, lambda f: _paged(variants_table(f), more))


@main.command()
@click.argument("reference")
@json_option
@pass_ctx
def show(ctx: _Context, reference: str, as_json: bool) -> None:
    """Show a version: time, metadata, aliases, variants, their jax window.

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
    document = {"ref": ref, "aliases": aliases, "signatures": signatures, "windows": windows,
                "loads_here": loads_here}  # fmt: skip
    _emit(as_json, document, ref_panel)


def _unloadable_variants(reg: Any, ref: Any) -> dict[str, str]:
    """Per variant (short digest) that the installed jax cannot load, why: its header read
    (``jaxport.export.unloadable_here``); only variants a newer jax wrote are read."""
    from jaxport.export import jax_versions, release_key, unloadable_here

    installed, out = jax_versions()[0], {}
    for v in ref.variants:
        if v.jax_version == "unknown" or release_key(v.jax_version) <= release_key(installed):
            continue
        info = reg.inspect(f"{ref.name}:{ref.version}", platform=v.platforms[0],
                           nr_devices=v.nr_devices)  # fmt: skip
        out[v.short_digest] = unloadable_here(info)
    return {k: v for k, v in out.items() if v}


@main.command("inspect")
@click.argument("source", metavar="FILE|REFERENCE")
@click.option("--platform", help="With a registry reference: the variant's platform.")
@json_option
@pass_ctx
def inspect_cmd(ctx: _Context, source: str, platform: str | None, as_json: bool) -> None:
    """Inspect an archive's header: FILE|REFERENCE is a file, or a registry reference (only
    its header is read, through a registry server too).

    The signature, shardings, platforms, versions, custom calls and section sizes; of a
    model archive, its methods (signature, platforms, devices, VJP order) and parameters; and
    where it stands in jax's 6-month compatibility window, for the jax installed here.
    """
    from jaxport import inspect
    from jaxport._cli.render import info_tables

    path = Path(source)
    if path.exists() or (platform is None and ("/" in source or source.endswith(".jaxport"))):
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise click.BadParameter(f"Path {source!r} {what}.", param_hint="'FILE|REFERENCE'")
        info = inspect(path)
    else:
        with ctx.registry() as reg:
            info = reg.inspect(source, platform=platform)
    _emit(as_json, info, info_tables)


@main.command()
@click.argument("source")
@click.argument("method", required=False)
@click.option(
    "-i",
    "--input",
    "inputs",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="An .npz of the method's inputs: arr_0, arr_1, ... (numpy.savez(f, *arrays)) in "
    "order, or keyed by their paths as inspect shows them ([0], [1]['w']).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The .npz to write (default: METHOD-out.npz, a function's FUNCTION-out.npz, in the "
    "current directory).",
)
@click.option("--platform", help="With a registry reference: the variant's platform.")
@click.option(
    "--devices", type=click.IntRange(min=1), help="With a registry reference: its device count."
)
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="Time the call may take: it runs in a child process, killed at the limit.",
)
@allow_custom_call_option
@json_option
@pass_ctx
def run(
    ctx: _Context,
    source: str,
    method: str | None,
    inputs: Path,
    output: Path | None,
    platform: str | None,
    devices: int | None,
    force: bool,
    timeout: float,
    allow_custom_calls: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run a model's method, or a function archive, on arrays from an .npz; write its outputs
    to an .npz.

    SOURCE: an archive file (an existing file, or a path with a '/' or ending in .jaxport) or
    a registry reference (see jaxport -h). A model needs METHOD; a function takes none (or its
    own name), and the .npz's arrays are bound to its positional arguments in order. The
    outputs are named out plus their key paths (out, out[0], out['logits']); a table shows
    each one's shape, dtype, min, max and first values. The call runs in a child process
    that is killed after --timeout seconds (TimeLimitError) and dies with this one.
    """
    from jaxport._cli import runner as _cli_run
    from jaxport._cli.output import check_output, write_output
    from jaxport._cli.render import outputs_table

    if output is not None and str(output) == "-":
        raise click.BadParameter(
            "run writes an .npz file; '-' (stdout) is not supported", param_hint="-o"
        )
    opened, archive = _open_runnable(ctx, source, platform, devices, allow_custom_calls)
    if isinstance(opened, _Function):
        exp = opened.exported
        name = _function_method(source, exp, method)
        specs = _cli_run.function_specs(exp)
        _cli_run.load_inputs(inputs, specs, name, kind="function")  # checked here first
        target = output or Path(_function_output(name))
        check_output(target, force=force)  # after the source and inputs, whose errors come first
    else:
        if method is None:
            raise click.UsageError(
                f"{source} is a model: name one of its methods ({', '.join(opened.exported)})"
            )
        name = method
        specs = _cli_run.input_specs(opened, method)
        _cli_run.load_inputs(inputs, specs, method)  # checked here first
        target = output or Path(f"{method}-out.npz")
        check_output(target, force=force)  # after the source and inputs, whose errors come first
    data, summaries = _cli_run.call_in_child(
        archive,
        None if isinstance(opened, _Function) else name,
        inputs,
        timeout=timeout,
        allow_custom_calls=allow_custom_calls,
    )
    write_output(target, data)
    ran = {
        "path": str(target),
        "bytes": len(data),
        "kind": "function" if isinstance(opened, _Function) else "model",
        "method": name,
        "outputs": summaries,
    }
    _emit(as_json, ran, outputs_table)


class _Function:
    """A function archive ``run`` runs (its ``Exported``)."""

    def __init__(self, exported: Any) -> None:
        self.exported = exported


def _function_method(source: str, exp: Any, method: str | None) -> str:
    """The name a function's run goes by (its ``fun_name``); a METHOD other than that name is
    refused (``RunError``): a function archive has no methods."""
    if method is not None and method != exp.fun_name:
        from jaxport._errors import RunError

        raise RunError(
            f"{source} is a function archive ({exp.fun_name}), not a model: it has no method "
            f"{method!r}; leave out METHOD"
        )
    return str(exp.fun_name)


def _function_output(fun_name: str) -> str:
    """``FUNCTION-out.npz``, or ``out.npz`` where the function's name is not a plain file
    name (``<lambda>``)."""
    from jaxport._grammar import NAME

    return f"{fun_name}-out.npz" if NAME.fullmatch(fun_name) else "out.npz"


def _open_runnable(
    ctx: _Context,
    source: str,
    platform: str | None,
    devices: int | None,
    allow_custom_calls: tuple[str, ...] = (),
) -> tuple[Any, Path]:
    """What ``run`` runs: a model (``jaxport.load_model``) or a function (``_Function``), and
    its archive file: SOURCE, else a temporary file pulled from the registry (removed when
    the command ends).

    Raises:
        click.UsageError: --platform or --devices with a file.
        FileNotFoundError, IsADirectoryError: SOURCE looks like a file and is none.
        JaxportError: as ``jaxport.load``, ``load_model``, ``Registry.pull`` or ``pull_model``.
    """
    import errno

    path = Path(source)
    if path.is_file():
        if platform is not None or devices is not None:
            raise click.UsageError("--platform and --devices choose a registry variant, not a file")
        return _open_file(path, allow_custom_calls), path
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory, not an archive", source)
    if "/" in source or path.suffix == ".jaxport":
        raise FileNotFoundError(errno.ENOENT, "no such file", source)
    kwargs: dict[str, Any] = {"nr_devices": devices}
    if platform is not None:
        kwargs["platform"] = platform
    import tempfile

    work = click.get_current_context().with_resource(
        tempfile.TemporaryDirectory(prefix="jaxport-run-")
    )
    pulled = Path(work, "archive.jaxport")
    with ctx.registry() as reg:
        _resolve(reg, source, platform, devices)  # NotFoundError saying what exists
        reg.pull_file(source, pulled, **kwargs)
    return _open_file(pulled, allow_custom_calls), pulled


def _open_file(path: Path, allow_custom_calls: tuple[str, ...]) -> Any:
    """A model or a ``_Function`` read from the archive at ``path``."""
    from jaxport import inspect, load, load_model

    if inspect(path).kind != "model":
        return _Function(load(path, allow_custom_calls=allow_custom_calls))
    return load_model(path, allow_custom_calls=allow_custom_calls)


# -- audits ---------------------------------------------------------------------------------


def _timeout_option(text: str) -> Callable[[Any], Any]:
    """``--timeout SECONDS`` (default 120; a hanging module is stopped sooner, by the module
    sandbox)."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=120.0,
        show_default=True,
        metavar="SECONDS",
        help=text,
    )


@main.command()
@click.argument("reference", required=False)
@click.option(
    "--platform",
    help="Audit only for this platform (cpu, cuda, rocm, tpu, gpu; default: every platform "
    "each variant was exported for; those without a device here are not-run).",
)
@click.option(
    "--python",
    type=click.Path(exists=True, dir_okay=False),
    help="Audit with the jax of another environment (an interpreter with jaxport installed).",
)
@click.option(
    "--matrix",
    is_flag=True,
    help="Print stored findings: variants x (jax release, platform).",
)
@click.option(
    "--upgrade-to",
    metavar="RELEASE|PYTHON",
    help="A jax release (compare its stored findings) or an interpreter path (audit there first).",
)
@click.option(
    "--expiring-before",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    metavar="YYYY-MM-DD",
    help="List the variants whose jax 6-month window ends before this date (and those whose "
    "end is unknown); runs nothing, exits 0.",
)
@click.option("--no-store", is_flag=True, help="Do not record the findings.")
@click.option(
    "--force", is_flag=True, help="Measure again even where an identical finding is stored."
)
@click.option(
    "--static",
    is_flag=True,
    help="Only the facts recorded at push against this jax's capabilities (no compile): "
    "incompatible where they decide a refusal, else unknown (never ok).",
)
@click.option(
    "-j",
    "--jobs",
    "workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Worker processes auditing at once (each imports jax once).",
)
@click.option(
    "--jax",
    "jax_release",
    metavar="RELEASE",
    help="Audit with this jax release, in an environment made once under "
    "$JAXPORT_HOME/envs/jax-RELEASE (minutes the first time).",
)
@click.option(
    "--enqueue",
    is_flag=True,
    help="Queue the audits for `jaxport audit-worker` on each platform's hosts (PostgreSQL).",
)
@click.option(
    "--tolerance",
    metavar="TOL|rtol=R,atol=A",
    help="Compare golden examples with this tolerance instead of the stored one (push's "
    "tolerance, else the rule per dtype and output magnitude); its findings are kept apart.",
)
@_timeout_option("Seconds one variant's audit may take before it is killed (a crash).")
@json_option
@pass_ctx
def audit(
    ctx: _Context,
    reference: str | None,
    platform: str | None,
    python: str | None,
    matrix: bool,
    upgrade_to: str | None,
    expiring_before: datetime.datetime | None,
    no_store: bool,
    force: bool,
    static: bool,
    workers: int,
    jax_release: str | None,
    enqueue: bool,
    tolerance: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Audit artifacts: load, compile, run examples.

    REFERENCE names what to audit (default: everything; an unknown or deleted name is an
    error). Statuses: ok, incompatible, compile-error, mismatch, error, crash, not-run (could
    not be measured here: no such device, too few devices), unknown (--static: nothing
    recorded refuses it; never ok). Exit 1 when a measured status is not ok (or, with
    --upgrade-to, when one would break); not-run and unknown alone exit 0. Incremental:
    a finding stored for the same archive, check level, jax, jaxlib, platform and device count
    is reused (--force: measure again). A progress bar is drawn on stderr when it is a
    terminal (never with --json). Every report says which jax and jaxlib made it, and when
    (UTC). --expiring-before DATE audits nothing: it lists the variants whose jax window ends
    before DATE (with the newest jax an audit found each ok under) and exits 0.
    """
    from jaxport._cli import audit_reports as _cli_reports
    from jaxport._cli.progress import audit_progress
    from jaxport._cli.render import findings_table, matrix_table, upgrade_table

    _check_audit_flags(click.get_current_context(), matrix, upgrade_to, python)
    kwargs: dict[str, Any] = {} if platform is None else {"platform": platform}
    if tolerance is not None:
        kwargs["tolerance"] = tolerance
    if enqueue:
        if (
            python
            or matrix
            or upgrade_to
            or no_store
            or force
            or static
            or jax_release
            or (tolerance is not None)
        ):
            raise click.UsageError("--enqueue takes REFERENCE, --platform and --timeout only")
        _enqueue(ctx, reference, platform, timeout, as_json)
        return
    if expiring_before is not None and (matrix or upgrade_to or python or jax_release):
        raise click.UsageError(
            "--expiring-before lists stored facts and runs no audit: it takes REFERENCE only"
        )
    with ctx.registry() as reg:
        if expiring_before is not None:
            from jaxport._cli.window import windows_table

            rows = reg.windows(reference, expiring_before=expiring_before.date())
            _emit(as_json, rows, windows_table)
            return
        if upgrade_to:
            rows = reg.upgrade_report(
                upgrade_to, reference, platform=platform, store=not no_store, timeout=timeout
            )
            _emit(as_json, _cli_reports.upgrade_report(rows, upgrade_to), upgrade_table)
            click.get_current_context().exit(1 if any(r.breaks for r in rows) else 0)
        if matrix:
            findings = _stored_findings(reg, reference, platform)
            _emit(as_json, _cli_reports.matrix_report(findings), matrix_table)
            return
        if python is not None and jax_release is not None:
            raise click.UsageError("give --python or --jax, not both")
        with audit_progress(as_json) as progress:
            findings = reg.audit(
                reference,
                python=python,
                store=not no_store,
                timeout=timeout,
                force=force,
                level="static" if static else "full",
                workers=workers,
                jax=jax_release,
                progress=progress,
                **kwargs,
            )
    report = _cli_reports.audit_report(
        findings, other_python=python is not None or jax_release is not None
    )
    _emit(as_json, report, findings_table)
    if any(f.status not in ("ok", "not-run", "unknown") for f in findings):
        click.get_current_context().exit(1)


def _enqueue(
    ctx: _Context, reference: str | None, platform: str | None, timeout: float, as_json: bool
) -> None:
    from jaxport._cli.queue import enqueued_text

    with ctx.registry() as reg:
        jobs = reg.enqueue_audits(reference, platform=platform, timeout=timeout)
    _emit(as_json, jobs, enqueued_text)


#: Options of ``audit`` that run an audit: meaningless with --matrix, which only reads.
_RUNS_AN_AUDIT = (
    "python", "no_store", "timeout", "force", "static", "workers", "jax_release", "tolerance",
)  # fmt: skip
#: Options of ``audit`` that --upgrade-to does not take.
_NOT_WITH_UPGRADE = {"force", "static", "workers", "jax_release", "tolerance"}


def _check_audit_flags(
    ctx: click.Context, matrix: bool, upgrade_to: str | None, python: str | None
) -> None:
    """Refuses ``audit`` flags that cannot combine (a usage error, exit 2), rather than
    dropping one silently.

    Raises:
        click.UsageError: --matrix with --upgrade-to, or with an option that runs an audit
            (--python, --no-store, --timeout); --upgrade-to with --python (--upgrade-to
            PYTHON names the interpreter); --upgrade-to with --force, --static, --jobs or
            --jax.
    """
    given = {
        name
        for name in _RUNS_AN_AUDIT
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    }
    if matrix and upgrade_to:
        raise click.UsageError("--matrix and --upgrade-to are two reports: give one")
    if matrix and given:
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in sorted(given))
        raise click.UsageError(
            f"--matrix prints stored findings and runs no audit: leave out {flags}"
        )
    if upgrade_to and python:
        raise click.UsageError(
            "--upgrade-to PYTHON audits with that interpreter: leave out --python"
        )
    if upgrade_to and (given & _NOT_WITH_UPGRADE):
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in sorted(given & _NOT_WITH_UPGRADE))
        raise click.UsageError(
            f"--upgrade-to compares two releases' findings (auditing what is missing): "
            f"leave out {flags}"
        )


def _stored_findings(reg: Any, reference: str | None, platform: str | None) -> list[Any]:
    """The stored findings ``--matrix`` shows: every variant's, a name's, or those of the one
    version a reference names (``NAME:VERSION``, ``NAME@ALIAS``, a digest prefix)."""
    from jaxport.registry import parse_reference

    if reference is None:
        return list(reg.audit_results(platform=platform, limit=1_000_000))
    ref = parse_reference(reference)
    if ref.name is not None and ref.version is None and ref.alias is None:
        return list(reg.audit_results(name=ref.name, platform=platform, limit=1_000_000))
    version = reg.get(reference)
    found = reg.audit_results(name=version.name, platform=platform, limit=1_000_000)
    return [f for f in found if f.version == version.version]


@main.command()
@click.argument("old")
@click.argument("new")
@json_option
@pass_ctx
def diff(ctx: _Context, old: str, new: str, as_json: bool) -> None:
    """What changed between two versions.

    OLD and NEW are references; exit 1 if anything breaks.
    """
    from jaxport._cli.render import changes_table

    with ctx.registry() as reg:
        changes = reg.diff(old, new)
    _emit(as_json, changes, changes_table)
    if any(c.breaking for c in changes):
        click.get_current_context().exit(1)


# -- registry maintenance -------------------------------------------------------------------


@main.command()
@click.argument("name")
@click.argument("alias", required=False)
@click.argument("version", type=click.IntRange(min=1), required=False)
@click.option("--remove", is_flag=True, help="Remove NAME@ALIAS.")
@json_option
@pass_ctx
def alias(
    ctx: _Context, name: str, alias: str | None, version: int | None, remove: bool, as_json: bool
) -> None:
    """Move, remove or list aliases.

    NAME ALIAS VERSION points NAME@ALIAS at VERSION; NAME ALIAS --remove removes it; NAME
    alone lists where each alias points and every move it made.
    """
    if alias is None:
        with ctx.registry() as reg:
            data = {"name": name, "aliases": reg.aliases(name), "history": reg.alias_history(name)}
        from jaxport._cli.render import alias_tables

        _emit(as_json, data, alias_tables)
        return
    if (version is None) != remove:
        raise click.UsageError("give NAME ALIAS VERSION, or NAME ALIAS --remove")
    with ctx.registry() as reg:
        reg.alias(name, alias, version)
    moved = {"name": name, "alias": alias, "version": version}
    _emit(as_json, moved, lambda m: f"{name}@{alias} -> {version or 'removed'}")


@main.command()
@click.argument("reference", metavar="NAME[:VERSION]")
@click.option("--force", is_flag=True, help="Delete even while aliases point at it.")
@json_option
@pass_ctx
def rm(ctx: _Context, reference: str, force: bool, as_json: bool) -> None:
    """Delete a version, or a whole name.

    NAME[:VERSION]: one version, or every version of NAME. Blobs stay until gc.
    """
    from jaxport.registry import parse_reference

    ref = parse_reference(reference)
    if ref.name is None or ref.alias is not None:
        raise click.BadParameter("expected NAME or NAME:VERSION", param_hint="NAME[:VERSION]")
    with ctx.registry() as reg:
        reg.delete(ref.name, ref.version, force=force)
    _emit(as_json, {"name": ref.name, "version": ref.version}, lambda _: f"deleted {ref}")


@main.command()
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
def gc(ctx: _Context, dry_run: bool, min_age: float, temp_age: float, as_json: bool) -> None:
    """Remove blobs nothing refers to, and stale temporary files."""
    from jaxport._cli.render import gc_summary

    with ctx.registry() as reg:
        report = reg.gc(dry_run=dry_run, min_age=min_age, temp_age=temp_age)
    _emit(as_json, report, gc_summary)


@main.command()
@click.argument("targets", nargs=-1, metavar="[REFERENCE|FILE]...")
@click.option(
    "--deep",
    is_flag=True,
    help="Also read every archive in full (each module parsed, in a worker process): a "
    "header whose custom calls disagree with its modules is invalid.",
)
@click.option(
    "--signatures",
    is_flag=True,
    help="Instead: check that each TARGET (default: every version) is signed by one of the "
    "--key/--certificate given; a FILE's signature is FILE.sig.",
)
@click.option("--key", "keys", multiple=True, type=_PEM, help="A PEM public key (repeat).")
@click.option(
    "--certificate", "certificates", multiple=True, type=_PEM,
    help="PEM CA certificates a certificate signature must lead to (repeat).",
)  # fmt: skip
@_timeout_option(
    "With --deep or FILE...: seconds one archive may take before it is killed (invalid)."
)
@json_option
@pass_ctx
def verify(
    ctx: _Context,
    targets: tuple[str, ...],
    deep: bool,
    signatures: bool,
    keys: tuple[Path, ...],
    certificates: tuple[Path, ...],
    timeout: float,
    as_json: bool,
) -> None:
    """Check the registry's blobs, or [REFERENCE|FILE]...: files in full, or signers.

    No TARGET: recomputes every digest and checks that database and blob store agree (exit 1
    if not). FILE... (each an existing path; no registry is opened): each archive file,
    function or model, checked in full as loading it would: header, every section's sha256,
    every module through the module sandbox, every tensor (exit 1 if any fails). With
    --signatures: one line per file or variant, exit 1 if any is not signed by one of the keys
    given (no signature, other signers, one that does not verify).
    """
    if signatures or keys or certificates:
        _verify_signatures(ctx, targets, signatures, keys + certificates, as_json)
        return
    if targets:
        _verify_files(targets, timeout, as_json)
        return
    from jaxport._cli.render import verify_summary

    with ctx.registry() as reg:
        report = reg.verify(deep=deep, timeout=timeout)
    _emit(as_json, report, verify_summary)
    if not report.ok:
        click.get_current_context().exit(1)


def _verify_files(targets: tuple[str, ...], timeout: float, as_json: bool) -> None:
    from jaxport._cli.verify_files import file_lines, missing_paths, verify_files

    if missing := missing_paths(targets):
        raise click.UsageError(
            f"no such file: {', '.join(missing)} (without --signatures, verify checks FILEs, "
            "each an existing path; leave out TARGET to check the whole registry)"
        )
    checks = verify_files(targets, timeout=timeout)
    if as_json:
        _emit(as_json, checks, file_lines)
    else:  # one line per file, never wrapped (a record to grep), paths never read as markup
        click.echo(file_lines(checks))
    if not all(c.ok for c in checks):
        click.get_current_context().exit(1)


def _verify_signatures(
    ctx: _Context, targets: tuple[str, ...], signatures: bool, keys: tuple[Path, ...], as_json: bool
) -> None:
    from jaxport._cli.sign import verify_lines, verify_targets

    if not signatures or not keys:
        raise click.UsageError("check signatures with --signatures and --key or --certificate")
    rows = verify_targets(ctx.registry, targets, keys)
    _emit(as_json, rows, verify_lines)
    if not all(r["ok"] for r in rows):
        click.get_current_context().exit(1)


@main.command()
@click.argument("target", metavar="FILE|REFERENCE")
@click.option("--key", "key", required=True, type=_PEM, help="PEM EC private key (P-256/384/521).")
@click.option(
    "--password-env", metavar="VAR", help="Read the key's password from this environment variable."
)
@click.option(
    "--certificate", type=_PEM, help="The key's PEM certificate: sign with it (and --chain)."
)
@click.option(
    "--chain", multiple=True, type=_PEM,
    help="With --certificate: the issuing CA certificates up to the root (repeat).",
)  # fmt: skip
@click.option("-o", "--output", type=Path, help="FILE's signature (default: FILE.sig).")
@json_option
@pass_ctx
def sign(
    ctx: _Context,
    target: str,
    key: Path,
    password_env: str | None,
    certificate: Path | None,
    chain: tuple[Path, ...],
    output: Path | None,
    as_json: bool,
) -> None:
    """Sign FILE|REFERENCE: a FILE (writes FILE.sig) or every variant of a registry version.

    A Sigstore bundle (OpenSSF model-signing) over the archive's sha256, stored beside the
    version for a REFERENCE; needs pip install "jaxport[signing]". An existing path is a
    FILE, anything else a REFERENCE.
    """
    from jaxport._cli.sign import password_from, sign_target, signed_text

    data = sign_target(
        ctx.registry, target, key, password=password_from(password_env),
        certificate=certificate, chain=chain, output=output,
    )  # fmt: skip
    _emit(as_json, data, signed_text)


@main.group(context_settings=_CONTEXT)
def db() -> None:
    """The registry database's schema (alembic migrations)."""


def _url(ctx: _Context, *, create: bool = False) -> str:
    from jaxport.registry import RegistryConfig

    url = ctx.url or RegistryConfig.from_env().database_url()
    if not create:
        _require_database(url)
    return url


@db.command("current")
@json_option
@pass_ctx
def db_current(ctx: _Context, as_json: bool) -> None:
    """Print the database's schema revision and the one this jaxport writes."""
    from jaxport.migrations import HEAD
    from jaxport.registry import (
        RegistryConfig,
        check_sqlite_directory,
        schema_revision,
        sqlite_file,
    )

    config = RegistryConfig.from_env()
    url = ctx.url or config.database_url()
    path = sqlite_file(url)
    if path is not None and not path.exists():  # a read makes no file: there is no schema
        if url != config.default_database_url():
            check_sqlite_directory(url)  # a missing directory is an error, named
        found, head = None, HEAD
    else:
        found, head = schema_revision(url)
    _emit(
        as_json,
        {"database": found, "jaxport": head},
        lambda d: f"database: {d['database'] or 'none'}\njaxport:  {d['jaxport']}",
    )


@db.command("upgrade")
@json_option
@pass_ctx
def db_upgrade(ctx: _Context, as_json: bool) -> None:
    """Upgrade the database's schema to this jaxport's (back it up first)."""
    from jaxport.registry import upgrade_database

    before, after = upgrade_database(_url(ctx, create=True))
    _emit(
        as_json,
        {"before": before, "after": after},
        lambda d: f"upgraded from {d['before'] or 'empty'} to {d['after']}",
    )


main.add_command(audit_worker)
main.add_command(rescue_cmd)
main.add_command(serve)
main.add_command(token)
main.add_command(log_cmd)
