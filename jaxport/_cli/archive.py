"""``jaxport inspect``, ``run`` and ``verify``: archives, as files or in a registry.

``inspect FILE`` and ``verify FILE...`` open no registry; ``run`` calls a model's method or a
function in a child process (``runner.call_in_child``) that is killed at ``--timeout``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import (
    PEM,
    CliContext,
    allow_custom_call_option,
    emit,
    pass_ctx,
    resolve_variant,
    timeout_option,
)
from jaxport._cli.output import json_option

__all__ = ["inspect_cmd", "run", "verify"]


@click.command("inspect")
@click.argument("source", metavar="FILE|REFERENCE")
@click.option("--platform", help="With a registry reference: the variant's platform.")
@json_option
@pass_ctx
def inspect_cmd(ctx: CliContext, source: str, platform: str | None, as_json: bool) -> None:
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
    emit(as_json, info, info_tables)


@click.command()
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
    "--use-compiled",
    is_flag=True,
    help="With a registry reference: first put the compiled executables (jaxport compile) "
    "that a trusted key signed for this host into jax's cache, so that the call loads them "
    "instead of compiling; what is not used is said (CompiledFallbackWarning).",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    type=PEM,
    help="With --use-compiled: a PEM public key whose compiled sets are trusted (repeat; "
    "default: the files in $JAXPORT_COMPILED_KEYS).",
)
@timeout_option(
    "Time the call may take: it runs in a child process, killed at the limit.", default=600.0
)
@allow_custom_call_option
@json_option
@pass_ctx
def run(
    ctx: CliContext,
    source: str,
    method: str | None,
    inputs: Path,
    output: Path | None,
    platform: str | None,
    devices: int | None,
    force: bool,
    use_compiled: bool,
    trusted_keys: tuple[Path, ...],
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
    --use-compiled (a registry reference only) first writes the verified compiled executables
    into jax's cache; the result says whether they were used and jax's cache hits.
    """
    from jaxport._cli import runner
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
        specs = runner.function_specs(exp)
        runner.load_inputs(inputs, specs, name, kind="function")  # checked here first
        target = output or Path(_function_output(name))
        check_output(target, force=force)  # after the source and inputs, whose errors come first
    else:
        if method is None:
            raise click.UsageError(
                f"{source} is a model: name one of its methods ({', '.join(opened.exported)})"
            )
        name = method
        specs = runner.input_specs(opened, method)
        runner.load_inputs(inputs, specs, method)  # checked here first
        target = output or Path(f"{method}-out.npz")
        check_output(target, force=force)  # after the source and inputs, whose errors come first
    if trusted_keys and not use_compiled:
        raise click.UsageError("--trusted-key goes with --use-compiled")
    use = None
    if use_compiled:
        from jaxport._cli.compiled import compiled_use

        chosen = None if isinstance(opened, _Function) else name
        use = compiled_use(ctx, source, chosen, platform, devices, trusted_keys)
    report: dict[str, Any] = {}
    data, summaries = runner.call_in_child(
        archive,
        None if isinstance(opened, _Function) else name,
        inputs,
        timeout=timeout,
        allow_custom_calls=allow_custom_calls,
        compiled_cache=use.cache_dir if use is not None and use.used else None,
        report=report,
    )
    write_output(target, data)
    ran = {
        "path": str(target),
        "bytes": len(data),
        "kind": "function" if isinstance(opened, _Function) else "model",
        "method": name,
        "outputs": summaries,
    }
    if use is not None:
        from jaxport._cli.compiled import compiled_said

        said = ran["compiled"] = compiled_said(use, report.get("cache_hits", 0))
        if not as_json:
            click.echo(f"compiled executables: {said['said']}", err=True)
    emit(as_json, ran, outputs_table)


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
    ctx: CliContext,
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
        resolve_variant(reg, source, platform, devices)  # NotFoundError saying what exists
        reg.pull_file(source, pulled, **kwargs)
    return _open_file(pulled, allow_custom_calls), pulled


def _open_file(path: Path, allow_custom_calls: tuple[str, ...]) -> Any:
    """A model or a ``_Function`` read from the archive at ``path``."""
    from jaxport import inspect, load, load_model

    if inspect(path).kind != "model":
        return _Function(load(path, allow_custom_calls=allow_custom_calls))
    return load_model(path, allow_custom_calls=allow_custom_calls)


@click.command()
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
@click.option("--key", "keys", multiple=True, type=PEM, help="A PEM public key (repeat).")
@click.option(
    "--certificate", "certificates", multiple=True, type=PEM,
    help="PEM CA certificates a certificate signature must lead to (repeat).",
)  # fmt: skip
@timeout_option(
    "With --deep or FILE...: seconds one archive may take before it is killed (invalid)."
)
@json_option
@pass_ctx
def verify(
    ctx: CliContext,
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
    emit(as_json, report, verify_summary)
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
        emit(as_json, checks, file_lines)
    else:  # one line per file, never wrapped (a record to grep), paths never read as markup
        click.echo(file_lines(checks))
    if not all(c.ok for c in checks):
        click.get_current_context().exit(1)


def _verify_signatures(
    ctx: CliContext,
    targets: tuple[str, ...],
    signatures: bool,
    keys: tuple[Path, ...],
    as_json: bool,
) -> None:
    from jaxport._cli.sign import verify_lines, verify_targets

    if not signatures or not keys:
        raise click.UsageError("check signatures with --signatures and --key or --certificate")
    rows = verify_targets(ctx.registry, targets, keys)
    emit(as_json, rows, verify_lines)
    if not all(r["ok"] for r in rows):
        click.get_current_context().exit(1)
