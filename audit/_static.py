"""Static audits: the facts the registry recorded at push against a jax's capabilities.

Nothing is parsed or compiled, so 10,000 variants take a second or two. A static verdict never
claims more than a full audit (``_checks``) would: it applies every refusal that the recorded
facts (``Facts``: the ``variants`` row) decide, in this order, the first that applies giving
the status:

1. format version outside this reader's range: ``incompatible``;
2. calling convention version outside the versions the jax can call (``runnable_calling_
   conventions``, as a full audit; a model records its oldest method's): ``incompatible``
   (https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions);
3. the platform is not one this jax lowers for: ``incompatible``;
4. a custom-call target not provided (in jax's guaranteed-stable list, or registered for the
   platform in this jaxlib): ``incompatible``. A host callback is never provided
   (``export/_custom_calls.py``);
5. shardings for several devices in the HloSharding form only (written by jax < 0.9, which had
   no named shardings) under a jax that ignores that form (>= 0.11.1, ``export/_compat.py``):
   ``incompatible``, as ``loads`` refuses them (``export/_exported.py``);
6. modules whose newest StableHLO version (recorded at push, revision 0017) is older than the
   oldest the jax's jaxlib reads (``Capabilities.stablehlo_range``, known for the installed jax
   and a worker's): ``incompatible`` (a consumer reads artifacts from its minimum version on:
   https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md);
7. more devices than this host has for the platform: ``not-run``, as a full audit.

Nothing else is decidable without loading, compiling and running: every other variant is
``unknown`` (never ``ok``), its reason naming what a full audit must still measure and what the
facts say against it: modules written by a newer jax (their StableHLO version may be one this
jaxlib cannot deserialize: https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md),
modules that declare a StableHLO version newer than the jaxlib's current one (not refused: jax
writes a module's ops for an older target than the producer version it declares, and such a
module that MLIR parses loads, ``export/_newer.py``), a producer outside the 6-month window
(``jaxport._window``), facts not recorded at push.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from jaxport._window import release_key
from jaxport.audit._report import NOT_RUN, UNKNOWN, AuditResult

__all__ = ["Capabilities", "Facts", "capabilities", "static_verdict"]

#: The first jax release whose Exported has named shardings (``export/_compat.py``): archives
#: of older ones hold the HloSharding form only.
_NAMED_SHARDINGS_SINCE = "0.9.0"


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the registry recorded of one variant at push (None: not recorded)."""

    format_version: int | None
    calling_convention_version: int | None
    platforms: tuple[str, ...]
    custom_call_targets: tuple[str, ...] | None
    kind: str = "function"
    #: The jax release that wrote the archive (``"unknown"``: not recorded, as for one
    #: converted from jax's native format).
    jax_version: str | None = None
    #: Whether an input or output has a sharding; how many devices the export is for.
    sharded: bool | None = None
    nr_devices: int | None = None
    #: The newest StableHLO version among the variant's modules, e.g. ``"1.10.3"`` (None: not
    #: recorded: pushed before revision 0017).
    stablehlo_version: str | None = None


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
    #: Whether this jax reads shardings in the HloSharding form (jax < 0.11.1; None: not
    #: said, by a worker of an older jaxport).
    reads_hlo_shardings: bool | None = None
    #: The StableHLO versions its jaxlib reads, ``(minimum, current)`` (None: not known, as for
    #: a release projected from the installed one, or a worker of an older jaxport).
    stablehlo_range: tuple[str, str] | None = None

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
            "reads_hlo_shardings": self.reads_hlo_shardings,
            "stablehlo_range": None if self.stablehlo_range is None else list(self.stablehlo_range),
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
            reads_hlo_shardings=_optional_bool(data.get("reads_hlo_shardings")),
            stablehlo_range=_optional_range(data.get("stablehlo_range")),
        )


def _optional_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _optional_range(value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    lo, hi = (str(v) for v in value)
    return lo, hi


def capabilities() -> Capabilities:
    """The running jax's capabilities (imports jax; initializes no backend)."""
    from jaxport.export import (
        MAX_SUPPORTED_FORMAT_VERSION,
        MIN_SUPPORTED_FORMAT_VERSION,
        stable_custom_call_targets,
    )
    from jaxport.export._internal import (
        READS_HLO_SHARDINGS,
        jax_versions,
        lowering_platforms,
        registered_custom_call_targets,
        runnable_calling_conventions,
        stablehlo_range,
    )

    platforms = lowering_platforms()
    jax_version, jaxlib_version = jax_versions()
    return Capabilities(
        jax_version=jax_version,
        jaxlib_version=jaxlib_version,
        format_range=(MIN_SUPPORTED_FORMAT_VERSION, MAX_SUPPORTED_FORMAT_VERSION),
        # what a full audit applies (``_checks``): the versions this jax can call, older than
        # the ones it exports (the property test over jax's back-compat data found 6 and 7)
        calling_convention_range=runnable_calling_conventions(),
        platforms=platforms,
        stable_targets=stable_custom_call_targets() | {"shape_assertion"},
        registered_targets={p: registered_custom_call_targets(p) for p in sorted(platforms)},
        reads_hlo_shardings=READS_HLO_SHARDINGS,
        stablehlo_range=stablehlo_range(),
    )


def static_verdict(
    facts: Facts, platform: str, caps: Capabilities, devices: int | None = None
) -> AuditResult:
    """The static verdict for one variant on ``platform`` (see the module docstring):
    ``incompatible``, ``not-run`` (``devices``: how many of the platform this host has; None:
    not known) or ``unknown``, never ``ok``; never raises for odd facts."""
    start = time.perf_counter()
    checks: dict[str, str] = {}
    status, reason = _verdict(facts, platform, caps, checks)
    if status == UNKNOWN:
        missing = _too_few_devices(facts, platform, devices, checks)
        if missing:
            status, reason = NOT_RUN, missing
    return AuditResult(status, reason, checks, time.perf_counter() - start)


def _too_few_devices(
    facts: Facts, platform: str, devices: int | None, checks: dict[str, str]
) -> str:
    """Why a full audit would be ``not-run`` here ("" when it could run, or is not known)."""
    if devices is None or facts.nr_devices is None:
        return ""
    checks["devices"] = f"needs {facts.nr_devices} {platform}, have {devices}"
    if devices == 0:
        return f"no {platform} device here"
    if facts.nr_devices > devices:
        return f"{facts.nr_devices} {platform} devices needed, {devices} available"
    return ""


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
    refused = _hlo_only_shardings(facts, caps, checks) or _older_stablehlo(facts, caps, checks)
    if refused:
        return "incompatible", refused
    notes = _undecided(facts, caps, checks)
    if missing:
        notes.append(f"not recorded at push: {', '.join(missing)}")
    first = "nothing recorded refuses it: only a full audit measures loading, compiling and running"
    return UNKNOWN, "; ".join([first, *notes])


def _hlo_only_shardings(facts: Facts, caps: Capabilities, checks: dict[str, str]) -> str:
    """The refusal of step 5, or "" (also when a fact needed is not recorded)."""
    if not (facts.sharded and (facts.nr_devices or 0) > 1):
        return ""
    writer = facts.jax_version or "unknown"
    if writer == "unknown" or caps.reads_hlo_shardings is not False:
        return ""
    if release_key(writer) >= release_key(_NAMED_SHARDINGS_SINCE):
        return ""
    checks["shardings"] = (
        f"HloSharding form only (written by jax {writer} < {_NAMED_SHARDINGS_SINCE}); "
        f"jax {caps.jax_version} reads named shardings only"
    )
    return (
        f"shardings for {facts.nr_devices} devices in the HloSharding form only (written by jax "
        f"{writer}): jax {caps.jax_version} ignores that form (named shardings only since "
        "0.11.1)"
    )


def _older_stablehlo(facts: Facts, caps: Capabilities, checks: dict[str, str]) -> str:
    """The refusal of step 6, or "" (also when the version or the range is not known)."""
    module, known = facts.stablehlo_version, caps.stablehlo_range
    if not module or known is None:
        return ""
    oldest, current = known
    checks["stablehlo"] = f"{module} (jaxlib {caps.jaxlib_version} reads {oldest}..{current})"
    if release_key(module) >= release_key(oldest):
        return ""
    return (
        f"modules in StableHLO {module}, older than the oldest jaxlib {caps.jaxlib_version} "
        f"reads ({oldest})"
    )


def _undecided(facts: Facts, caps: Capabilities, checks: dict[str, str]) -> list[str]:
    """What the facts say that only a full audit decides: a newer StableHLO version or writer,
    the window."""
    from jaxport._window import jax_window

    notes = []
    module, known = facts.stablehlo_version, caps.stablehlo_range
    if module and known is not None and release_key(module) > release_key(known[1]):
        notes.append(
            f"modules declare StableHLO {module}, newer than jaxlib {caps.jaxlib_version}'s "
            f"{known[1]}: they load only if MLIR parses them"
        )
    writer = facts.jax_version or "unknown"
    if writer != "unknown" and release_key(writer) > release_key(caps.jax_version):
        checks["writer"] = f"jax {writer}, newer than jax {caps.jax_version}"
        notes.append(
            f"written by jax {writer}, newer than jax {caps.jax_version}: its modules may be in a "
            "StableHLO version this jaxlib cannot read"
        )
    if writer != "unknown":
        window = jax_window(writer, sharded=bool(facts.sharded), running=caps.jax_version)
        if window.within_window is False:
            checks["window"] = f"ended {window.window_ends}"
            notes.append(f"outside jax's 6-month window (ended {window.window_ends})")
    return notes


def _names(caps: Capabilities) -> str:
    return ", ".join(sorted(caps.platforms)) or "nothing"
