"""``diff`` of two model archives: methods, their signatures, and the parameters.

Rules (as ``_diff``'s): a method removed is breaking, one added compatible; a method's inputs
and outputs follow the function rules (``_changes.diff_avals``), its platforms and device count
too. The parameters are the model's own: a parameter added, removed, reshaped or of another
dtype is breaking (parameters of the old tree no longer fit: ``Model.update_params``); the
tensors of the same path, shape and dtype whose bytes changed (another sha256) are counted in
one compatible ``parameter values`` change: ``"2 tensors, 48 bytes"`` before, ``"1 of 2 tensors
changed, 12 bytes"`` after (the bytes of the changed tensors).
"""

from __future__ import annotations

from jaxport.audit._changes import Change, at, diff_avals
from jaxport.export import ArchiveInfo, MethodInfo, TensorInfo

__all__ = ["diff_models"]


def diff_models(a: ArchiveInfo, b: ArchiveInfo, where: str = "") -> list[Change]:
    """The changes from model archive ``a`` to model archive ``b`` (headers only)."""
    changes: list[Change] = []
    old = {m.name: m for m in a.methods}
    new = {m.name: m for m in b.methods}
    for name in sorted(old.keys() - new.keys()):
        changes.append(Change("method removed", at(where, name), name, None, True))
    for name in sorted(new.keys() - old.keys()):
        changes.append(Change("method added", at(where, name), None, name, False))
    for name in sorted(old.keys() & new.keys()):
        changes += _diff_method(old[name], new[name], at(where, name))
    changes += _diff_params(a.tensors, b.tensors, where)
    return changes


def _diff_method(a: MethodInfo, b: MethodInfo, where: str) -> list[Change]:
    changes: list[Change] = []
    changes += diff_avals("input", a.in_avals, b.in_avals, where)
    changes += diff_avals("output", a.out_avals, b.out_avals, where)
    added_constraints = set(b.symbolic_constraints) - set(a.symbolic_constraints)
    if set(a.symbolic_constraints) != set(b.symbolic_constraints):
        changes.append(
            Change("symbolic constraints", where, sorted(a.symbolic_constraints),
                   sorted(b.symbolic_constraints), bool(added_constraints))
        )  # fmt: skip
    if a.platforms != b.platforms:
        removed = bool(set(a.platforms) - set(b.platforms))
        changes.append(Change("platforms", where, list(a.platforms), list(b.platforms), removed))
    if a.nr_devices != b.nr_devices:
        changes.append(Change("device count", where, a.nr_devices, b.nr_devices, True))
    if a.calling_convention_version != b.calling_convention_version:
        changes.append(
            Change("calling convention version", where, a.calling_convention_version,
                   b.calling_convention_version, False)
        )  # fmt: skip
    if a.vjp_order != b.vjp_order:
        changes.append(
            Change("vjp order", where, a.vjp_order, b.vjp_order, b.vjp_order < a.vjp_order)
        )
    return changes


def _diff_params(a: tuple[TensorInfo, ...], b: tuple[TensorInfo, ...], where: str) -> list[Change]:
    old = {t.path: t for t in a}
    new = {t.path: t for t in b}
    changes: list[Change] = []
    for path in sorted(old.keys() - new.keys()):
        changes.append(Change("parameter removed", at(where, path), _sig(old[path]), None, True))
    for path in sorted(new.keys() - old.keys()):
        changes.append(Change("parameter added", at(where, path), None, _sig(new[path]), True))
    common = sorted(old.keys() & new.keys())
    for path in common:
        o, n = old[path], new[path]
        if o.shape != n.shape:
            changes.append(Change("parameter shape", at(where, path), o.shape, n.shape, True))
        if o.dtype != n.dtype:
            changes.append(Change("parameter dtype", at(where, path), o.dtype, n.dtype, True))
    same_spec = [p for p in common if (old[p].shape, old[p].dtype) == (new[p].shape, new[p].dtype)]
    changed = [p for p in same_spec if old[p].sha256 != new[p].sha256]
    if changed:
        total = sum(new[p].nbytes for p in same_spec)
        changed_bytes = sum(new[p].nbytes for p in changed)
        changes.append(
            Change("parameter values", where, f"{len(same_spec)} tensors, {total} bytes",
                   f"{len(changed)} of {len(same_spec)} tensors changed, {changed_bytes} bytes",
                   False)
        )  # fmt: skip
    return changes


def _sig(t: TensorInfo) -> str:
    return f"{t.dtype}[{', '.join(map(str, t.shape))}]"
