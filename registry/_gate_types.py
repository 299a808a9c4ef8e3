"""What protected aliases' gates are, as users and the wire see them: ``AliasGates`` (an
alias's gates), ``GateCheck`` and ``GateResult`` (their outcome for a version), the check of a
gate spec and the ``GateError`` a refused move raises. No database library is imported here:
a registry server's client builds these from JSON (``registry/_gates.py`` evaluates them)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from jaxport import GateError, InvalidNameError
from jaxport.registry._names import KNOWN_PLATFORMS, check_text

__all__ = [
    "GATE_STATUSES",
    "AliasGates",
    "GateCheck",
    "GateResult",
    "check_gate_spec",
    "gate_error",
    "record_of",
    "refused_after_push",
]

#: The statuses an audit gate may require.
GATE_STATUSES = ("ok",)
#: A jax release as a gate names it: ``0.11.2``, ``0.12.0.1``, ``0.7.0rc1`` (at least three
#: numbers: findings name a release in full, so ``0.11`` would match none of them).
_RELEASE = re.compile(r"[0-9]+(\.[0-9]+){2,}([a-z]+[0-9]*)?")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class AliasGates:
    """The gates of a protected alias ``name@alias``.

    Attributes:
        name, alias: the alias protected.
        require_signature: a signer's fingerprint (64 hex digits) that must have signed every
            variant, or None.
        require_audit: the status (``"ok"``) every audit target needs, or None.
        jax_releases: the jax releases of the audit gate (empty: any release).
        platforms: the platforms of the audit gate (empty: every platform of the version).
        require_goldens: the version must hold golden examples.
        created_at: when it was protected (unix seconds); created_by: who (event actor).
    """

    name: str
    alias: str
    require_signature: str | None
    require_audit: str | None
    jax_releases: tuple[str, ...]
    platforms: tuple[str, ...]
    require_goldens: bool
    created_at: float
    created_by: str

    def describe(self) -> list[str]:
        """The gates in words, one line each (``signature by 3f2a...``)."""
        lines = []
        if self.require_signature:
            lines.append(f"signature by {self.require_signature[:12]}")
        if self.require_audit:
            jax = ", ".join(self.jax_releases) or "any jax"
            where = ", ".join(self.platforms) or "every platform"
            lines.append(f"audit {self.require_audit} on {where} under {jax}")
        if self.require_goldens:
            lines.append("golden examples")
        return lines


@dataclasses.dataclass(frozen=True)
class GateResult:
    """One gate's outcome for one version: ``gate`` (``signature``, ``audit``, ``goldens``),
    ``target`` (for ``audit``: ``PLATFORM@JAX``, ``*`` for any release; else empty),
    ``passed``, and ``reason`` (what passed it or why it failed)."""

    gate: str
    target: str
    passed: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class GateCheck:
    """A protected alias's gates evaluated for one version (``Registry.check_gates``, and
    for the alias's current version in ``Registry.gates``).

    Attributes:
        gates: the alias's gates.
        version: the version evaluated (None: the alias points nowhere; nothing evaluated).
        results: each gate's outcome, in gate order.
        passed: every gate passed (False where no version was evaluated).
        evidence: the stored facts relied on: ``audits`` (dicts of ``id``, ``digest``,
            ``jax_version``, ``platform``, ``status``), ``signatures`` (``digest``, ``signer``,
            ``bundle_digest``), ``examples`` (``digest``, ``count``, or None).
    """

    gates: AliasGates
    version: int | None
    results: tuple[GateResult, ...]
    evidence: dict[str, Any]
    #: Every gate passed (False where no version was evaluated); derived, sent in JSON.
    passed: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        passed = self.version is not None and all(r.passed for r in self.results)
        object.__setattr__(self, "passed", passed)

    @property
    def failures(self) -> tuple[tuple[str, str], ...]:
        """``(gate, reason)`` of every gate that failed."""
        return tuple((r.gate, _labelled(r)) for r in self.results if not r.passed)


def _labelled(r: GateResult) -> str:
    return f"{r.target}: {r.reason}" if r.target else r.reason


# -- specs and refusals


def check_gate_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A gate spec checked and normalised: ``require_signature`` (64 lowercase hex digits or
    None), ``require_audit`` (``"ok"`` or None), ``jax_releases`` and ``platforms`` (tuples,
    only with ``require_audit``), ``require_goldens`` (bool); at least one gate.

    Raises:
        InvalidNameError: anything else.
    """
    signer = spec.get("require_signature")
    if signer is not None:
        signer = check_text(signer, "require_signature").strip().lower()
        if not _FINGERPRINT.fullmatch(signer):
            raise InvalidNameError(
                "require_signature must be a signer's fingerprint (64 hex digits, as "
                "`jaxport show` lists signatures) or a PEM public key or certificate"
            )
    status = spec.get("require_audit")
    if status is not None and status not in GATE_STATUSES:
        raise InvalidNameError(f"require_audit must be one of {', '.join(GATE_STATUSES)}")
    releases = tuple(dict.fromkeys(_listed(spec.get("jax_releases", ()), "jax_releases")))
    for r in releases:
        if not _RELEASE.fullmatch(r):
            raise InvalidNameError(f"{r!r:.40} is not a jax release (e.g. 0.11.2)")
    platforms = tuple(
        dict.fromkeys(p.lower() for p in _listed(spec.get("platforms", ()), "platforms"))
    )
    for p in platforms:
        if p not in KNOWN_PLATFORMS:
            raise InvalidNameError(
                f"unknown platform {p!r:.40}: use one of {', '.join(KNOWN_PLATFORMS)}"
            )
    if (releases or platforms) and status is None:
        raise InvalidNameError(
            "jax releases and platforms are targets of require_audit: give require_audit='ok' too"
        )
    goldens = spec.get("require_goldens", False)
    if not isinstance(goldens, bool):
        raise InvalidNameError("require_goldens must be True or False")
    if signer is None and status is None and not goldens:
        raise InvalidNameError(
            "protect needs a gate: require_signature, require_audit or require_goldens"
        )
    return {
        "require_signature": signer, "require_audit": status, "jax_releases": releases,
        "platforms": platforms, "require_goldens": goldens,
    }  # fmt: skip


def _listed(values: Iterable[str] | str, what: str) -> list[str]:
    if isinstance(values, str):
        values = values.split(",")
    found = [check_text(v, what).strip() for v in values]
    return [v for v in found if v]


def refused_after_push(name: str, version: int, refused: Iterable[GateError]) -> GateError:
    """One ``GateError`` for a push whose aliases' gates refused them: the version was
    stored; every refused alias's failures listed."""
    refused = list(refused)
    failures = tuple(f for e in refused for f in e.failures)
    said = "; ".join(str(e) for e in refused)
    return GateError(
        f"{name}:{version} was pushed, but not given its protected aliases: {said}",
        failures=failures,
        version=version,
    )


def gate_error(
    name: str, alias: str, version: int, failures: tuple[tuple[str, str], ...]
) -> GateError:
    """The refusal of a move of ``name@alias`` to ``version`` that fails ``failures``."""
    listed = "; ".join(f"{gate} gate: {reason}" for gate, reason in failures)
    return GateError(
        f"{name}@{alias} is protected: {name}:{version} fails {len(failures)} gate(s): {listed} "
        "(an unprefixed admin may override, with a reason)",
        failures=failures,
        version=version,
    )


def record_of(check: GateCheck) -> dict[str, Any]:
    """What a gated move's event records: the gates, whether they passed, and the stored
    facts relied on."""
    spec = dataclasses.asdict(check.gates)
    del spec["name"], spec["alias"], spec["created_at"], spec["created_by"]
    return {"gates": spec, "passed": check.passed, **check.evidence}
