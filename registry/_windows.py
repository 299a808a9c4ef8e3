"""Where each variant stands in jax's 6-month backward-compatibility window (``jaxport._window``),
with the newest jax release its stored audits found it ``ok`` under.

Nothing here is measured: the window comes from the producer's jax release and the table of
release dates; ``last_known_release`` is what stored audits measured.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from jaxport import InvalidNameError
from jaxport._window import JaxWindow, jax_window
from jaxport.registry._types import Ref

if TYPE_CHECKING:
    from jaxport.audit import Finding

__all__ = ["VariantWindow", "expiring_date", "variant_windows"]


@dataclasses.dataclass(frozen=True)
class VariantWindow:
    """One variant and its ``JaxWindow`` (dates ISO 8601, ``YYYY-MM-DD``).

    ``window.last_known_release`` is the newest jax release a stored audit found this variant
    ``ok`` under (any platform), None when none did.
    """

    name: str
    version: int
    digest: str
    platforms: tuple[str, ...]
    window: JaxWindow


def expiring_date(value: str | datetime.date) -> datetime.date:
    """``--expiring-before``'s argument: a date, or ``YYYY-MM-DD``.

    Raises:
        InvalidNameError: not a date in that form.
    """
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(value.strip())
    except ValueError:
        raise InvalidNameError(f"not a date YYYY-MM-DD: {value[:40]!r}") from None


def variant_windows(
    refs: Iterable[Ref],
    findings: Sequence[Finding],
    *,
    expiring_before: datetime.date | None = None,
    running: str | None = None,
) -> list[VariantWindow]:
    """Each variant of ``refs`` (in their order) with its window.

    Args:
        refs: the versions whose variants to judge.
        findings: stored audits of them, newest first (others are ignored); full ``ok``
            ones give ``last_known_release`` (``_last_ok``).
        expiring_before: keep only variants whose window ends before this date, and those whose
            end is unknown (the producer's release is not in the table: it cannot be said).
        running: the jax to judge against (default: the installed one).
    """
    newest_ok = _last_ok(findings)
    limit = expiring_before.isoformat() if expiring_before else None
    rows = []
    for ref in refs:
        for v in ref.variants:
            window = jax_window(v.jax_version, sharded=v.sharded, running=running)
            window = dataclasses.replace(window, last_known_release=newest_ok.get(v.digest))
            ends = window.window_ends
            if limit is not None and ends is not None and ends >= limit:
                continue
            rows.append(VariantWindow(ref.name, ref.version, v.digest, v.platforms, window))
    return rows


def _last_ok(findings: Sequence[Finding]) -> dict[str, str]:
    """Per digest, the newest jax release under which its full audits say ``ok``: the finding
    that speaks for each platform (``newest_findings``) is a full one, ``ok`` on at least one
    platform and a failure on none (``not-run`` measured nothing). A static verdict is never
    ``ok``; a stored static ``ok`` of an earlier jaxport does not count either."""
    from jaxport.audit import UNMEASURED, newest_findings

    verdicts: dict[tuple[str, str], set[str]] = {}
    for (_, _, digest, _, release), f in newest_findings(findings).items():
        if f.level == "full":
            verdicts.setdefault((digest, release), set()).add(f.status)
    newest: dict[str, str] = {}
    for (digest, release), statuses in verdicts.items():
        if "ok" not in statuses or statuses - {"ok", *UNMEASURED}:
            continue
        if digest not in newest or _key(release) > _key(newest[digest]):
            newest[digest] = release
    return newest


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))
