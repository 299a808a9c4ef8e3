"""The jax-release watcher on a registry database (``Registry.watch_jax``): new jax and jaxlib
releases on the package index, a static pass of every variant against each new jax release,
full audits enqueued for it, the release recorded as seen, and one ``jax-release`` event.

The index and the verdicts are ``jaxport.audit._watch``'s; this module reads the variants'
recorded facts in one ``SELECT`` (soft-deleted versions left out), judges each distinct set of
facts once (variants share them: 100,000 variants are a few hundred judgements), counts the
outcomes, and writes. Nothing is stored per variant: a static verdict is recomputed from the
facts whenever asked (``audit forecast``), and a full audit's finding is what a worker stores.

Full audits are enqueued on a PostgreSQL registry with the audit queue (``_queue``), one job per
variant and platform in the release's environment, for every variant not refused statically;
on SQLite the report says how to run them (``jaxport audit run --jax RELEASE``). The release is
recorded (``jax_releases``) with its event in one transaction after the jobs are deferred: a
watch that fails before that is repeated whole by the next one (a job already waiting is not
added twice).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, insert, select

from jaxport import RegistryError, UnsupportedFeatureError
from jaxport.registry import _db
from jaxport.registry._models import JaxReleaseRow, NameRow, VariantRow, VersionRow
from jaxport.registry._queue import QueuedJob
from jaxport.registry._watch_types import ReleaseSummary, SeenRelease, WatchReport

if TYPE_CHECKING:
    import httpx

    from jaxport.audit import Facts
    from jaxport.audit._internal import Capabilities, IndexRelease, ReleaseVerdict
    from jaxport.registry._event_log import EventLog

__all__ = [
    "PACKAGES",
    "facts_select",
    "judge_all",
    "seen_releases",
    "watch",
]

#: The packages watched; audits follow ``jax`` releases (an environment pins jaxlib to it).
PACKAGES = ("jax", "jaxlib")
#: The refusal reasons an event or report keeps (the most common first).
_REASONS = 10


def facts_select() -> Any:
    """The ``SELECT`` of what the pass reads of each live variant (also the benchmark's
    baseline)."""
    return (
        select(
            NameRow.name,
            VersionRow.version,
            VariantRow.digest,
            VariantRow.format_version,
            VariantRow.calling_convention_version,
            VariantRow.platforms,
            VariantRow.custom_call_targets,
            VariantRow.kind,
            VariantRow.jax_version,
            VariantRow.sharded,
            VariantRow.nr_devices,
            VariantRow.stablehlo_version,
        )
        .join(VersionRow, VersionRow.id == VariantRow.version_id)
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(VersionRow.deleted_at.is_(None))
    )


def seen_releases(engine: Engine) -> dict[str, set[str]]:
    """Per package, the releases recorded as seen."""
    found: dict[str, set[str]] = {p: set() for p in PACKAGES}
    with _db.translating_db_errors(), engine.connect() as conn:
        for package, version in conn.execute(select(JaxReleaseRow.package, JaxReleaseRow.version)):
            found.setdefault(package, set()).add(version)
    return found


def _facts(row: Any) -> Facts:
    from jaxport.audit import Facts

    try:
        targets = json.loads(row.custom_call_targets)
        custom: tuple[str, ...] | None = tuple(str(t) for t in targets)
    except (TypeError, ValueError):
        custom = None
    return Facts(
        format_version=row.format_version,
        calling_convention_version=row.calling_convention_version,
        platforms=tuple(p for p in str(row.platforms).split(",") if p),
        custom_call_targets=custom, kind=row.kind, jax_version=row.jax_version,
        sharded=row.sharded, nr_devices=row.nr_devices,
        stablehlo_version=row.stablehlo_version,
    )  # fmt: skip


def judge_all(
    rows: Iterable[Any], verdict: Callable[[Facts], ReleaseVerdict]
) -> Iterable[tuple[Any, ReleaseVerdict]]:
    """Each row of ``facts_select`` with its verdict, each distinct set of facts judged once."""
    memo: dict[tuple[Any, ...], ReleaseVerdict] = {}
    for row in rows:
        key = tuple(row[3:])
        found = memo.get(key)
        if found is None:
            found = memo[key] = verdict(_facts(row))
        yield row, found


def _static_pass(
    engine: Engine, base: Capabilities, release: IndexRelease, now: float, source: str = ""
) -> tuple[ReleaseSummary, list[QueuedJob]]:
    from jaxport.audit._internal import projected_capabilities, release_day, release_verdict

    start = time.perf_counter()
    with _db.translating_db_errors(), engine.connect() as conn:
        rows = conn.execute(facts_select()).all()
    newest = max((r.calling_convention_version for r in rows), default=0)
    caps = projected_capabilities(base, release.version, newest)
    day = release_day(release.version, release.uploaded_at, now)
    counts: collections.Counter[str] = collections.Counter()
    expiring: collections.Counter[str] = collections.Counter()
    refusals: collections.Counter[str] = collections.Counter()
    jobs: list[QueuedJob] = []
    for row, v in judge_all(rows, lambda f: release_verdict(f, caps, day)):
        counts[v.outcome] += 1
        counts["rescue"] += v.rescue
        if v.outcome == "expires" and v.window_ends:
            expiring[v.window_ends] += 1
        if v.outcome == "refused":
            refusals[v.reason] += 1
        else:  # a full audit measures what a static one cannot decide (expired ones too)
            jobs.extend(_jobs(row, release.version))
    summary = ReleaseSummary(
        version=release.version, published=day.isoformat(), variants=len(rows),
        ok=counts["ok"], expires=counts["expires"], refused=counts["refused"],
        rescue=counts["rescue"], expiring=dict(sorted(expiring.items())),
        refusals=dict(refusals.most_common(_REASONS)), enqueued=0, queue="",
        seconds=time.perf_counter() - start,
        judged_by=source or _judged_by(base, release.version),
    )  # fmt: skip
    return summary, jobs


def _judged_by(base: Capabilities, release: str) -> str:
    if base.jax_version == release:
        return f"the installed jax {release}'s capabilities"
    return f"the installed jax {base.jax_version}'s capabilities projected to {release}"


def _base_for(release: str, installed: Capabilities) -> tuple[Capabilities, str]:
    """The capabilities to judge ``release`` by: those of its audit environment where one is
    ready under ``$JAXPORT_HOME/envs`` (asked of one worker there), else the installed jax's.
    An environment whose worker does not answer is passed over (the installed jax's serve)."""
    from jaxport import AuditError, NotFoundError
    from jaxport.audit import cached_environment, worker_capabilities
    from jaxport.registry._config import default_home

    python = cached_environment(release, default_home())
    if python is None:
        return installed, ""
    try:
        caps = worker_capabilities(python)
    except (AuditError, NotFoundError):
        return installed, ""
    return caps, f"the capabilities of its audit environment (jax {caps.jax_version})"


def _jobs(row: Any, release: str) -> list[QueuedJob]:
    """The full audits of one variant in ``release``'s environment, one per queue platform."""
    from jaxport.registry._queue import PLATFORMS

    platforms = [p for p in str(row.platforms).split(",") if p in PLATFORMS]
    return [
        QueuedJob(row.name, row.version, row.digest, p, row.nr_devices, None, release)
        for p in dict.fromkeys(platforms)
    ]


def _enqueue(
    engine: Engine, jobs: list[QueuedJob], release: str, timeout: float
) -> tuple[int, str]:
    """Defers ``jobs``; ``(added, what happened in words)``. A registry without the queue
    (SQLite, or PostgreSQL without ``jaxport[queue]``) is said, not an error."""
    from jaxport.registry import _queue

    if engine.dialect.name != "postgresql":
        return 0, f"no audit queue on SQLite: run `jaxport audit run --jax {release}`"
    try:
        _queue.check(engine)
    except (UnsupportedFeatureError, RegistryError) as e:
        return 0, f"no audit queue ({str(e)[:120]}): run `jaxport audit run --jax {release}`"
    done = _queue.enqueue_jobs(engine, jobs, timeout)
    added = sum(1 for j in done if j.job_id is not None)
    return added, f"{added} full audit job(s) enqueued, {len(done) - added} already waiting"


def watch(
    engine: Engine,
    events: EventLog,
    *,
    index: str | None,
    dry_run: bool,
    prereleases: bool,
    enqueue: bool,
    timeout: float,
    client: httpx.Client | None = None,
) -> WatchReport:
    """See ``Registry.watch_jax``."""
    from jaxport.audit import capabilities
    from jaxport.audit._internal import index_url, newer_releases, read_releases, shown_url

    url = index_url(index)
    seen = seen_releases(engine)
    new: list[IndexRelease] = []
    for package in PACKAGES:
        listed = read_releases(url, package, client=client)
        new += newer_releases(listed, seen.get(package, set()), prereleases=prereleases)
    now = time.time()
    summaries = []
    base = capabilities() if any(r.package == "jax" for r in new) else None
    for release in new:
        if release.package != "jax" or base is None:
            continue
        caps, source = _base_for(release.version, base)
        summary, jobs = _static_pass(engine, caps, release, now, source)
        if dry_run:
            queue = "dry run: nothing enqueued"
            added = 0
        elif not enqueue:
            added, queue = 0, "not enqueued (asked)"
        else:
            added, queue = _enqueue(engine, jobs, release.version, timeout)
        summaries.append(dataclasses.replace(summary, enqueued=added, queue=queue))
    if not dry_run:
        _record(engine, events, new, summaries, now, shown_url(url))
    return WatchReport(
        index=shown_url(url),
        new=[SeenRelease(r.package, r.version, r.uploaded_at) for r in new],
        releases=summaries,
        dry_run=dry_run,
    )


def _record(
    engine: Engine,
    events: EventLog,
    new: list[IndexRelease],
    summaries: list[ReleaseSummary],
    now: float,
    index: str,
) -> None:
    """Records ``new`` as seen and one ``jax-release`` event per summary, in one transaction;
    a release another watcher recorded meanwhile is skipped with its event."""
    from sqlalchemy.exc import IntegrityError

    done = []
    with _db.translating_db_errors():
        for release in new:
            summary = next((s for s in summaries if s.version == release.version), None)
            row = {"package": release.package, "version": release.version, "seen_at": now,
                   "uploaded_at": release.uploaded_at}  # fmt: skip
            try:
                with _db.write_transaction(engine) as conn:
                    conn.execute(insert(JaxReleaseRow).values(**row))
                    if release.package == "jax" and summary is not None:
                        detail = {"index": index, **dataclasses.asdict(summary)}
                        done.append(events.insert(conn, "jax-release", detail=detail))
            except IntegrityError:  # another watcher recorded it first
                continue
    for event in done:
        events.notify(event)
