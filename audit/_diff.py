"""``diff``: what changed between two versions of an artifact, classified breaking or compatible.

A change is *breaking* when a caller of the old version may fail or get different structure
from the new one: inputs or outputs added, removed or reshaped (a static dimension becoming
symbolic is compatible), dtypes, new symbolic constraints, platforms or device counts removed,
shardings or effects changed. Everything else (platforms added, constraints removed, a new
calling-convention version the reader still supports) is *compatible*.
"""

from __future__ import annotations

from typing import Any

from jaxport.audit._changes import Change, diff_avals
from jaxport.audit._model_diff import diff_models
from jaxport.export import ArchiveInfo

__all__ = ["diff_archives", "diff_variant_sets"]


def diff_archives(a: ArchiveInfo, b: ArchiveInfo, where: str = "") -> list[Change]:
    """The changes from archive ``a`` to archive ``b`` (header fields only); two models are
    compared method by method and parameter by parameter (``_model_diff``)."""
    if a.kind != b.kind:
        return [Change("kind", where, a.kind, b.kind, True)]
    if a.kind == "model":
        return diff_models(a, b, where)
    changes: list[Change] = []
    changes += diff_avals("input", a.in_avals, b.in_avals, where)
    changes += diff_avals("output", a.out_avals, b.out_avals, where)
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
