"""Which custom-call targets a reader accepts from an archive (schema/FORMAT.md, *Custom calls*).

The rule is jax's own export-time check (``jax._src.export._export._check_module``) applied on
load: a module may call the targets jax guarantees stable
(``_CUSTOM_CALL_TARGETS_GUARANTEED_STABLE``, https://docs.jax.dev/en/latest/export/export.html
#compatibility-guarantees-for-custom-calls) and those the caller names. Host callbacks are never
accepted: their operands index the writer's table of Python callbacks (or, before jax 0.5, hold
a pointer into the writer's process), and a forged index crashes the reader with SIGSEGV.
"""

from __future__ import annotations

from collections.abc import Iterable

from jaxport._errors import CorruptArchiveError, UnsafeArchiveError

__all__ = [
    "HOST_CALLBACK_TARGETS",
    "allowed_targets",
    "check_allowed",
    "check_module_targets",
    "is_host_callback",
    "stable_custom_call_targets",
]

#: The custom-call targets of jax's host callbacks (``jax.pure_callback``, ``io_callback``,
#: ``jax.debug.callback``, ``jax.experimental.buffer_callback``), in jaxlib 0.4.x (the
#: ``xla_python_*`` descriptor form) through 0.10 (the ``xla_ffi_*`` and ``xla_buffer_*`` forms).
HOST_CALLBACK_TARGETS = frozenset(
    {
        "xla_python_cpu_callback",
        "xla_python_gpu_callback",
        "xla_ffi_python_cpu_callback",
        "xla_ffi_python_gpu_callback",
        "xla_ffi_partitioned_python_cpu_callback",
        "xla_ffi_partitioned_python_gpu_callback",
        "xla_buffer_python_cpu_callback",
        "xla_buffer_python_gpu_callback",
    }
)


def stable_custom_call_targets() -> frozenset[str]:
    """The targets the running jax guarantees stable, which a reader accepts without asking.

    This is jax's ``_CUSTOM_CALL_TARGETS_GUARANTEED_STABLE``: what ``jax.export`` accepts
    without a ``DisabledSafetyCheck.custom_call``. It differs between jax releases.
    """
    from jax._src.export import _export

    return frozenset(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE) - HOST_CALLBACK_TARGETS


def is_host_callback(target: str) -> bool:
    """Whether ``target`` is a host callback: listed, or named like one (``*python*callback*``).

    The name rule also catches spellings of releases after the list was made.
    """
    return target in HOST_CALLBACK_TARGETS or ("python" in target and "callback" in target)


def allowed_targets(allow_custom_calls: Iterable[str]) -> frozenset[str]:
    """The targets a load accepts: jax's stable ones and ``allow_custom_calls``.

    Host callbacks named in ``allow_custom_calls`` are kept out (they are never accepted).

    Raises:
        TypeError: ``allow_custom_calls`` is a single string, or holds something else than str.
    """
    if isinstance(allow_custom_calls, str | bytes):
        raise TypeError(
            f"allow_custom_calls must be a collection of target names, not one string: "
            f"write allow_custom_calls=({allow_custom_calls!r},)"
        )
    named = tuple(allow_custom_calls)
    for target in named:
        if not isinstance(target, str):
            raise TypeError(f"allow_custom_calls must hold str, got {target!r}")
    return stable_custom_call_targets() | {t for t in named if not is_host_callback(t)}


def check_module_targets(
    found: tuple[str, ...],
    claimed: tuple[str, ...],
    allowed: frozenset[str],
    *,
    vjp_order: int,
    path: str | None,
) -> None:
    """Checks the targets ``found`` in a module against the header's and the allowed ones.

    Args:
        found: the module's targets, from its bytes (``_modules.custom_call_targets``): sorted,
            unique.
        claimed: the targets the header lists for it (writers list them sorted and unique).
        allowed: ``allowed_targets(...)``.
        vjp_order: 0 for the primal module, ``n`` for the VJP of order ``n``.
        path: the file read, for messages.

    Raises:
        CorruptArchiveError: ``found`` and ``claimed`` differ (checked first).
        UnsafeArchiveError: a host callback, or a target neither stable nor allowed.
    """
    if claimed != found:
        raise CorruptArchiveError(
            f"the header lists custom-call targets {list(claimed)} for {_module_name(vjp_order)},"
            f" but the module calls {list(found)}",
            path=path,
        )
    check_allowed(found, allowed, vjp_order=vjp_order, path=path)


def check_allowed(
    targets: tuple[str, ...], allowed: frozenset[str], *, vjp_order: int, path: str | None
) -> None:
    """Refuses host callbacks, and targets not in ``allowed``, among a module's ``targets``.

    Also used on the header's list of a module not read yet, to fail before reading it.

    Raises:
        UnsafeArchiveError: naming the refused targets and how to allow them (host callbacks
            first; they cannot be allowed).
    """
    module = _module_name(vjp_order)
    callbacks = tuple(sorted({t for t in targets if is_host_callback(t)}))
    if callbacks:
        raise UnsafeArchiveError(
            f"{module} calls host callbacks {list(callbacks)}: a Python callback cannot come "
            f"from an archive, and these targets are refused even when named in "
            f"allow_custom_calls",
            targets=callbacks,
            vjp_order=vjp_order,
            path=path,
        )
    refused = tuple(sorted({t for t in targets if t not in allowed}))
    if refused:
        raise UnsafeArchiveError(
            f"{module} calls custom-call targets that jax does not guarantee stable: "
            f"{list(refused)}; if you trust the archive's author, load it with "
            f"allow_custom_calls={refused!r}",
            targets=refused,
            vjp_order=vjp_order,
            path=path,
        )


def _module_name(vjp_order: int) -> str:
    return "the primal module" if vjp_order == 0 else f"the VJP module of order {vjp_order}"
