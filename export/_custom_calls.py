"""Which custom-call targets a reader accepts from an archive (schema/FORMAT.md, *Custom calls*).

The rule is jax's own export-time check (``_check_module`` of ``jax.export``'s module) applied on
load, over every jax release whose artifacts jaxport reads: a module may call a target that
some jax release since 0.4.30 guaranteed stable (``_CUSTOM_CALL_TARGETS_GUARANTEED_STABLE``,
https://docs.jax.dev/en/latest/export/export.html#compatibility-guarantees-for-custom-calls;
the table, with the releases that list each target, is ``_jax_targets.STABLE_TARGETS``,
generated from jax's git tags by scripts/jax_custom_call_table.py), the sharding targets jax's
own export writes (``SHARDING_TARGETS``), and those the caller names. A target accepted here
that the running jaxlib does not provide fails only when the function is called or compiled
(``MissingCustomCallError``, ``_call_errors``). Host callbacks are never
accepted: their operands index the writer's table of Python callbacks (or, before jax 0.5, hold
a pointer into the writer's process), and a forged index crashes the reader with SIGSEGV.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from typing import Any

from jaxport import CorruptArchiveError, UnsafeArchiveError
from jaxport.export import _jax_targets

__all__ = [
    "HOST_CALLBACK_TARGETS",
    "SHARDING_TARGETS",
    "allowed_targets",
    "check_allowed",
    "check_module_targets",
    "is_host_callback",
    "registered_custom_call_targets",
    "running_stable_targets",
    "stable_custom_call_targets",
    "target_releases",
]

#: The sharding custom calls that jax's own export writes into modules, besides those on jax's
#: stable lists (``Sharding``, ``SPMDFullToShardShape``, ``SPMDShardToFullShape``): Shardy's
#: round-trip targets, written by XLA's ``xla-sdy-round-trip-export`` pass when jax serializes
#: a module under Shardy (xla/service/spmd/shardy/constants.h: ``kFuncResultShardingTargetName``,
#: ``kShardingGroupCustomCallTargetName``, ``kGlobalToLocalShapeCallTargetName``,
#: ``kLocalToGlobalShapeCallTargetName``; jax's back-compat data annotate_data_placement.py
#: holds a jax-written module calling ``xla.sdy.FuncResultSharding``), and ``LayoutConstraint``
#: (jax/_src/interpreters/mlir.py, jax 0.11).
SHARDING_TARGETS = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "xla.sdy.FuncResultSharding",
        "xla.sdy.GlobalToLocalShape",
        "xla.sdy.LocalToGlobalShape",
        "xla.sdy.ShardingGroup",
        "LayoutConstraint",
    }
)

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


@functools.cache  # per process: jax's list and the tables are constants; every load asks
def stable_custom_call_targets() -> frozenset[str]:
    """The targets a reader accepts without asking: every target some jax release since 0.4.30
    guaranteed stable (``target_releases`` says which), the running jax's own list (for a
    release newer than the table), and ``SHARDING_TARGETS``; never a host callback.

    A superset of what the running ``jax.export`` accepts without a
    ``DisabledSafetyCheck.custom_call``: an archive written by an older jax stays readable
    after jax drops one of its targets (whether this jaxlib still runs it is measured when the
    function is called or audited).
    """
    from jaxport.export._jax import export_impl

    running = frozenset(export_impl._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)
    every = running | frozenset(_jax_targets.STABLE_TARGETS) | SHARDING_TARGETS
    return frozenset(t for t in every if not is_host_callback(t))


def running_stable_targets() -> frozenset[str]:
    """What the running jax alone guarantees stable (its ``_CUSTOM_CALL_TARGETS_GUARANTEED_STABLE``)
    and ``SHARDING_TARGETS``: what an audit reports as stable under this jax."""
    from jaxport.export._jax import export_impl

    return frozenset(export_impl._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE) | SHARDING_TARGETS


def registered_custom_call_targets(platform: str) -> frozenset[str]:
    """Custom-call targets this jaxlib registers for ``platform`` (LAPACK's too, on CPU), less
    the host callbacks; what a jaxlib does not list is left out (only the stable lists count)."""
    from jaxport.export._jax import lapack, xla_client

    names: set[str] = set()
    # an older jaxlib without the listing: only the stable list counts
    with contextlib.suppress(Exception):
        names |= set(xla_client.custom_call_targets("Host" if platform == "cpu" else platform))
    if platform == "cpu":
        with contextlib.suppress(Exception):  # no LAPACK registrations in this jaxlib
            names |= {name for name, *_ in _flat(lapack().registrations())}
    return frozenset(n for n in names if not is_host_callback(n))


def _flat(registrations: Any) -> list[tuple[Any, ...]]:
    """LAPACK's ``{platform: [(name, capsule, api_version), ...]}`` as one list."""
    values = registrations.values() if isinstance(registrations, dict) else [registrations]
    return [tuple(r) if isinstance(r, tuple | list) else (r,) for v in values for r in v]


def target_releases(target: str) -> tuple[str, ...]:
    """The jax releases whose stable list has ``target``, as runs ``"first..last"`` (e.g.
    ``("0.4.30..0.4.34",)`` for ``lapack_sgeqrf``); empty for a target none lists."""
    return _jax_targets.STABLE_TARGETS.get(target, ())


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
            f"{module} calls custom-call targets that no jax release guarantees stable: "
            f"{list(refused)}; if you trust the archive's author, pass "
            f"allow_custom_calls={refused!r} (Python) or "
            f"{' '.join(f'--allow-custom-call {t}' for t in refused)} (CLI)",
            targets=refused,
            vjp_order=vjp_order,
            path=path,
        )


def _module_name(vjp_order: int) -> str:
    return "the primal module" if vjp_order == 0 else f"the VJP module of order {vjp_order}"
