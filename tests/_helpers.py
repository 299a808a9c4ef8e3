"""Helpers shared by the tests: every export test goes through the format."""

from __future__ import annotations

import dataclasses
from typing import Any

import jaxport
from jaxport.export import _compat

_FIELDS = (
    "fun_name",
    "in_tree",
    "out_tree",
    "nr_devices",
    "platforms",
    "ordered_effects",
    "unordered_effects",
    "disabled_safety_checks",
    "mlir_module_serialized",
    "calling_convention_version",
    "module_kept_var_idx",
    "uses_global_constants",
    "in_shardings_hlo",
    "out_shardings_hlo",
)


def roundtrip(exp: Any, vjp_order: int = 0, **kwargs: Any) -> Any:
    """``loads(dumps(exp))``, checking that the result equals ``exp`` field by field.

    A live Exported re-exports its VJP on every ``.vjp()`` call, with the caller's source
    locations in the module, so VJP modules are compared between a first and a second round
    trip, where they are fixed.
    """
    back = jaxport.loads(jaxport.dumps(exp, vjp_order=vjp_order, **kwargs))
    assert_exported_equal(exp, back, vjp_order, vjp_modules=False)
    again = jaxport.loads(jaxport.dumps(back, vjp_order=vjp_order, **kwargs))
    assert_exported_equal(back, again, vjp_order)
    return back


def _avals_key(avals: Any) -> list[tuple[str, Any, bool, Any, str]]:
    return [
        (
            str(a.shape),
            a.dtype,
            a.weak_type,
            getattr(a, "sharding", None),
            str(getattr(a, "memory_space", None)),
        )
        for a in avals
    ]


def assert_exported_equal(a: Any, b: Any, vjp_order: int = 0, *, vjp_modules: bool = True) -> None:
    """``a`` and ``b`` agree on every field (and so do their VJPs, to ``vjp_order``)."""
    for name in _FIELDS:
        va, vb = getattr(a, name), getattr(b, name)
        if name == "disabled_safety_checks":
            va, vb = tuple(va), tuple(vb)
        if name.endswith("shardings_hlo"):
            va, vb = (
                [None if s is None else str(s) for s in va],
                [None if s is None else str(s) for s in vb],
            )
        assert va == vb, f"{name}: {va!r} != {vb!r}"
    assert _avals_key(a.in_avals) == _avals_key(b.in_avals)
    assert _avals_key(a.out_avals) == _avals_key(b.out_avals)
    assert _compat.exported_named_shardings(a) == _compat.exported_named_shardings(b)
    assert _scope_constraints(a) == _scope_constraints(b)
    assert b.has_vjp() == (vjp_order > 0)
    if vjp_order > 0:
        va, vb = a.vjp(), b.vjp()
        if not vjp_modules:
            va = dataclasses.replace(va, mlir_module_serialized=vb.mlir_module_serialized)
        assert_exported_equal(va, vb, vjp_order - 1, vjp_modules=vjp_modules)


def _scope_constraints(exp: Any) -> tuple[str, ...]:
    from jaxport.export._avals import symbolic_constraints

    return symbolic_constraints(list(exp.in_avals) + list(exp.out_avals))[1]
