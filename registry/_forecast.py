"""``Registry.forecast``: per variant, the jax releases it is known to run on, when jax's window
for it ends, and what the newest jax release the watcher has seen says of it.

"Known to run on" is measured: the releases under which the finding that speaks for each of
its platforms (``newest_findings``) is a full audit, ``ok`` on at least one platform and a
failure on none (as ``windows``' ``last_known_release``). What the newest release says is the
watcher's static verdict (``audit._watch.release_verdict``), recomputed from the recorded facts:
``ok`` (nothing refuses it: a full audit decides), ``expires`` or ``refused``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Engine, select

from jaxport.registry import _db
from jaxport.registry._models import JaxReleaseRow
from jaxport.registry._types import Ref
from jaxport.registry._watch_types import VariantForecast

if TYPE_CHECKING:
    from jaxport.audit import Facts, Finding
    from jaxport.registry._queries import Queries

__all__ = ["forecast", "newest_seen", "targets"]

#: Versions read in one page (every version of a name).
_ALL = 1_000_000


def targets(queries: Queries, reference: str | None) -> list[Ref]:
    """The versions ``reference`` names: one (``NAME:V``, ``NAME@ALIAS``, a digest), all of a
    name's, or every version (None).

    Raises:
        NotFoundError, InvalidNameError: as ``Registry.get``.
    """
    from jaxport.registry._names import parse_reference

    if reference is None:
        return [r for n in queries.names() for r in queries.page(n, limit=_ALL, after=None)]
    ref = parse_reference(reference)
    if ref.name is not None and ref.version is None and ref.alias is None:
        return queries.page(ref.name, limit=_ALL, after=None)
    return [queries.get(reference)]


def newest_seen(engine: Engine) -> tuple[str, float | None, float] | None:
    """The newest jax release recorded as seen: ``(version, uploaded_at, seen_at)``, or None."""
    from packaging.version import InvalidVersion, Version

    with _db.translating_db_errors(), engine.connect() as conn:
        rows = conn.execute(
            select(JaxReleaseRow.version, JaxReleaseRow.uploaded_at, JaxReleaseRow.seen_at).where(
                JaxReleaseRow.package == "jax"
            )
        ).all()
    best = None
    for version, uploaded, seen in rows:
        try:
            key = Version(version)
        except InvalidVersion:
            continue
        if best is None or key > best[0]:
            best = (key, (version, uploaded, seen))
    return None if best is None else best[1]


def forecast(
    refs: Sequence[Ref], findings: Sequence[Finding], newest: tuple[str, float | None, float] | None
) -> list[VariantForecast]:
    """Each variant of ``refs`` (in their order) with its forecast; ``findings``: stored audits
    of them, newest first; ``newest``: ``newest_seen``'s answer."""
    from jaxport._window import jax_window

    runs_on = _runs_on(findings)
    judge = _judge(refs, newest)
    rows = []
    for ref in refs:
        for v in ref.variants:
            ends = jax_window(v.jax_version, sharded=v.sharded).window_ends
            outlook, reason = judge(_facts(v)) if judge else ("", "")
            rows.append(VariantForecast(
                ref.name, ref.version, v.digest, v.platforms, runs_on.get(v.digest, ()),
                v.jax_version, ends, newest[0] if newest else None, outlook, reason,
            ))  # fmt: skip
    return rows


def _facts(v: object) -> Facts:
    from jaxport.audit import Facts

    return Facts(
        format_version=getattr(v, "format_version", None),
        calling_convention_version=getattr(v, "calling_convention_version", None),
        platforms=tuple(getattr(v, "platforms", ())),
        custom_call_targets=tuple(getattr(v, "custom_call_targets", ())),
        kind=getattr(v, "kind", "function"), jax_version=getattr(v, "jax_version", None),
        sharded=getattr(v, "sharded", None), nr_devices=getattr(v, "nr_devices", None),
        stablehlo_version=getattr(v, "stablehlo_version", None),
    )  # fmt: skip


def _judge(
    refs: Sequence[Ref], newest: tuple[str, float | None, float] | None
) -> Callable[[Facts], tuple[str, str]] | None:
    """``facts -> (outcome, reason)`` for the newest seen release, or None (none seen)."""
    if newest is None:
        return None
    from jaxport.audit import capabilities
    from jaxport.audit._internal import projected_capabilities, release_day, release_verdict

    version, uploaded, seen = newest
    conventions = [v.calling_convention_version for r in refs for v in r.variants]
    caps = projected_capabilities(capabilities(), version, max(conventions, default=0))
    day = release_day(version, uploaded, seen)

    def judge(facts: Facts) -> tuple[str, str]:
        verdict = release_verdict(facts, caps, day)
        return verdict.outcome, verdict.reason

    return judge


def _runs_on(findings: Sequence[Finding]) -> dict[str, tuple[str, ...]]:
    """Per digest, the releases whose full findings say ``ok`` (module docstring)."""
    from packaging.version import InvalidVersion, Version

    from jaxport.audit import UNMEASURED, newest_findings

    verdicts: dict[tuple[str, str], set[str]] = {}
    for (_, _, digest, _, release), f in newest_findings(findings).items():
        if f.level == "full":
            verdicts.setdefault((digest, release), set()).add(f.status)
    found: dict[str, set[str]] = {}
    for (digest, release), statuses in verdicts.items():
        if "ok" in statuses and not statuses - {"ok", *UNMEASURED}:
            found.setdefault(digest, set()).add(release)

    def key(release: str) -> tuple[int, Version | str]:
        try:
            return (1, Version(release))
        except InvalidVersion:
            return (0, release)

    return {d: tuple(sorted(rs, key=key)) for d, rs in found.items()}
