"""Using a loaded function: refusals that wait until it is called (schema/FORMAT.md, *Use*).

A reader accepts every calling convention version and every allowed custom-call target; what
the running jax cannot run fails only when the function is used, with a typed error:

- a calling convention version outside ``runnable_calling_conventions()``
  → ``UnsupportedVersionError`` naming the jax releases that export it;
- a custom-call target the running jaxlib does not provide: jax's ``JaxRuntimeError`` at
  compile time ("No FFI handler registered for X", "No registered implementation for ...
  custom call to X") → ``MissingCustomCallError`` naming X.

``LoadedExported.call`` does both. Under a caller's own ``jax.jit`` or ``jax.grad`` the compile
happens outside it (jax's backward pass calls the VJP module itself), so there jax's own error
comes through; ``translate_call_error`` turns it into the typed one.
"""

from __future__ import annotations

import re
from typing import Any

from jaxport import MissingCustomCallError, UnsupportedVersionError
from jaxport.export import _compat, _jax_targets
from jaxport.export._jax import export_impl

__all__ = [
    "OLDEST_RUNNABLE_CALLING_CONVENTION",
    "LoadedExported",
    "check_runnable",
    "releases_exporting",
    "runnable_calling_conventions",
    "translate_call_error",
]

#: The oldest calling convention version jax still runs. jax's docs list versions 1 to 3 as
#: no longer supported (export.md, *Calling convention versions*); ``Exported.call`` of every
#: release since 0.4.30 runs 4 and later (jax's back-compat tests call version 4 to 8 modules
#: of its ``export_back_compat_test_data``).
OLDEST_RUNNABLE_CALLING_CONVENTION = 4

_MISSING_TARGET = (
    re.compile(r"No FFI handler registered for (\S+)"),
    re.compile(r"No registered implementation for (?:\w+ )*custom call to (\S+)"),
)


def runnable_calling_conventions() -> tuple[int, int]:
    """The calling convention versions the running jax can call, inclusive: from
    ``OLDEST_RUNNABLE_CALLING_CONVENTION`` to ``jax.export.maximum_supported_calling_convention_
    version`` (a newer version is a convention this jax does not know)."""
    return OLDEST_RUNNABLE_CALLING_CONVENTION, _compat.calling_convention_range()[1]


def releases_exporting(version: int) -> str:
    """Which jax releases export calling convention ``version``, in words (from
    ``_jax_targets.CALLING_CONVENTIONS``, the releases since 0.4.30)."""
    if version < OLDEST_RUNNABLE_CALLING_CONVENTION:
        return "no jax release since 0.4.30 runs it (jax supports versions 4 and later)"
    names = [r for r, (lo, hi) in _jax_targets.CALLING_CONVENTIONS.items() if lo <= version <= hi]
    if not names:
        newest = _jax_targets.RELEASES[-1]
        if version > max(hi for _, hi in _jax_targets.CALLING_CONVENTIONS.values()):
            return f"no jax release up to {newest} exports it: a newer jax may run it"
        return f"jax releases before 0.4.30 exported it; jax up to {newest} still runs it"
    return f"jax {names[0]} to {names[-1]} export it"


def check_runnable(version: int, fun_name: str) -> None:
    """Refuses to call a function whose calling convention the running jax cannot run.

    Raises:
        UnsupportedVersionError: ``version`` outside ``runnable_calling_conventions()``;
            ``.supported`` is that range, the message names the releases that export it.
    """
    lo, hi = runnable_calling_conventions()
    if not lo <= version <= hi:
        raise UnsupportedVersionError(
            "calling convention version",
            version,
            (lo, hi),
            f"{fun_name!r} cannot be called with jax {_compat.jax_versions()[0]}; "
            f"{releases_exporting(version)}",
        )


def translate_call_error(error: BaseException, fun_name: str) -> MissingCustomCallError | None:
    """The typed error of jax's error for a custom-call target jaxlib lacks (None: another)."""
    text = str(error)
    targets = tuple(sorted({m.group(1) for p in _MISSING_TARGET for m in p.finditer(text)}))
    if not targets:
        return None
    return MissingCustomCallError(
        f"calling {fun_name!r} needs custom-call targets that jaxlib "
        f"{_compat.jax_versions()[1]} does not provide on this platform: "
        f"{list(targets)}; {_where_listed(targets)}",
        targets=targets,
        fun_name=fun_name,
    )


def _where_listed(targets: tuple[str, ...]) -> str:
    table = _jax_targets.STABLE_TARGETS
    listed = [f"{t}: jax {', '.join(table[t])}" for t in targets if t in table]
    if not listed:
        return "no jax release lists them as stable"
    return "listed as stable by " + "; ".join(listed)


class LoadedExported(export_impl.Exported):
    """The ``jax.export.Exported`` a jaxport reader returns: the same fields and behaviour,
    with ``call`` refusing what the running jax cannot run, with typed errors."""

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.export.Exported.call``, checked first and with jax's errors translated.

        Raises:
            UnsupportedVersionError: a calling convention version jax cannot run
                (``check_runnable``).
            MissingCustomCallError: the module calls a custom-call target that jaxlib does
                not provide on the platform it runs on.
        """
        check_runnable(self.calling_convention_version, self.fun_name)
        try:
            return export_impl.call(self)(*args, **kwargs)
        except Exception as e:  # jax's JaxRuntimeError, raised at compile time
            typed = translate_call_error(e, self.fun_name)
            if typed is None:
                raise
            raise typed from None
