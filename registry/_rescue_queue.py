"""Fleet rescue on the audit queue (``registry/_queue.py``): ``Registry.rescue(enqueue=True)``
puts one job per variant, task ``jaxport.rescue``, on the queue of the variant's first platform
(``audit-PLATFORM``: a host that runs it checks it); ``jaxport audit-worker`` runs them
(``registry/_registry_rescue.rescue_job``).

A job's arguments are JSON (name, version, digest, release, interpreter, timeout). The jobs of
one version share a lock (``rescue:NAME:VERSION``): they run one at a time, each on top of the
previous one's rescued version, so the last holds every re-export. Enqueueing a variant again
while its job waits adds nothing (queueing lock ``rescue:DIGEST:RELEASE``). A refusal is the
job's result (``refused: REASON``, also in the worker's log), not a failure to retry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from jaxport.registry._fleet_rescue import RescueCandidate
    from jaxport.registry._registry import Registry

__all__ = ["RESCUE_TASK", "QueuedRescue", "enqueue_rescues", "rescue_runner"]

#: The procrastinate task name of a rescue job.
RESCUE_TASK = "jaxport.rescue"


@dataclasses.dataclass(frozen=True)
class QueuedRescue:
    """A rescue job: variant ``digest`` of ``name:version``, re-exported with jax ``release``,
    on the queue of ``platform``; ``job_id`` None when its job was already waiting."""

    name: str
    version: int
    digest: str
    platform: str
    release: str
    job_id: int | None


def enqueue_rescues(
    engine: Engine, candidates: Sequence[RescueCandidate], python: str | None, timeout: float
) -> list[QueuedRescue]:
    """One job per candidate (module doc).

    Raises:
        UnsupportedFeatureError: a SQLite registry (the queue needs PostgreSQL).
        RegistryError: the queue is not installed (``jaxport db upgrade``) or failed.
    """
    from procrastinate.exceptions import AlreadyEnqueued
    from procrastinate.jobs import Job

    from jaxport.registry._queue import (
        PLATFORMS,
        _opened,
        _translating_queue_errors,
        check,
        queue_of,
    )

    check(engine)
    queued = []
    with _opened(engine) as app, _translating_queue_errors():
        for c in candidates:
            platform = next((p for p in c.platforms if p in PLATFORMS), "cpu")
            job = Job(
                id=None, queue=queue_of(platform), lock=f"rescue:{c.name}:{c.version}",
                queueing_lock=f"rescue:{c.digest}:{c.release}", task_name=RESCUE_TASK,
                task_kwargs={"name": c.name, "version": c.version, "digest": c.digest,
                             "release": c.release, "python": python, "timeout": timeout},
            )  # fmt: skip
            try:
                job_id = app.job_manager.defer_job(job).id
            except AlreadyEnqueued:
                job_id = None
            queued.append(QueuedRescue(c.name, c.version, c.digest, platform, c.release, job_id))
    return queued


def rescue_runner(
    registry: Registry, on_rescue: Callable[[str], None] | None = None
) -> Callable[..., str]:
    """The worker's function for ``RESCUE_TASK``: runs ``rescue_job`` and says what it did
    (``rescued NAME:V as NAME:W``, ``refused: REASON`` or ``done already``)."""
    from jaxport.registry._registry_rescue import rescue_job

    def job(
        context: Any, name: str, version: int, digest: str, release: str, python: str | None,
        timeout: float,
    ) -> str:  # fmt: skip
        del context
        done, refusals = rescue_job(registry, name, version, digest, release, python, timeout)
        if done is not None:
            said = f"rescued {name}:{version} as {name}:{done.rescued}"
        elif refusals:
            said = f"refused: {refusals[0].reason}"
        else:
            said = "done already"
        if on_rescue is not None:
            on_rescue(said)
        return said

    return job
