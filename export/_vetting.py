"""How a module read from an archive is vetted before anything in this process parses it.

A reader hands each module's bytes to ``vet_module`` before jax sees them. Unless the caller
trusts the archive, the bytes must be MLIR bytecode, and the module sandbox (``_sandbox``)
parses them in a worker process; its verdict is cached by (module sha256, jaxlib version)
(``_verdicts``). The worker's facts are then checked here against the header: the custom-call
targets (listed, and allowed: ``_custom_calls``) and ``main``'s signature (``_module_facts``).
jax parses the module in this process only later, when it calls it, and only if all of that
passed.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jaxport import CorruptArchiveError, NewerFormatError, UnsafeModuleError
from jaxport.export import _custom_calls, _module_facts, _modules, _newer, _sandbox, _verdicts

__all__ = [
    "BYTECODE_MAGIC",
    "ModulePolicy",
    "module_facts",
    "module_name",
    "module_policy",
    "newer_modules_passed",
    "vet_module",
]

#: The first bytes of MLIR bytecode (https://mlir.llvm.org/docs/BytecodeFormat/).
BYTECODE_MAGIC = b"ML\xefR"


@dataclasses.dataclass(frozen=True)
class ModulePolicy:
    """What a reader accepts from an archive's modules, and how it checks them.

    Attributes:
        allowed: custom-call targets accepted (``_custom_calls.allowed_targets``).
        trusted: the caller's own file: no sandbox, MLIR text accepted; the custom calls are
            still checked (parsed in this process, as before the sandbox existed).
        cache: where verdicts are looked up and kept (default: the local cache).
        sandbox: the worker pool (default: the process's shared one).
        timeout: seconds a module may take in the sandbox (default: ``default_timeout``).
        writer_jax: the jax version the archive's header names, to tell a module written by
            a newer jax from a corrupt one (``_newer``).
    """

    allowed: frozenset[str]
    trusted: bool = False
    cache: _verdicts.VerdictCache | None = None
    sandbox: _sandbox.Sandbox | None = None
    timeout: float | None = None
    writer_jax: str = ""


def module_policy(
    allow_custom_calls: Iterable[str] = (),
    *,
    trusted: bool = False,
    verdicts: _verdicts.VerdictCache | None = None,
) -> ModulePolicy:
    """The policy of a reader's public arguments (see ``jaxport.loads``).

    Raises:
        TypeError: ``allow_custom_calls`` is a single string, or holds something else than str.
    """
    return ModulePolicy(_custom_calls.allowed_targets(allow_custom_calls), trusted, verdicts)


def module_name(order: int, section: int, method: str | None = None) -> str:
    """ "the primal module (section 0)", "the VJP module of order 1 of method 'f' (section 0)"."""
    base = "the primal module" if order == 0 else f"the VJP module of order {order}"
    of = f" of method {method!r}" if method else ""
    return f"{base}{of} (section {section})"


def vet_module(
    data: bytes,
    ref: _modules.ModuleRef,
    fields: Mapping[str, Any],
    policy: ModulePolicy,
    *,
    order: int,
    method: str | None = None,
    path: str | None = None,
    sha256: str | None = None,
) -> None:
    """Checks one module's bytes before they are handed to jax.

    Args:
        data: the module's bytes, as read from the archive (digest already checked).
        ref: the header's record of the module (its listed custom-call targets).
        fields: the decoded Exported fields of the same level (``_module_facts.check_facts``).
        policy: what is accepted.
        order: 0 for a primal module, ``n`` for the VJP of order ``n``.
        method: the model method it belongs to, for messages.
        path: the archive's file, for messages.
        sha256: the hex digest of ``data`` where the caller computed it (while decompressing
            it, ``SectionReader.read_hashed``); else it is computed here.

    Raises:
        CorruptArchiveError: MLIR text from an untrusted archive; bytes MLIR cannot read; a
            module whose targets or ``main`` differ from what the header declares.
        UnsafeArchiveError: a host callback, or a custom-call target not allowed.
        UnsafeModuleError: the sandbox's worker crashed or timed out on the module.
        NewerFormatError: MLIR cannot read a module that a newer jax wrote (its StableHLO
            version, or the header's jax version, is newer than this installation's); inside
            ``newer_modules_passed`` the module is let through instead.
    """
    try:
        _vet(data, ref, fields, policy, order=order, method=method, path=path, sha256=sha256)
    except _Passed:
        return


def _vet(
    data: bytes,
    ref: _modules.ModuleRef,
    fields: Mapping[str, Any],
    policy: ModulePolicy,
    *,
    order: int,
    method: str | None,
    path: str | None,
    sha256: str | None,
) -> None:
    where = module_name(order, ref.section, method)
    if policy.trusted:
        with _newer_refused(data, policy, where):
            if any(_newer.written_newer(data, policy.writer_jax)):  # measured now, not later
                _modules.check_readable(data, path=path)
            (found,) = _modules.custom_call_targets([data], path=path)
        _custom_calls.check_module_targets(
            found, ref.custom_call_targets, policy.allowed, vjp_order=order, path=path
        )
        return
    if not data.startswith(BYTECODE_MAGIC):
        raise CorruptArchiveError(
            f"{where} is not MLIR bytecode (jaxport writes only bytecode; MLIR text is read "
            f"only from a trusted file: load(..., trusted=True))",
            path=path,
        )
    with _newer_refused(data, policy, where):
        facts = module_facts(
            data, policy, where=where, order=order, section=ref.section, path=path, sha256=sha256
        )
    _custom_calls.check_module_targets(
        tuple(facts["targets"]), ref.custom_call_targets, policy.allowed, vjp_order=order, path=path
    )
    try:
        _module_facts.check_facts(facts, fields, where)
    except CorruptArchiveError as e:
        raise CorruptArchiveError(str(e), path=path) from None


#: Where ``newer_modules_passed`` collects the modules it let through (None: outside it).
_PASSED: contextvars.ContextVar[list[NewerFormatError] | None] = contextvars.ContextVar(
    "jaxport_newer_modules_passed", default=None
)


@contextlib.contextmanager
def newer_modules_passed() -> Iterator[list[NewerFormatError]]:
    """Within this block, a module that MLIR cannot read because a newer jax wrote it
    (``NewerFormatError``) is let through unvetted instead of refused, and its error appended
    to the list this yields: for ``push`` (a registry serves many jax releases) and
    ``verify`` (the archive is well formed, only too new), which check everything else and
    never run what they read. Nothing read in the block may be called in this process when
    the list is not empty: those modules were not parsed in the sandbox.
    """
    passed: list[NewerFormatError] = []
    token = _PASSED.set(passed)
    try:
        yield passed
    finally:
        _PASSED.reset(token)


@contextlib.contextmanager
def _newer_refused(data: bytes, policy: ModulePolicy, where: str) -> Iterator[None]:
    """MLIR's refusal of a module, as ``NewerFormatError`` where a newer jax wrote it (or let
    through inside ``newer_modules_passed``)."""
    try:
        yield
    except CorruptArchiveError as e:
        newer = _newer.newer_format_error(data, policy.writer_jax, where, str(e))
        if newer is None:
            raise
        passed = _PASSED.get()
        if passed is None:
            raise newer from None
        passed.append(newer)
        raise _Passed from None


class _Passed(Exception):
    """A newer module let through by ``newer_modules_passed``: the rest of its vetting is
    skipped."""


def module_facts(
    data: bytes,
    policy: ModulePolicy,
    *,
    where: str,
    order: int = 0,
    section: int = 0,
    path: str | None = None,
    sha256: str | None = None,
) -> Mapping[str, Any]:
    """The sandbox's facts of ``data``, from the cache or a worker (looked up by ``sha256``,
    the hex digest of ``data``, computed here unless given).

    Raises:
        CorruptArchiveError: MLIR cannot read the bytes (a cached refusal included).
        UnsafeModuleError: the worker crashed or timed out.
    """
    cache = policy.cache if policy.cache is not None else _verdicts.LocalVerdictCache()
    digest = sha256 if sha256 is not None else hashlib.sha256(data).hexdigest()
    key = _verdicts.VerdictKey(digest, jaxlib_version())
    verdict = cache.get(key)
    if verdict is None:
        verdict = _ask_sandbox(data, policy, where=where, order=order, section=section, path=path)
        cache.put(key, verdict)
    if verdict.facts is None:
        raise CorruptArchiveError(f"{where}: MLIR cannot read it: {verdict.error}", path=path)
    return verdict.facts


def _ask_sandbox(
    data: bytes, policy: ModulePolicy, *, where: str, order: int, section: int, path: str | None
) -> _verdicts.Verdict:
    sandbox = policy.sandbox if policy.sandbox is not None else _sandbox.default_sandbox()
    timeout = policy.timeout if policy.timeout is not None else _sandbox.default_timeout(len(data))
    try:
        facts, worker_jaxlib = sandbox.parse(data, timeout=timeout)
    except _sandbox.ModuleRefused as e:
        return _verdicts.Verdict(None, str(e))
    except _sandbox.SandboxFailure as e:
        raise UnsafeModuleError(
            f"{where} could not be parsed safely: {e.what}; it was not parsed in this process "
            f"(only for your own files: load(..., trusted=True))",
            section=section,
            what=e.what,
            vjp_order=order,
            path=path,
        ) from None
    if worker_jaxlib != jaxlib_version():
        raise UnsafeModuleError(
            f"{where}: the sandbox runs jaxlib {worker_jaxlib}, this process {jaxlib_version()}",
            section=section,
            what="jaxlib version mismatch",
            vjp_order=order,
            path=path,
        )
    return _verdicts.Verdict(facts)


@functools.cache
def jaxlib_version() -> str:
    """The running jaxlib's version, which a verdict is valid for."""
    import jaxlib.version

    return str(jaxlib.version.__version__)
