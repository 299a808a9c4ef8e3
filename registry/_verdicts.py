"""The module sandbox's verdicts in the registry's database (``module_verdicts``).

A push vets every module it stores (``jaxport.export._vetting``) and records the verdicts in the
transaction that commits the version, so a pull by any client with the same jaxlib finds them
and does not parse the module in a sandbox again. The local cache (``LocalVerdictCache``) is
consulted after the registry and fed from it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, select

from jaxport.registry import _db
from jaxport.registry._models import ModuleVerdictRow

if TYPE_CHECKING:  # jaxport.export imports jax: only when a module is read
    from jaxport.export._internal import Verdict, VerdictCache, VerdictKey

__all__ = ["RegistryVerdicts", "pull_verdicts", "push_verdicts"]


class RegistryVerdicts:
    """Verdicts read from the database; new ones kept in memory until ``record`` writes them in
    the caller's transaction (so a failed push records nothing)."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._new: dict[VerdictKey, Verdict] = {}

    def get(self, key: VerdictKey) -> Verdict | None:
        if key in self._new:
            return self._new[key]
        query = select(ModuleVerdictRow.verdict_json).where(
            ModuleVerdictRow.digest == key.digest,
            ModuleVerdictRow.jaxlib_version == key.jaxlib_version,
            ModuleVerdictRow.facts_version == key.facts_version,
        )
        with _db.translating_db_errors(), self._engine.connect() as conn:
            found = conn.execute(query).scalar()
        from jaxport.export._internal import Verdict

        return Verdict.from_json(found) if found is not None else None

    def put(self, key: VerdictKey, verdict: Verdict) -> None:
        self._new[key] = verdict

    def record(self, conn: Connection) -> None:
        """Inserts the verdicts met since this object was made (existing keys are kept)."""
        now = time.time()
        rows = [
            {
                "digest": k.digest,
                "jaxlib_version": k.jaxlib_version[:40],
                "facts_version": k.facts_version,
                "verdict_json": v.to_json(),
                "created_at": now,
            }
            for k, v in self._new.items()
        ]
        _db.insert_ignoring_duplicates(
            conn,
            ModuleVerdictRow.__table__,
            rows,
            ["digest", "jaxlib_version", "facts_version"],
        )


def push_verdicts(verdicts: RegistryVerdicts) -> VerdictCache:
    """For a push: ``verdicts`` (recorded when the version commits), then the local cache."""
    from jaxport.export._internal import LayeredVerdictCache, LocalVerdictCache

    return LayeredVerdictCache(verdicts, LocalVerdictCache())


def pull_verdicts(engine: Engine) -> VerdictCache:
    """For a pull: the registry's verdicts first, then the local cache; nothing is written to
    the database."""
    from jaxport.export._internal import LayeredVerdictCache, LocalVerdictCache

    return LayeredVerdictCache(_ReadOnly(RegistryVerdicts(engine)), LocalVerdictCache())


class _ReadOnly:
    def __init__(self, inner: RegistryVerdicts):
        self._inner = inner

    def get(self, key: VerdictKey) -> Verdict | None:
        return self._inner.get(key)

    def put(self, key: VerdictKey, verdict: Verdict) -> None:
        pass
