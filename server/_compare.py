"""The compare page's data: two versions of one name side by side, and what changed.

``/names/{name}/compare?a=1&b=2`` shows:

- the facts of each version, one row per fact, the rows that differ marked: kind, push
  time, platforms, variants (platforms x devices), jax releases, calling conventions,
  custom-call targets, signatures (a function's inputs and outputs; a model's methods),
  parameters (a model's tensors: count and bytes), size, push metadata, description;
- the changes ``Registry.diff`` finds from ``a`` to ``b`` (``jaxport.audit``'s rules: each
  breaking or compatible), as ``jaxport diff`` prints them;
- the stored audits of each: per platform, jax release and level, each side's newest status.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from jaxport.audit import Change, Finding
from jaxport.export import AvalInfo
from jaxport.registry import DESCRIPTION_KEY, Ref, Registry
from jaxport.server._markdown import summary
from jaxport.server._views import human_size, iso_utc, version_findings

__all__ = ["AuditRow", "Comparison", "FactRow", "compare"]


@dataclasses.dataclass(frozen=True)
class FactRow:
    """One fact of both versions, as text."""

    label: str
    a: str
    b: str

    @property
    def differs(self) -> bool:
        return self.a != self.b


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """Each side's newest audit status on one platform, jax release and level ("" : none)."""

    platform: str
    jax_version: str
    level: str
    a: str
    b: str


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two versions of one name: ``facts``, ``changes`` from ``a`` to ``b``, ``audits``."""

    a: Ref
    b: Ref
    facts: list[FactRow]
    changes: list[Change]
    audits: list[AuditRow]

    @property
    def breaking(self) -> int:
        return sum(c.breaking for c in self.changes)


def compare(reg: Registry, name: str, a: int, b: int) -> Comparison:
    """``name:a`` and ``name:b`` compared (module doc).

    Raises:
        NotFoundError: no such name or version.
        IntegrityError: an archive's blob (a model's skeleton) is missing or corrupt.
    """
    ref_a, ref_b = reg.get(f"{name}:{a}"), reg.get(f"{name}:{b}")
    changes = reg.diff(f"{name}:{a}", f"{name}:{b}")
    facts = [FactRow(label, fact(ref_a), fact(ref_b)) for label, fact in _FACTS]
    for key in sorted((ref_a.metadata.keys() | ref_b.metadata.keys()) - {DESCRIPTION_KEY}):
        facts.append(
            FactRow(f"metadata {key}", ref_a.metadata.get(key, "—"), ref_b.metadata.get(key, "—"))
        )
    audits = _audits(version_findings(reg, name, a), version_findings(reg, name, b))
    return Comparison(ref_a, ref_b, facts, changes, audits)


def _audits(a: Iterable[Finding], b: Iterable[Finding]) -> list[AuditRow]:
    sides: dict[tuple[str, str, str], list[str]] = {}
    for i, findings in enumerate((a, b)):
        for f in findings:  # newest first: the first of a key is its newest
            statuses = sides.setdefault((f.platform, f.jax_version, f.level), ["", ""])
            statuses[i] = statuses[i] or f.status
    return [AuditRow(*key, *statuses) for key, statuses in sorted(sides.items())]


def _joined(values: Iterable[object]) -> str:
    return ", ".join(sorted({str(v) for v in values})) or "none"


def _avals(avals: Iterable[AvalInfo]) -> str:
    return ", ".join(f"{x.dtype}[{', '.join(map(str, x.shape))}]" for x in avals)


def _signatures(ref: Ref) -> str:
    if ref.kind == "model":
        methods = {
            f"{m.name}({_avals(m.in_avals)}) -> ({_avals(m.out_avals)})"
            for v in ref.variants
            for m in v.methods
        }
        return "; ".join(sorted(methods))
    return " | ".join(sorted({f"{v.in_signature} -> {v.out_signature}" for v in ref.variants}))


def _parameters(ref: Ref) -> str:
    if ref.kind != "model":
        return "—"
    tensors = {t.path: t for v in ref.variants for t in v.tensors}
    total = sum(t.nbytes for t in tensors.values())
    return f"{len(tensors)} tensors, {human_size(total)}"


_FACTS: list[tuple[str, Callable[[Ref], str]]] = [
    ("kind", lambda r: r.kind),
    ("pushed (UTC)", lambda r: iso_utc(r.created_at)),
    ("platforms", lambda r: _joined(p for v in r.variants for p in v.platforms)),
    ("variants", lambda r: _joined(f"{','.join(v.platforms)} x{v.nr_devices}" for v in r.variants)),
    ("jax", lambda r: _joined(v.jax_version for v in r.variants)),
    ("calling convention", lambda r: _joined(v.calling_convention_version for v in r.variants)),
    (
        "custom-call targets",
        lambda r: _joined(t for v in r.variants for t in v.custom_call_targets),
    ),
    ("signatures", _signatures),
    ("parameters", _parameters),
    ("size", lambda r: human_size(sum(v.size_bytes for v in r.variants))),
    ("description", lambda r: summary(r.metadata.get(DESCRIPTION_KEY, "")) or "—"),
]
