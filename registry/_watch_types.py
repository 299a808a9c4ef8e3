"""The jax-release watcher's results (``Registry.watch_jax``, ``Registry.forecast``), apart
from the modules that compute them so that a registry server's client reads them without
SQLAlchemy (``from_wire``)."""

from __future__ import annotations

import dataclasses

__all__ = ["ReleaseSummary", "SeenRelease", "VariantForecast", "WatchReport"]


@dataclasses.dataclass(frozen=True)
class SeenRelease:
    """A release the watcher found new on the index: ``package`` (jax or jaxlib), ``version``,
    ``uploaded_at`` (unix seconds; None: the index did not say)."""

    package: str
    version: str
    uploaded_at: float | None


@dataclasses.dataclass(frozen=True)
class ReleaseSummary:
    """What a new jax release says of every variant (``audit._watch.release_verdict``).

    Attributes:
        version: the jax release; ``published``: its day (``YYYY-MM-DD``: the index's upload
            time, else jax's table, else the day it was seen).
        variants: variants judged; ``ok``, ``expires``, ``refused``: how many had each
            outcome (they add up to ``variants``); ``rescue``: how many of the expired and
            refused a re-export would save.
        expiring: per window end date (``YYYY-MM-DD``), how many variants it expires.
        refusals: the most common static refusal reasons and how many variants each.
        enqueued: full audit jobs added to the queue (a job already waiting is not counted);
            ``queue``: what happened to the full audits, in words.
        seconds: the static pass's duration.
        judged_by: whose capabilities the static pass applied: the release's own (its audit
            environment is ready here, or it is the installed jax), or the installed jax's
            projected to it (``audit._watch.projected_capabilities``).
    """

    version: str
    published: str
    variants: int
    ok: int
    expires: int
    refused: int
    rescue: int
    expiring: dict[str, int]
    refusals: dict[str, int]
    enqueued: int
    queue: str
    seconds: float
    judged_by: str = ""


@dataclasses.dataclass(frozen=True)
class WatchReport:
    """One watch: the ``index`` read (no user info), the ``new`` releases found (jax's and
    jaxlib's, oldest first), a ``ReleaseSummary`` per new jax release, and whether it was a
    ``dry_run`` (nothing recorded, nothing enqueued, no event)."""

    index: str
    new: list[SeenRelease]
    releases: list[ReleaseSummary]
    dry_run: bool


@dataclasses.dataclass(frozen=True)
class VariantForecast:
    """One variant's outlook (dates ``YYYY-MM-DD``).

    Attributes:
        name, version, digest, platforms: the variant.
        runs_on: the jax releases full audits found it ``ok`` under, oldest first.
        writer: the jax release that wrote it (``"unknown"``: not recorded).
        window_ends: the last day of jax's 6-month window for it (None: not known).
        newest_release: the newest jax release the watcher has seen (None: none yet).
        outlook: what ``newest_release`` says: ``ok``, ``expires``, ``refused``, or ``""``
            (no release seen); ``reason``: why, for the last two.
    """

    name: str
    version: int
    digest: str
    platforms: tuple[str, ...]
    runs_on: tuple[str, ...]
    writer: str
    window_ends: str | None
    newest_release: str | None
    outlook: str
    reason: str
