"""A model's methods: exported as ``method(params, *args)``, then run with the parameters bound
and placed on the local devices with the shardings the method expects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jaxport import JaxportError, RunError
from jaxport.export import _compat

__all__ = ["bind", "check_arguments", "export_method", "in_shardings", "param_specs"]


def param_specs(params_tree: Any, leaves: Sequence[Any], arrays: Sequence[Any]) -> Any:
    """ShapeDtypeStructs of the parameters (the host arrays' shapes and canonical dtypes),
    with the sharding of the leaves that are sharded jax Arrays."""
    import jax
    from jax import tree_util

    def spec(leaf: Any, array: Any) -> Any:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(leaf, jax.Array) and len(sharding.device_set) > 1:  # type: ignore[union-attr]
            return jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=sharding)
        return jax.ShapeDtypeStruct(array.shape, array.dtype)

    specs = [spec(x, a) for x, a in zip(leaves, arrays, strict=True)]
    return tree_util.tree_unflatten(params_tree, specs)


def export_method(
    name: str,
    fn: Callable[..., Any],
    param_specs: Any,
    arg_specs: Sequence[Any],
    platforms: Sequence[str] | None,
) -> Any:
    import jax
    import jax.export

    def method(params: Any, *args: Any) -> Any:
        return fn(params, *args)

    method.__name__ = method.__qualname__ = name
    return jax.export.export(jax.jit(method), platforms=platforms)(param_specs, *arg_specs)


def in_shardings(exp: Any, n: int) -> list[Any] | None:
    """The shardings the method expects for its first ``n`` inputs, on local devices, or None
    for a single-device method."""
    if exp.nr_devices == 1:
        return None
    import jax

    devices = jax.local_devices()
    if len(devices) < exp.nr_devices:
        raise JaxportError(
            f"the method was exported for {exp.nr_devices} devices, this process has "
            f"{len(devices)} (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{exp.nr_devices})"
        )
    return _compat.in_shardings_on(exp, devices)[:n]


def bind(
    name: str,
    exp: Any,
    params_tree: Any,
    specs: Sequence[tuple[tuple[int, ...], str]],
    placed: Callable[[], list[Any]],
) -> Callable[..., Any]:
    """``method(*args)``: ``exp`` called with the parameters its module keeps, which
    ``placed()`` gives on the devices (``Model.placed_params``); ``specs`` are every
    parameter's ``(shape, dtype name)``."""
    import jax
    import jax.numpy as jnp
    from jax import tree_util

    n = len(specs)
    kept = sorted(i for i in exp.module_kept_var_idx if i < n)

    def call(kept_values: list[Any], *args: Any) -> Any:
        # Parameters the module does not use are dropped by jax (module_kept_var_idx):
        # zeros stand in for them and XLA removes them.
        values = dict(zip(kept, kept_values, strict=True))
        leaves = [values[i] if i in values else jnp.zeros(*specs[i]) for i in range(n)]
        return exp.call(tree_util.tree_unflatten(params_tree, leaves), *args)

    jitted = jax.jit(call)

    def method(*args: Any) -> Any:
        check_arguments(name, exp, args)
        values = placed()
        try:
            return jitted(values, *args)
        except (ValueError, TypeError) as e:  # jax refused the call (symbolic dims, platform)
            raise RunError(f"method {name!r} cannot run here: {_first_line(e)}") from None

    def lower(*arg_specs: Any) -> Any:
        # What the first call compiles, from specs alone (``jaxport compile``'s child).
        shardings = in_shardings(exp, n)
        kept_specs = [
            jax.ShapeDtypeStruct(specs[i][0], jnp.dtype(specs[i][1]),
                                 sharding=shardings[i] if shardings else None)
            for i in kept
        ]  # fmt: skip
        return jitted.lower(kept_specs, *arg_specs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Runs method {name!r} of the model with its parameters bound."
    method.lower = lower  # type: ignore[attr-defined]
    return method


def check_arguments(name: str, exp: Any, args: tuple[Any, ...]) -> None:
    """Checks a method's arguments against its signature (after the parameters) before jax
    sees them: the same pytree structure, and each leaf of the same rank, static dimensions
    and dtype (as jax canonicalizes it; Python scalars are left to jax). Symbolic dimensions
    are jax's to check.

    Raises:
        RunError: naming the argument, what the method takes and what was given.
    """
    import jax
    from jax import tree_util

    leaves, given = tree_util.tree_flatten(args)
    expected = _argument_structure(exp.in_tree)
    if expected is not None and given != expected:
        raise RunError(f"method {name!r} takes arguments of structure {expected}, got {given}")
    avals = exp.in_avals[len(exp.in_avals) - len(leaves) :]
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(args)[0]]
    for path, leaf, aval in zip(paths, leaves, avals, strict=True):
        if isinstance(leaf, bool | int | float | complex):
            continue
        shape = tuple(getattr(leaf, "shape", ()))
        dtype = jax.dtypes.canonicalize_dtype(getattr(leaf, "dtype", type(leaf)))
        same_shape = len(shape) == len(aval.shape) and all(
            not isinstance(d, int) or d == s for d, s in zip(aval.shape, shape, strict=True)
        )
        if not same_shape or dtype != aval.dtype:
            wanted = f"{aval.dtype.name}{list(aval.shape)}".replace("'", "")
            raise RunError(
                f"method {name!r}: argument {path} is {dtype.name}{list(shape)}, it takes {wanted}"
            )


def _argument_structure(in_tree: Any) -> Any:
    """The treedef of the method's arguments (a tuple, after the parameters), or None for a
    custom node that cannot be rebuilt from placeholders (jax then checks the structure)."""
    from jax import tree_util

    try:
        (params_and_args, _kwargs) = tree_util.tree_unflatten(in_tree, [0] * in_tree.num_leaves)
        return tree_util.tree_structure(tuple(params_and_args[1:]))
    except Exception:  # a registered node's unflatten refused placeholders
        return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
