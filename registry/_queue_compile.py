"""Compiled sets made by the audit queue (issue 27 §2): an audit worker given a signing key
(``Registry.run_audit_worker(compile_key=...)``, ``jaxport audit-worker --compile-key``,
``$JAXPORT_COMPILE_KEY``) compiles, once a job's finding is recorded, the variant it audited
for this host and stores the signed sets (``Registry.compile``'s machinery, that one variant).

- Only after a passing full audit (``ok`` at level ``full``: loaded, compiled, ran, numbers
  matched) by this process's own jax and jaxlib: a ``not-run``, failing or static finding, or
  one of a job in another jax release's environment (its executable would be for another
  jaxlib), compiles nothing; the worker's logger (``jaxport.audit_worker``) says why.
- Only for this host's platform: the compile child says which it compiles for (the worker
  starts no jax backend of its own: the host's accelerator is its audit children's), and a
  set of another platform is ``skipped``. A set already stored with the same key and signer
  is kept (nothing new).
- A compile that fails is logged and stores nothing; the job and its finding stand (it is
  neither failed nor retried).
- The key is checked when the worker starts (one signature made), not per job; the key's
  path and password are the worker's configuration, never a job's arguments, and the
  password is never in a message or log.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from jaxport import SignatureError

if TYPE_CHECKING:
    from jaxport.audit import Finding
    from jaxport.registry._compiled_types import CompiledSet
    from jaxport.registry._registry import Registry

__all__ = ["COMPILE_KEY_ENV", "LOG", "CompileKey", "compile_audited", "compile_key", "refusal"]

#: The environment variable naming the worker's signing key when ``compile_key`` is None.
COMPILE_KEY_ENV = "JAXPORT_COMPILE_KEY"
#: The audit worker's logger: each compiled set, and why a job compiled nothing.
LOG = logging.getLogger("jaxport.audit_worker")
#: A digest signed once at start to check the key (never stored).
_PROBE = "0" * 64


@dataclasses.dataclass(frozen=True)
class CompileKey:
    """A worker's signing key for compiled sets: a PEM EC private key at ``path`` and its
    ``password`` (None: not encrypted; left out of ``repr``)."""

    path: Path
    password: str | None = dataclasses.field(default=None, repr=False)


def compile_key(
    path: str | os.PathLike[str] | None, password: str | None = None
) -> CompileKey | None:
    """The worker's key, checked by signing once: ``path``, else ``$JAXPORT_COMPILE_KEY``
    (unset or empty: None, the worker compiles nothing).

    Raises:
        SignatureError: the key cannot be read (no such file, not a PEM EC private key, a
            wrong or missing password); the message names the path, never the password.
        UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
    """
    from jaxport._signing import sign_digest

    if path is None:
        path = os.environ.get(COMPILE_KEY_ENV, "").strip() or None
        if path is None:
            return None
    key = CompileKey(Path(path), password)
    try:
        sign_digest(_PROBE, key.path, password=key.password)
    except OSError as e:
        raise SignatureError(
            f"cannot read the compile key {os.fspath(key.path)!r}: {e.strerror}"
        ) from None
    return key


def refusal(finding: Finding, jax_release: str | None) -> str | None:
    """Why a job's finding must not be compiled here, or None when it may (a passing full
    audit by this process's jax and jaxlib, read from package metadata: the worker does not
    import jax). ``jax_release``: the job's ``jax`` argument.

    Raises:
        AuditError: this interpreter has no jax.
    """
    from jaxport.audit import environment_key

    key = environment_key(None)
    here = (key.jax_version, key.jaxlib_version)
    if finding.status != "ok" or finding.level != "full":
        return f"the audit found {finding.status} ({finding.level}), not a passing full audit"
    if jax_release and jax_release != here[0]:
        return f"the job ran in jax {jax_release}'s environment; this worker runs {here[0]}"
    if (finding.jax_version, finding.jaxlib_version) != here:
        return (
            f"audited by jax {finding.jax_version} / jaxlib {finding.jaxlib_version}; "
            f"this worker runs {here[0]} / {here[1]}"
        )
    return None


def compile_audited(
    registry: Registry, finding: Finding, jax_release: str | None, key: CompileKey, timeout: float
) -> list[CompiledSet]:
    """Compiles and stores, signed with ``key``, the variant ``finding`` audited when
    ``refusal`` allows, each method within ``timeout`` seconds; logs what happened. Never
    raises for a compile that fails (logged; nothing stored).

    Returns:
        The ``CompiledSet`` per method (``Registry.compile``'s), or none when nothing was
        compiled.
    """
    what = f"{finding.name}:{finding.version} {finding.short_digest} {finding.platform}"
    why = refusal(finding, jax_release)
    if why is not None:
        LOG.info("%s: not compiled: %s", what, why)
        return []
    try:
        made = registry._compile_digest(
            finding.digest, platform=finding.platform, private_key=key.path,
            password=key.password, timeout=timeout,
        )  # fmt: skip
    except Exception as e:  # the audit job stands, whatever the compile does
        LOG.warning("%s: compiling failed, nothing stored: %s: %s", what, type(e).__name__,
                    _first_line(e))  # fmt: skip
        return []
    for one in made:
        LOG.info("%s: %s", what, _said(one))
    return made


def _said(one: CompiledSet) -> str:
    method = one.method or "(function)"
    if one.status in ("stored", "already stored"):
        return (
            f"{method} compiled for {one.device_kind!r}: {one.status} ({len(one.files)} "
            f"file(s), {one.size} bytes, signed by {one.signer[:12]})"
        )
    return f"{method} {one.status}: {one.reason}"


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ""
