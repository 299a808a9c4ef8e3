"""``diff``: what changed between two versions of an artifact, classified breaking or compatible.

A change is *breaking* when a caller of the old version may fail or get different structure
from the new one: inputs or outputs added, removed or reshaped (a static dimension becoming
symbolic is compatible), dtypes, new symbolic constraints, platforms or device counts removed,
shardings or effects changed. Everything else (platforms added, constraints removed, a new
calling-convention version the reader still supports) is *compatible*.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxport.export._info import ArchiveInfo, AvalInfo

__all__ = ["Change", "diff_archives", "diff_variant_sets"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference: ``what`` changed at ``where``, from ``before`` to ``after``."""

    what: str
    where: str
    before: Any
    after: Any
    breaking: bool


def diff_archives(a: ArchiveInfo, b: ArchiveInfo, where: str = "") -> list[Change]:
    """The changes from archive ``a`` to archive ``b`` (header fields only); two models are
    compared method by method and parameter by parameter (``_model_diff``)."""
    if a.kind != b.kind:
        return [Change("kind", where, a.kind, b.kind, True)]
    if a.kind == "model":
        from jaxport.audit._model_diff import diff_models

        return diff_models(a, b, where)
    changes: list[Change] = []
    changes += _diff_avals("input", a.in_avals, b.in_avals, where)
    changes += _diff_avals("output", a.out_avals, b.out_avals, where)
    removed_constraints = set(a.symbolic_constraints) - set(b.symbolic_constraints)
    added_constraints = set(b.symbolic_constraints) - set(a.symbolic_constraints)
    if added_constraints or removed_constraints:
        changes.append(
            Change("symbolic constraints", where, sorted(a.symbolic_constraints),
                   sorted(b.symbolic_constraints), bool(added_constraints))
        )  # fmt: skip
    for field, breaking in (
        ("ordered_effects", True),
        ("unordered_effects", True),
        ("calling_convention_version", False),
        ("disabled_safety_checks", False),
    ):
        if getattr(a, field) != getattr(b, field):
            changes.append(
                Change(
                    field.replace("_", " "), where, getattr(a, field), getattr(b, field), breaking
                )
            )
    return changes


def _diff_avals(
    side: str, a: tuple[AvalInfo, ...], b: tuple[AvalInfo, ...], where: str
) -> list[Change]:
    by_path_a = {x.path: x for x in a}
    by_path_b = {x.path: x for x in b}
    changes = []
    for path in by_path_a.keys() - by_path_b.keys():
        changes.append(
            Change(f"{side} removed", _at(where, path), _sig(by_path_a[path]), None, True)
        )
    for path in by_path_b.keys() - by_path_a.keys():
        changes.append(Change(f"{side} added", _at(where, path), None, _sig(by_path_b[path]), True))
    for path in sorted(by_path_a.keys() & by_path_b.keys()):
        old, new = by_path_a[path], by_path_b[path]
        if old.dtype != new.dtype:
            changes.append(Change(f"{side} dtype", _at(where, path), old.dtype, new.dtype, True))
        if old.shape != new.shape:
            generalized = side == "input" and _generalizes(old.shape, new.shape)
            changes.append(
                Change(f"{side} shape", _at(where, path), old.shape, new.shape, not generalized)
            )
        if old.sharding != new.sharding:
            changes.append(
                Change(f"{side} sharding", _at(where, path), old.sharding, new.sharding, True)
            )
    return sorted(changes, key=lambda c: (c.where, c.what))


def _generalizes(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    # Every old static size is kept or replaced by a symbolic dimension.
    return len(old) == len(new) and all(
        o == n or isinstance(n, str) for o, n in zip(old, new, strict=True)
    )


def _sig(a: AvalInfo) -> str:
    return f"{a.dtype}[{', '.join(map(str, a.shape))}]"


def _at(where: str, path: str) -> str:
    return f"{where} {path or '.'}".strip()


def _variant_key(pair: tuple[Any, ArchiveInfo]) -> tuple[tuple[str, ...], int]:
    return tuple(pair[0].platforms), int(pair[0].nr_devices)


def diff_variant_sets(
    a: list[tuple[Any, ArchiveInfo]], b: list[tuple[Any, ArchiveInfo]]
) -> list[Change]:
    """Changes between two versions' variants, paired by (platforms, nr_devices).

    ``a`` and ``b`` hold ``(VariantInfo, ArchiveInfo)`` pairs.
    """
    old = {_variant_key(p): p for p in a}
    new = {_variant_key(p): p for p in b}
    changes = []
    old_platforms = {p for k in old for p in k[0]}
    new_platforms = {p for k in new for p in k[0]}
    if old_platforms != new_platforms:
        changes.append(Change("platforms", "", sorted(old_platforms), sorted(new_platforms),
                              bool(old_platforms - new_platforms)))  # fmt: skip
    old_devices, new_devices = {k[1] for k in old}, {k[1] for k in new}
    if old_devices != new_devices:
        changes.append(Change("device counts", "", sorted(old_devices), sorted(new_devices),
                              bool(old_devices - new_devices)))  # fmt: skip
    for k in sorted(old.keys() & new.keys()):
        where = f"[{','.join(k[0])} x{k[1]}]"
        changes += diff_archives(old[k][1], new[k][1], where)
    if not (old.keys() & new.keys()) and a and b:
        changes += diff_archives(a[0][1], b[0][1], "[first variants]")
    return changes
