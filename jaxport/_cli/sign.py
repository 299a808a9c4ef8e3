"""``jaxport sign`` and ``jaxport verify --signatures``: a TARGET that is an existing path is a
local file (its signature ``FILE.sig`` beside it), anything else a registry reference."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from jaxport._cli.common import PEM, CliContext, emit, pass_ctx
from jaxport._cli.output import json_option

__all__ = [
    "password_from",
    "sign",
    "sign_target",
    "signed_text",
    "verify_lines",
    "verify_targets",
]


def password_from(variable: str | None) -> str | None:
    """The key's password from the environment variable named (never from the command line).

    Raises:
        click.UsageError: the variable is not set.
    """
    if variable is None:
        return None
    value = os.environ.get(variable)
    if value is None:
        raise click.UsageError(f"--password-env: the environment variable {variable} is not set")
    return value


def sign_target(
    registry: Callable[[], Any],
    target: str,
    key: Path,
    *,
    password: str | None,
    certificate: Path | None,
    chain: Sequence[Path],
    output: Path | None,
) -> dict[str, Any]:
    """Signs a file (writes its signature) or a registry version (stores the bundles)."""
    if Path(target).exists():
        from jaxport._signing import file_sha256, sign_file

        written = sign_file(
            target, private_key=key, signature=output, password=password,
            certificate=certificate, certificate_chain=chain,
        )  # fmt: skip
        return {"file": target, "signature": str(written), "digest": file_sha256(target)}
    if output is not None:
        raise click.UsageError("-o/--output is for a FILE; a reference's signatures are stored")
    with registry() as reg:
        made = reg.sign(
            target, private_key=key, password=password, certificate=certificate,
            certificate_chain=chain,
        )  # fmt: skip
    return {"reference": target, "signatures": made}


def signed_text(data: dict[str, Any]) -> str:
    """What ``sign`` did, one line per signature."""
    if "file" in data:
        return f"signed {data['file']} (sha256:{data['digest'][:12]}): {data['signature']}"
    return "\n".join(
        f"signed {data['reference']} variant sha256:{s.digest[:12]} as {s.short_signer} ({s.kind})"
        for s in data["signatures"]
    )


def verify_targets(
    registry: Callable[[], Any], targets: Sequence[str], keys: Sequence[Path]
) -> list[dict[str, Any]]:
    """One row per file or variant: ``target``, ``digest``, ``ok``, ``signer``, ``reason``;
    no targets: every version in the registry."""
    from jaxport._errors import SignatureError
    from jaxport._signing import file_sha256, verify_file

    rows: list[dict[str, Any]] = []
    files = [t for t in targets if Path(t).exists()]
    for target in files:
        digest = file_sha256(target)
        try:
            signer = verify_file(target, public_key=list(keys))
        except SignatureError as e:
            rows.append(_row(target, digest, None, str(e)))
        else:
            rows.append(_row(target, digest, signer, None))
    references = [t for t in targets if t not in files]
    if references or not targets:
        with registry() as reg:
            for reference in references or _every_version(reg):
                for check in reg.verify_signatures(reference, list(keys)):
                    where = f"{check.variant.name}:{check.variant.version}"
                    rows.append(_row(where, check.variant.digest, check.signer, check.reason))
    return rows


def verify_lines(rows: list[dict[str, Any]]) -> str:
    """``ok`` or ``FAIL`` per row, with the signer or the reason."""
    lines = []
    for r in rows:
        head = f"{'ok  ' if r['ok'] else 'FAIL'} {r['target']} sha256:{r['digest'][:12]}"
        lines.append(
            f"{head} signed by {r['signer'][:12]}" if r["ok"] else f"{head}: {r['reason']}"
        )
    return "\n".join(lines) or "nothing to verify"


def _row(target: str, digest: str, signer: str | None, reason: str | None) -> dict[str, Any]:
    return {"target": target, "digest": digest, "ok": reason is None, "signer": signer,
            "reason": reason}  # fmt: skip


def _every_version(reg: Any) -> list[str]:
    found: list[str] = []
    after = None
    while True:
        page = reg.list(limit=1000, after=after)
        found += [f"{r.name}:{r.version}" for r in page]
        if len(page) < 1000:
            return found
        after = (page[-1].name, page[-1].version)


@click.command()
@click.argument("target", metavar="FILE|REFERENCE")
@click.option("--key", "key", required=True, type=PEM, help="PEM EC private key (P-256/384/521).")
@click.option(
    "--password-env", metavar="VAR", help="Read the key's password from this environment variable."
)
@click.option(
    "--certificate", type=PEM, help="The key's PEM certificate: sign with it (and --chain)."
)
@click.option(
    "--chain", multiple=True, type=PEM,
    help="With --certificate: the issuing CA certificates up to the root (repeat).",
)  # fmt: skip
@click.option("-o", "--output", type=Path, help="FILE's signature (default: FILE.sig).")
@json_option
@pass_ctx
def sign(
    ctx: CliContext,
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
    data = sign_target(
        ctx.registry, target, key, password=password_from(password_env),
        certificate=certificate, chain=chain, output=output,
    )  # fmt: skip
    emit(as_json, data, signed_text)
