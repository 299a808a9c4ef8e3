"""Audit statuses, findings and upgrade reports: what an audit measured, nothing more.

Statuses (``STATUSES``), each saying exactly what was measured:

=================  ========================================================================
``ok``             loaded, compiled for the platform on its devices here, and (when the
                   version has golden examples) re-ran them within the dtype's tolerance
``incompatible``   refused before compiling by a version check this jax applies: the archive
                   format version, or a calling convention version outside jax's range
``compile-error``  loaded, but lowering or compiling for the platform here failed
``mismatch``       compiled and ran, but outputs differ from the producer's beyond tolerance
``error``          anything else that failed (unreadable archive, running the examples)
``crash``          the worker process died (a signal, the memory or time limit): the finding
                   names the signal or limit
``not-run``        could not be measured here (no such device, too few devices): never a
                   verdict about the artifact
``unknown``        static level only: no recorded fact refuses it, and nothing was measured
=================  ========================================================================

A finding's ``level`` says what was measured: ``"full"`` (the steps above, in a worker) or
``"static"`` (``_static``: the facts the registry recorded at push against the jax's own
capabilities, nothing parsed or compiled). A static verdict never claims more than a full
audit: it is ``incompatible`` where a recorded fact decides a refusal (also a custom-call
target this jax neither guarantees nor registers for the platform, a platform this jax cannot
lower for, HloSharding-only shardings under jax >= 0.11.1), ``not-run`` where this host lacks
the devices, else ``unknown``, never ``ok``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = [
    "LEVELS",
    "NOT_AUDITED",
    "NOT_RUN",
    "STATUSES",
    "UNKNOWN",
    "UNMEASURED",
    "AuditResult",
    "Finding",
    "UpgradeRow",
    "compare_findings",
    "newest_findings",
    "short_digest",
]

#: Every status an audit reports (see the module docstring for what each proves).
STATUSES = (
    "ok", "incompatible", "compile-error", "mismatch", "error", "crash", "not-run", "unknown",
)  # fmt: skip
#: The status of a check that could not run here.
NOT_RUN = "not-run"
#: A static verdict where no recorded fact refuses the variant: only a full audit can say ok.
UNKNOWN = "unknown"
#: Statuses that measured nothing about the artifact (a later one never hides a measured one).
UNMEASURED = (NOT_RUN, UNKNOWN)
#: ``UpgradeRow.after`` where the target release has no finding.
NOT_AUDITED = "not audited"
#: Check levels: ``full`` loads and compiles in a worker, ``static`` reads recorded facts.
LEVELS = ("full", "static")
#: Hex digits of a digest's short form (``sha256:`` + 12 hex), as ``VariantInfo.short_digest``.
_SHORT_HEX = 12


def short_digest(digest: str) -> str:
    """A hex sha256 in the short form every table shows and every command takes as a
    reference: ``sha256:`` and its first 12 hex digits."""
    return f"sha256:{digest[:_SHORT_HEX]}"


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The outcome of auditing one archive for one platform; ``seconds``: its duration."""

    status: str
    reason: str
    checks: dict[str, str]
    seconds: float


@dataclasses.dataclass(frozen=True)
class Finding:
    """An audit of one variant for one platform by one jax, as the registry stores it.

    A variant is ``(name, version, digest)``: two versions holding the same archive each get
    their finding. ``seconds`` is the audit's duration, ``created_at`` unix seconds;
    ``short_digest`` is derived from ``digest`` (``sha256:`` + 12 hex); ``level`` is ``"full"``
    or ``"static"`` (see the module docstring); ``devices`` how many devices of ``platform``
    the auditing host had (None: not known); ``reused``: stored by an earlier audit with the
    same key (digest x level x jax x jaxlib x platform x devices), not measured again now.
    """

    name: str
    version: int
    digest: str
    jax_version: str
    jaxlib_version: str
    platform: str
    status: str
    reason: str
    checks: dict[str, str]
    seconds: float
    created_at: float
    level: str = "full"
    devices: int | None = None
    reused: bool = False
    short_digest: str = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "short_digest", short_digest(self.digest))


@dataclasses.dataclass(frozen=True)
class UpgradeRow:
    """One variant (``name``, ``version``, ``digest``) on one platform: its status under the
    running jax (``now``) and under the target release (``after``, ``"not audited"`` where no
    finding exists); ``breaks``: ok now and measured not ok after (``not-run`` or a static
    ``unknown`` after is not a break: nothing was measured). ``current`` and ``target`` are
    the two jax releases compared; ``short_digest``: ``sha256:`` + 12 hex of ``digest``."""

    name: str
    version: int
    digest: str
    platform: str
    now: str
    after: str
    reason: str
    breaks: bool
    current: str = ""
    target: str = ""
    short_digest: str = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "short_digest", short_digest(self.digest))


def newest_findings(findings: Sequence[Finding]) -> dict[tuple[str, int, str, str, str], Finding]:
    """The finding that speaks for each (name, version, digest, platform, jax release), from
    ``findings`` newest first: a full audit's before a static one's, and within a level a
    measured one before a later ``not-run`` or ``unknown`` (a host without the device measured
    nothing: it does not hide what another host measured), then the newest."""
    latest: dict[tuple[str, int, str, str, str], Finding] = {}
    ranked = sorted(findings, key=lambda f: (f.level != "full", f.status in UNMEASURED))
    for f in ranked:  # stable: newest first within a rank
        latest.setdefault((f.name, f.version, f.digest, f.platform, f.jax_version), f)
    return latest


def compare_findings(findings: Sequence[Finding], current: str, target: str) -> list[UpgradeRow]:
    """What moving from jax ``current`` to ``target`` breaks, from stored findings (newest
    first: the one ``newest_findings`` picks per variant, release and platform counts).

    One row per variant ``(name, version, digest)`` and platform with a finding under either
    release, in name, version, digest, platform order; the side without one says "not
    audited" (nothing is left out silently, and no row appears twice).
    """
    latest = newest_findings(findings)
    keys = sorted({k[:4] for k in latest if k[4] in (current, target)})
    rows = []
    for key in keys:
        now, after = latest.get((*key, current)), latest.get((*key, target))
        now_status = now.status if now else NOT_AUDITED
        after_status = after.status if after else NOT_AUDITED
        name, version, digest, platform = key
        rows.append(
            UpgradeRow(
                name=name,
                version=version,
                digest=digest,
                platform=platform,
                now=now_status,
                after=after_status,
                reason=after.reason if after and after.status != "ok" else "",
                breaks=now_status == "ok" and after_status not in ("ok", *UNMEASURED, NOT_AUDITED),
                current=current,
                target=target,
            )
        )
    return rows
