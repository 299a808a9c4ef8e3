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
=================  ========================================================================

A finding's ``level`` says what was measured: ``"full"`` (the steps above, in a worker) or
``"static"`` (``_static``: the facts the registry recorded at push against the jax's own
capabilities, nothing parsed or compiled). At the static level ``ok`` means only "every
recorded fact is within this jax's capabilities", and ``incompatible`` also covers a
custom-call target this jax neither guarantees nor registers for the platform, and a platform
this jax cannot lower for; a fact the registry did not record is ``not-run``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = [
    "LEVELS",
    "NOT_AUDITED",
    "NOT_RUN",
    "STATUSES",
    "AuditResult",
    "Finding",
    "UpgradeRow",
    "compare_findings",
]

#: Every status an audit reports (see the module docstring for what each proves).
STATUSES = ("ok", "incompatible", "compile-error", "mismatch", "error", "crash", "not-run")
#: The status of a check that could not run here.
NOT_RUN = "not-run"
#: ``UpgradeRow.after`` where the target release has no finding.
NOT_AUDITED = "not audited"
#: Check levels: ``full`` loads and compiles in a worker, ``static`` reads recorded facts.
LEVELS = ("full", "static")


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

    ``seconds`` is the audit's duration, ``created_at`` unix seconds; ``level`` is ``"full"``
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


@dataclasses.dataclass(frozen=True)
class UpgradeRow:
    """One variant on one platform: its status under the running jax (``now``) and under the
    target release (``after``, ``"not audited"`` where no finding exists); ``breaks``: ok now
    and measured not ok after (``not-run`` after is not a break: nothing was measured)."""

    name: str
    version: int
    digest: str
    platform: str
    now: str
    after: str
    reason: str
    breaks: bool


def compare_findings(findings: Sequence[Finding], current: str, target: str) -> list[UpgradeRow]:
    """What moving from jax ``current`` to ``target`` breaks, from stored findings (newest
    first: the newest per digest, release and platform counts, a full audit before a static
    one). Every variant and platform
    with a finding under either release gets a row; the side without one says "not audited"
    (nothing is left out silently)."""
    latest: dict[tuple[str, str, str], Finding] = {}
    for f in sorted(findings, key=lambda f: f.level != "full"):  # stable: newest full first
        latest.setdefault((f.digest, f.jax_version, f.platform), f)
    keys = {(d, p): f for (d, r, p), f in latest.items() if r in (current, target)}
    rows = []
    for (digest, platform), f in sorted(
        keys.items(), key=lambda kv: (kv[1].name, kv[1].version, kv[0][1], kv[0][0])
    ):
        now, after = latest.get((digest, current, platform)), latest.get((digest, target, platform))
        now_status = now.status if now else NOT_AUDITED
        after_status = after.status if after else NOT_AUDITED
        rows.append(
            UpgradeRow(
                name=f.name,
                version=f.version,
                digest=digest,
                platform=platform,
                now=now_status,
                after=after_status,
                reason=after.reason if after and after.status != "ok" else "",
                breaks=now_status == "ok" and after_status not in ("ok", NOT_RUN, NOT_AUDITED),
            )
        )
    return rows
