"""``jaxport compile``: compiled executables of a version's methods for this host, stored as
signed sets beside it (``Registry.compile``); ``jaxport run --use-compiled`` uses them."""

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
    timeout_option,
)
from jaxport._cli.output import json_option
from jaxport._cli.sign import password_from

__all__ = ["compile_cmd", "compiled_said", "compiled_text", "compiled_use"]


def compiled_use(
    ctx: CliContext,
    source: str,
    method: str | None,
    platform: str | None,
    devices: int | None,
    trusted_keys: tuple[Path, ...],
) -> Any:
    """``run --use-compiled``: the ``CompiledUse`` of the variant of ``source`` (a registry
    reference) for ``method``, its sets written into this process's jax cache directory
    (which the run's child is given). Where none is used the result's line says why
    (``compiled_said``); where some are and others not, a ``CompiledFallbackWarning`` names
    the others.

    Raises:
        click.UsageError: ``source`` is a file.
        SignatureError: a trusted key that does not load.
    """
    import os
    import warnings

    from jaxport.registry import (
        COMPILED_KEYS_ENV,
        CompiledFallbackWarning,
        CompiledPolicy,
        CompiledUse,
    )

    if Path(source).is_file():
        raise click.UsageError("--use-compiled needs a registry reference, not a file")
    keys: list[str | Path] = list(trusted_keys) or [
        k for k in os.environ.get(COMPILED_KEYS_ENV, "").split(os.pathsep) if k.strip()
    ]
    if not keys:
        use = CompiledUse(False, f"no trusted key: --trusted-key PEM or ${COMPILED_KEYS_ENV}")
    else:
        kwargs: dict[str, Any] = {"nr_devices": devices, "method": method}
        if platform is not None:
            kwargs["platform"] = platform
        with ctx.registry() as reg:
            use = reg.use_compiled(source, policy=CompiledPolicy(keys), **kwargs)
    if use.used and use.skipped:  # the result's line says only what was used
        why = "; ".join(use.skipped.values())
        warnings.warn(f"not used, jax compiles: {why}", CompiledFallbackWarning, stacklevel=2)
    return use


def compiled_said(use: Any, cache_hits: int) -> dict[str, Any]:
    """What ``run --use-compiled`` reports: ``used``, ``reason``, ``cache_hits`` (the child's
    persistent-cache hits: >= 1 when the call loaded the executable) and a sentence."""
    if not use.used:
        said = f"not used: {use.reason}"
    elif cache_hits:
        said = (
            f"used ({use.files} file(s), signed by {use.signer[:12]}); jax cache hits: {cache_hits}"
        )
    else:
        said = "written, but jax compiled anyway (no cache hit: its key differs from the call's)"
    return {"used": use.used, "reason": use.reason, "cache_hits": cache_hits, "said": said}


def compiled_text(data: dict[str, Any]) -> str:
    """A line per method of each variant, what was stored (and a second, indented: for
    which host, its files, its signer) or why not: within 80 columns for a short name."""
    lines = []
    for s in data["sets"]:
        what = f"{data['reference']} sha256:{s.digest[:12]} {s.method or '(function)'}"
        if s.status in ("stored", "already stored"):
            lines.append(
                f"{s.status}: {what}\n  for {s.platform} {s.device_kind!r}, jaxlib "
                f"{s.jaxlib_version}: {len(s.files)} file(s), {s.size} bytes, signed by "
                f"{s.signer[:12]}"
            )
        else:
            lines.append(f"{s.status}: {what}: {s.reason}")
    return "\n".join(lines) or "nothing to compile"


@click.command("compile")
@click.argument("reference")
@click.option(
    "--key", type=PEM,
    help="PEM EC private key that signs each set (without it nothing is stored: an unsigned "
    "set is never used).",
)  # fmt: skip
@click.option(
    "--password-env", metavar="VAR", help="Read the key's password from this environment variable."
)
@click.option("--platform", help="Only this platform's variants (default: this host's).")
@timeout_option(
    "Time one variant's compile may take (its child process is then killed).", default=600.0
)
@allow_custom_call_option
@json_option
@pass_ctx
def compile_cmd(
    ctx: CliContext,
    reference: str,
    key: Path | None,
    password_env: str | None,
    platform: str | None,
    timeout: float,
    allow_custom_calls: tuple[str, ...],
    as_json: bool,
) -> None:
    """Compile REFERENCE's methods for this host and store the executables, signed.

    Each variant this host runs is compiled in a child process with jax's persistent
    compilation cache on; what the cache wrote is stored per method, keyed by the variant,
    platform, device kind, jax and jaxlib release and compile options, with a manifest signed
    by --key. `jaxport run --use-compiled` and Registry.pull_model(use_compiled=...) use a set
    only when a trusted key signed it and it matches the host. Running it again keeps a set
    already stored by the same key.
    """
    kwargs: dict[str, Any] = {
        "private_key": key,
        "password": password_from(password_env),
        "allow_custom_calls": allow_custom_calls,
        "timeout": timeout,
    }
    if platform is not None:
        kwargs["platform"] = platform
    with ctx.registry() as reg:
        made = reg.compile(reference, **kwargs)
    emit(as_json, {"reference": reference, "sets": made}, compiled_text)
