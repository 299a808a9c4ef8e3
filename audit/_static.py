"""Static audits: the facts the registry recorded at push against a jax's capabilities.

Nothing is parsed or compiled, so 10,000 variants take a second or two. A variant's recorded
facts (``Facts``: the ``variants`` row) are checked in order; the first that fails gives the
status (``_report`` says what a static status proves):

1. format version inside this reader's range, else ``incompatible``;
2. calling convention version inside the jax's range (a model records its oldest method's:
   a newer one is left to a full audit), else ``incompatible``
   (https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions);
3. the platform is one this jax lowers for, else ``incompatible``;
4. every custom-call target is provided: in jax's guaranteed-stable list, or registered for the
   platform in this jaxlib (its LAPACK kernels included), else ``incompatible``. A host
   callback is never provided (no archive may call one: ``export/_custom_calls.py``).

A fact the row does not hold (``None``) makes that check, and so the verdict, ``not-run``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from jaxport.audit._report import NOT_RUN, AuditResult

__all__ = ["Capabilities", "Facts", "capabilities", "static_verdict"]


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the registry recorded of one variant at push (None: not recorded)."""

    format_version: int | None
    calling_convention_version: int | None
    platforms: tuple[str, ...]
    custom_call_targets: tuple[str, ...] | None
    kind: str = "function"


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a jax accepts: reader format range, calling conventions (inclusive ranges), the
    platforms it lowers for, custom-call targets it guarantees stable and, per platform, the
    targets its jaxlib registers; plus its ``(jax, jaxlib)`` versions."""

    jax_version: str
    jaxlib_version: str
    format_range: tuple[int, int]
    calling_convention_range: tuple[int, int]
    platforms: frozenset[str]
    stable_targets: frozenset[str]
    registered_targets: dict[str, frozenset[str]]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (the worker sends this; ``from_json`` reads it back)."""
        return {
            "jax_version": self.jax_version,
            "jaxlib_version": self.jaxlib_version,
            "format_range": list(self.format_range),
            "calling_convention_range": list(self.calling_convention_range),
            "platforms": sorted(self.platforms),
            "stable_targets": sorted(self.stable_targets),
            "registered_targets": {p: sorted(t) for p, t in self.registered_targets.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capabilities:
        """From ``to_json``'s output (a worker's reply; raises KeyError/TypeError/ValueError
        on anything else)."""
        lo, hi = (int(x) for x in data["format_range"])
        cc_lo, cc_hi = (int(x) for x in data["calling_convention_range"])
        return cls(
            jax_version=str(data["jax_version"]),
            jaxlib_version=str(data["jaxlib_version"]),
            format_range=(lo, hi),
            calling_convention_range=(cc_lo, cc_hi),
            platforms=frozenset(str(p) for p in data["platforms"]),
            stable_targets=frozenset(str(t) for t in data["stable_targets"]),
            registered_targets={
                str(p): frozenset(str(t) for t in ts)
                for p, ts in dict(data["registered_targets"]).items()
            },
        )


def capabilities() -> Capabilities:
    """The running jax's capabilities (imports jax; initializes no backend)."""
    from jaxport.export import (
        MAX_SUPPORTED_FORMAT_VERSION,
        MIN_SUPPORTED_FORMAT_VERSION,
        calling_convention_range,
        jax_versions,
        lowering_platforms,
        registered_custom_call_targets,
        stable_custom_call_targets,
    )

    platforms = lowering_platforms()
    jax_version, jaxlib_version = jax_versions()
    return Capabilities(
        jax_version=jax_version,
        jaxlib_version=jaxlib_version,
        format_range=(MIN_SUPPORTED_FORMAT_VERSION, MAX_SUPPORTED_FORMAT_VERSION),
        calling_convention_range=calling_convention_range(),
        platforms=platforms,
        stable_targets=stable_custom_call_targets() | {"shape_assertion"},
        registered_targets={p: registered_custom_call_targets(p) for p in sorted(platforms)},
    )


def static_verdict(facts: Facts, platform: str, caps: Capabilities) -> AuditResult:
    """The static verdict for one variant on ``platform`` (see the module docstring); never
    raises for odd facts."""
    start = time.perf_counter()
    checks: dict[str, str] = {}
    status, reason = _verdict(facts, platform, caps, checks)
    return AuditResult(status, reason, checks, time.perf_counter() - start)


def _verdict(
    facts: Facts, platform: str, caps: Capabilities, checks: dict[str, str]
) -> tuple[str, str]:
    missing: list[str] = []
    lo, hi = caps.format_range
    if facts.format_version is None:
        missing.append("format version")
    else:
        checks["format version"] = f"{facts.format_version} (reader {lo}..{hi})"
        if not lo <= facts.format_version <= hi:
            return "incompatible", f"format version {facts.format_version} outside {lo}..{hi}"
    cc_lo, cc_hi = caps.calling_convention_range
    cc = facts.calling_convention_version
    if cc is None:
        missing.append("calling convention version")
    else:
        oldest = " (oldest method's)" if facts.kind == "model" else ""
        checks["calling convention"] = f"{cc}{oldest} (jax {cc_lo}..{cc_hi})"
        if not cc_lo <= cc <= cc_hi:
            return "incompatible", f"calling convention version {cc} outside jax's {cc_lo}..{cc_hi}"
    if platform not in caps.platforms:
        checks["platform"] = f"{platform}: jax {caps.jax_version} lowers for {_names(caps)}"
        return "incompatible", f"jax {caps.jax_version} does not lower for {platform}"
    if facts.custom_call_targets is None:
        missing.append("custom-call targets")
    else:
        provided = caps.stable_targets | caps.registered_targets.get(platform, frozenset())
        absent = sorted(set(facts.custom_call_targets) - provided)
        checks["custom calls"] = (
            f"not provided for {platform}: {', '.join(absent)}" if absent else "all provided"
        )
        if absent:
            return "incompatible", f"custom-call target {absent[0]} not provided for {platform}"
    if missing:
        return NOT_RUN, f"not recorded at push: {', '.join(missing)}"
    return "ok", "every recorded fact is within this jax's capabilities (nothing compiled)"


def _names(caps: Capabilities) -> str:
    return ", ".join(sorted(caps.platforms)) or "nothing"
