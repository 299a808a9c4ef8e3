"""``Registry.rescue``: fleet rescue (``registry/_fleet_rescue.py``), a mixin of ``Registry``
(``registry/_registry.py``), and the one job a queue worker runs per variant."""

from __future__ import annotations

import builtins
import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jaxport import (
    CorruptArchiveError,
    DuplicateVariantError,
    InvalidNameError,
    NotFoundError,
    UnsupportedFeatureError,
    UnsupportedVersionError,
)
from jaxport.registry._backend import Backend
from jaxport.registry._fleet_rescue import (
    RESCUE_DERIVATION,
    RESCUE_JAX,
    FleetRescueReport,
    RescueCandidate,
    RescuedVersion,
    RescueRefusal,
    rescue_version,
    select,
)
from jaxport.registry._names import check_timeout
from jaxport.registry._types import Ref

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry

__all__ = ["RegistryRescue", "rescue_job"]


class RegistryRescue:
    """``Registry.rescue`` (see ``Registry``)."""

    _backend: Backend

    def rescue(
        self,
        expiring_before: str | datetime.date,
        *,
        prefix: str | None = None,
        jax: str = RESCUE_JAX,
        python: str | None = None,
        dry_run: bool = False,
        enqueue: bool = False,
        timeout: float = 600.0,
    ) -> FleetRescueReport:
        """Rescues every variant whose jax window ends before ``expiring_before``, and every
        one whose shardings are in the HloSharding form only, of each name's newest version
        and its aliased versions (``registry/_fleet_rescue.py``).

        Each is re-exported in a child process of jax ``jax``'s managed environment
        (``$JAXPORT_HOME/envs/jax-RELEASE``, made on first use: ``audit/_envs.py``), checked
        (the version's golden examples re-run; where it has none, the re-export against the
        source on deterministic inputs), and the version is pushed again with the re-exports
        in place (other variants carried over unchanged), ``derived_from`` the source and
        ``derivation="rescue"``; the aliases that pointed at the source move only where their
        gates pass (``GateError``, ``SignatureError``: a refusal). One ``rescue`` event per
        rescued version. A version any of whose candidates fails is left as it was. Running it
        again rescues nothing twice: the same re-export is the same version.

        Args:
            expiring_before: a date or ``YYYY-MM-DD``: windows ending before it.
            prefix: only names starting with it.
            jax: the release to re-export with (default ``RESCUE_JAX``, 0.10.2: the
                newest that runs on Python 3.11 and reads the HloSharding form).
            python: an interpreter with jax and this jaxport to re-export with instead of the
                managed environment (then its jax is the release; ``jax`` still decides what
                is refused before anything runs).
            dry_run: select and report; re-export, push and move nothing.
            enqueue: put one job per variant on the audit queue (PostgreSQL; the queue of
                its first platform, ``audit-PLATFORM``) for ``jaxport audit-worker``
                processes, instead of rescuing here.
            timeout: seconds each re-export (and its check) may take.

        Returns:
            A ``FleetRescueReport``: candidates, rescued versions, every refusal with its
            reason, queued jobs; ``summary()`` says it in one line.

        Raises:
            InvalidNameError: a malformed date, prefix or timeout; a release that is not
                digits and dots.
            UnsupportedFeatureError: ``enqueue`` on SQLite (the queue needs PostgreSQL) or
                through a registry server.
            RegistryError: ``enqueue``: the queue failed, or is not installed (``jaxport db
                upgrade``).
            PermissionDeniedError: through a server, a token that may not write a name.
        """
        from jaxport.registry._windows import expiring_date

        before = expiring_date(expiring_before)
        if prefix is not None and (not isinstance(prefix, str) or len(prefix) > 200):
            raise InvalidNameError(f"a name prefix is a string, got {prefix!r:.40}")
        _check_release(jax)
        timeout = check_timeout(timeout, "timeout")
        if not dry_run:
            self._backend.check_writable()
        candidates, refused = select(self._registry(), before, prefix, jax)
        skip = {(r.name, r.version, r.digest) for r in refused}
        todo = [c for c in candidates if (c.name, c.version, c.digest) not in skip]
        report = FleetRescueReport(
            before.isoformat(), prefix, bool(dry_run), tuple(candidates), (), tuple(refused)
        )
        if dry_run:
            return report
        if enqueue:
            queued = self._backend.enqueue_rescues(todo, python, timeout)
            return _replace(report, queued=tuple(queued))
        rescued, refusals = list(report.rescued), list(refused)
        environments = _environments(python)
        for (name, version), group in _by_version(todo).items():

            def work(name: str = name, version: int = version, group: Any = group) -> Any:
                ref = self._backend.get(f"{name}:{version}")
                return rescue_version(self._registry(), ref, group, environments, timeout)

            done, said = _one_version(name, version, work)
            rescued.extend([done] if done is not None else [])
            refusals.extend(said)
        return _replace(report, rescued=tuple(rescued), refusals=tuple(refusals))

    def _registry(self) -> Registry:
        return self  # type: ignore[return-value]


def rescue_job(
    registry: Registry, name: str, version: int, digest: str, release: str, python: str | None,
    timeout: float,
) -> tuple[RescuedVersion | None, builtins.list[RescueRefusal]]:  # fmt: skip
    """One queued rescue (``Registry.rescue(enqueue=True)``): variant ``digest`` of
    ``name:version``, on top of the newest earlier rescue of that version still stored.

    Raises:
        NotFoundError: the version is gone.
    """
    try:
        ref = registry.get(f"{name}:{version}")
    except NotFoundError:
        return None, [RescueRefusal(name, version, "the version is gone", digest)]
    found = [v for v in ref.variants if v.digest == digest]
    if not found:
        return None, [RescueRefusal(name, version, "no such variant any more", digest)]
    v = found[0]
    candidate = RescueCandidate(name, version, digest, v.platforms, v.jax_version, None,
                                "queued", release)  # fmt: skip
    base = _earlier_rescue(registry, ref)
    if base is not None and digest not in base.digests:
        return None, []  # an earlier job re-exported it already
    interpreter = _environments(python)
    return _one_version(
        name,
        version,
        lambda: rescue_version(registry, ref, [candidate], interpreter, timeout, base=base),
    )


#: What refuses one version's rescue and lets the run go on to the next: the version deleted
#: meanwhile, a corrupt blob, an archive or push this jaxport cannot take. Others (the database
#: or server unreachable, a token's permissions) end the run.
_VERSION_REFUSALS = (
    NotFoundError, CorruptArchiveError, DuplicateVariantError, UnsupportedFeatureError,
    UnsupportedVersionError, InvalidNameError,
)  # fmt: skip


def _one_version(
    name: str,
    version: int,
    work: Callable[[], tuple[RescuedVersion | None, builtins.list[RescueRefusal]]],
) -> tuple[RescuedVersion | None, builtins.list[RescueRefusal]]:
    """``work()``, the rescue of ``name:version``; what ``_VERSION_REFUSALS`` raise is that
    version's refusal."""
    try:
        return work()
    except _VERSION_REFUSALS as e:
        return None, [RescueRefusal(name, version, f"{type(e).__name__}: {e}"[:600])]


def _earlier_rescue(registry: Registry, ref: Ref) -> Ref | None:
    """The version the newest ``rescue`` event of ``ref`` pushed, if it is still stored."""
    for event in registry.events(name=ref.name, limit=10_000):
        if event.kind == RESCUE_DERIVATION and event.detail.get("source") == str(ref):
            try:
                return registry.get(f"{ref.name}:{event.version}")
            except NotFoundError:
                return None
    return None


def _environments(python: str | None) -> Callable[[str], str]:
    """The interpreter for a release: ``python`` if given, else its managed environment (made
    once per process and release)."""
    made: dict[str, str] = {}

    def interpreter(release: str) -> str:
        if python is not None:
            return python
        if release not in made:
            from jaxport.audit import jax_environment
            from jaxport.registry import default_home

            made[release] = jax_environment(release, default_home())
        return made[release]

    return interpreter


def _by_version(todo: builtins.list[RescueCandidate]) -> dict[tuple[str, int], Any]:
    groups: dict[tuple[str, int], builtins.list[RescueCandidate]] = {}
    for c in todo:
        groups.setdefault((c.name, c.version), []).append(c)
    return groups


def _check_release(release: str) -> None:
    import re

    if not isinstance(release, str) or not re.fullmatch(r"[0-9]{1,4}(\.[0-9]{1,4}){1,3}", release):
        raise InvalidNameError(f"a jax release is digits and dots (0.10.2), got {release!r:.40}")


def _replace(report: FleetRescueReport, **changes: Any) -> FleetRescueReport:
    import dataclasses

    return dataclasses.replace(report, **changes)
