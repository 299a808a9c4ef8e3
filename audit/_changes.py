"""``Change``, one difference between two archives, and the rules that function and model diffs
share: how two lists of inputs or outputs (avals) differ (``_diff`` for functions,
``_model_diff`` for a model's methods).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxport.export import AvalInfo

__all__ = ["Change", "at", "diff_avals"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference: ``what`` changed at ``where``, from ``before`` to ``after``."""

    what: str
    where: str
    before: Any
    after: Any
    breaking: bool


def diff_avals(
    side: str, a: tuple[AvalInfo, ...], b: tuple[AvalInfo, ...], where: str
) -> list[Change]:
    """The changes from inputs (``side`` "input") or outputs ``a`` to ``b``, paired by path:
    one added or removed, another dtype or sharding are breaking; another shape is, unless
    every static input size is kept or replaced by a symbolic dimension."""
    by_path_a = {x.path: x for x in a}
    by_path_b = {x.path: x for x in b}
    changes = []
    for path in by_path_a.keys() - by_path_b.keys():
        changes.append(
            Change(f"{side} removed", at(where, path), _sig(by_path_a[path]), None, True)
        )
    for path in by_path_b.keys() - by_path_a.keys():
        changes.append(Change(f"{side} added", at(where, path), None, _sig(by_path_b[path]), True))
    for path in sorted(by_path_a.keys() & by_path_b.keys()):
        old, new = by_path_a[path], by_path_b[path]
        if old.dtype != new.dtype:
            changes.append(Change(f"{side} dtype", at(where, path), old.dtype, new.dtype, True))
        if old.shape != new.shape:
            generalized = side == "input" and _generalizes(old.shape, new.shape)
            changes.append(
                Change(f"{side} shape", at(where, path), old.shape, new.shape, not generalized)
            )
        if old.sharding != new.sharding:
            changes.append(
                Change(f"{side} sharding", at(where, path), old.sharding, new.sharding, True)
            )
    return sorted(changes, key=lambda c: (c.where, c.what))


def _generalizes(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    # Every old static size is kept or replaced by a symbolic dimension.
    return len(old) == len(new) and all(
        o == n or isinstance(n, str) for o, n in zip(old, new, strict=True)
    )


def _sig(a: AvalInfo) -> str:
    return f"{a.dtype}[{', '.join(map(str, a.shape))}]"


def at(where: str, path: str) -> str:
    """Where a change is: ``where`` (a variant, a method) then ``path`` ("." for the root)."""
    return f"{where} {path or '.'}".strip()
