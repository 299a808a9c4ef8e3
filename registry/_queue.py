"""The audit queue: audit jobs kept in the registry's PostgreSQL database (procrastinate) and
taken by ``jaxport audit-worker`` on each platform's own hosts.

- A job is one archive (variant digest) x one platform, on the queue ``audit-PLATFORM``; a
  worker for ``tpu`` listens to ``audit-tpu`` alone, so it takes only TPU jobs. A job's
  arguments are JSON (digest, platform, nr_devices, timeout): nothing is pickled.
- Enqueueing a digest x platform x devices again while its job waits adds nothing
  (procrastinate's queueing lock); two jobs for one never run at once (its lock).
- A worker killed mid-job (SIGKILL, a lost host) stops sending heartbeats and its job stays
  ``doing``. Every worker, when it starts and then every ``stalled_after`` seconds, puts back to
  ``todo`` the jobs of workers silent for longer than that (procrastinate's
  ``get_stalled_jobs`` and ``retry_job``): the job is retried, never lost (after
  ``MAX_ATTEMPTS`` runs that ended so it is left ``failed``, in the queue). A job that raises
  (the database unreachable, the audit worker not starting) is retried, ``MAX_ATTEMPTS`` runs
  in all, after waits of 2, 4, 8, ... seconds.
- A job retried after its finding was written does not write it again (``_queue_jobs``).
- A worker given a signing key compiles and stores the signed sets of each variant it audited
  ok here (``_queue_compile``), after the finding is written; a failed compile fails no job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, text

from jaxport import AuditError, InvalidNameError, RegistryError
from jaxport.registry import _db
from jaxport.registry._names import normalize_platform, parse_reference
from jaxport.registry._queries import Queries
from jaxport.registry._queue_compile import compile_audited
from jaxport.registry._queue_jobs import audit_one
from jaxport.registry._queue_schema import check_queue_schema

if TYPE_CHECKING:
    from procrastinate import App

    from jaxport.audit import Finding
    from jaxport.registry._queue_compile import CompileKey
    from jaxport.registry._registry import Registry
    from jaxport.registry._types import Ref

__all__ = [
    "MAX_ATTEMPTS",
    "PLATFORMS",
    "TASK",
    "QueuedJob",
    "check",
    "enqueue",
    "enqueue_jobs",
    "queue_of",
    "run_worker",
]

#: The platforms a worker can serve; each has its queue, ``audit-PLATFORM``.
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
#: The procrastinate task name of an audit job.
TASK = "jaxport.audit"
#: Runs of a job that raises before it is left ``failed`` (a killed worker's retry counts too).
MAX_ATTEMPTS = 5
#: The task name of a rescue job (``registry/_rescue_queue.RESCUE_TASK``).
_RESCUE = "jaxport.rescue"
#: Jobs deferred in one statement.
_BATCH = 500
#: Seconds between a worker's heartbeats (a quarter of ``stalled_after`` if less): short, so
#: that workers started with another ``stalled_after`` do not take a live one for dead.
_HEARTBEAT = 5.0


@dataclasses.dataclass(frozen=True)
class QueuedJob:
    """An audit job: ``digest`` (a variant's archive, of ``name:version``) on ``platform``
    with ``nr_devices`` devices. ``job_id`` is the queue's job, or None when a job for the same
    digest x platform x devices was already waiting (nothing was added). ``jax``: the jax
    release whose environment the worker audits in (as ``audit(jax=...)``; the release watcher
    enqueues these), None: the worker's own."""

    name: str
    version: int
    digest: str
    platform: str
    nr_devices: int
    job_id: int | None
    jax: str | None = None


def queue_of(platform: str) -> str:
    """The queue of a platform's audit jobs: ``audit-tpu``.

    Raises:
        InvalidNameError: not one of ``PLATFORMS`` (any case; ``gpu`` names no queue: say
            cuda or rocm).
    """
    wanted = "gpu" if str(platform).lower() == "gpu" else normalize_platform(platform)
    if wanted not in PLATFORMS:
        raise InvalidNameError(
            f"no audit queue for platform {platform!r}: one of {', '.join(PLATFORMS)}"
        )
    return f"audit-{wanted}"


def check(engine: Engine) -> None:
    """See ``Registry.check_audit_queue``."""
    with _db.translating_db_errors(), engine.connect() as conn:
        check_queue_schema(conn)


def enqueue(
    engine: Engine, queries: Queries, reference: str | None, platform: str | None, timeout: float
) -> list[QueuedJob]:
    """See ``Registry.enqueue_audits``."""
    wanted = None if platform is None else queue_of(platform).removeprefix("audit-")
    refs = _targets(queries, reference)  # a bad reference is refused on every backend
    check(engine)
    jobs = []
    seen: set[tuple[str, str]] = set()
    for ref in refs:
        for v in ref.variants:
            for p in v.platforms if wanted is None else (wanted,):
                if p in v.platforms and p in PLATFORMS and (v.digest, p) not in seen:
                    seen.add((v.digest, p))
                    jobs.append(QueuedJob(ref.name, ref.version, v.digest, p, v.nr_devices, None))
    if not jobs:
        return []
    with _opened(engine) as app, _translating_queue_errors():
        return _defer_all(app, engine, jobs, timeout)


def enqueue_jobs(engine: Engine, jobs: list[QueuedJob], timeout: float) -> list[QueuedJob]:
    """Defers ``jobs`` as ``enqueue`` does (the release watcher's, each with its ``jax``).

    Raises:
        UnsupportedFeatureError, RegistryError: as ``check``; the queue failed.
    """
    check(engine)
    if not jobs:
        return []
    with _opened(engine) as app, _translating_queue_errors():
        return _defer_all(app, engine, jobs, timeout)


def _targets(queries: Queries, reference: str | None) -> list[Ref]:
    """The versions ``reference`` names (as ``Registry.audit`` reads it)."""
    if reference is None:
        return [r for n in queries.names() for r in queries.page(n, limit=1_000_000, after=None)]
    ref = parse_reference(reference)
    if ref.name is not None and ref.version is None and ref.alias is None:
        return queries.page(ref.name, limit=1_000_000, after=None)
    return [queries.get(reference)]


def _defer_all(app: App, engine: Engine, jobs: list[QueuedJob], timeout: float) -> list[QueuedJob]:
    """Defers ``jobs`` in batches of ``_BATCH`` (one statement each), leaving out those whose
    key already waits; a batch that meets a job enqueued meanwhile is deferred one by one."""
    from procrastinate.exceptions import AlreadyEnqueued

    waiting = _waiting(engine, [_key(j) for j in jobs])
    fresh = [j for j in jobs if _key(j) not in waiting]
    ids: dict[str, int | None] = {}
    for start in range(0, len(fresh), _BATCH):
        chunk = fresh[start : start + _BATCH]
        try:
            deferred = app.job_manager.batch_defer_jobs([_job(j, timeout) for j in chunk])
        except AlreadyEnqueued:
            ids.update((_key(j), _defer(app, j, timeout)) for j in chunk)
        else:
            ids.update(zip(map(_key, chunk), (d.id for d in deferred), strict=True))
    return [dataclasses.replace(j, job_id=ids.get(_key(j))) for j in jobs]


def _key(job: QueuedJob) -> str:
    """A job's lock and queueing lock: ``DIGEST:PLATFORM:DEVICES`` (``:jax-RELEASE`` after it
    for a job in another release's environment)."""
    release = f":jax-{job.jax}" if job.jax else ""
    return f"{job.digest}:{job.platform}:{job.nr_devices}{release}"


def _job(job: QueuedJob, timeout: float) -> Any:
    from procrastinate.jobs import Job

    kwargs: dict[str, Any] = {"digest": job.digest, "platform": job.platform,
                              "nr_devices": job.nr_devices, "timeout": timeout}  # fmt: skip
    if job.jax:
        kwargs["jax"] = job.jax
    return Job(
        id=None, queue=queue_of(job.platform), lock=_key(job), queueing_lock=_key(job),
        task_name=TASK, task_kwargs=kwargs,
    )  # fmt: skip


def _defer(app: App, job: QueuedJob, timeout: float) -> int | None:
    """One job's id, or None when its key already waits."""
    from procrastinate.exceptions import AlreadyEnqueued

    try:
        return app.job_manager.defer_job(_job(job, timeout)).id
    except AlreadyEnqueued:
        return None


def _waiting(engine: Engine, keys: list[str]) -> set[str]:
    """Those of ``keys`` (queueing locks) whose job waits (``todo``)."""
    query = text(
        "SELECT queueing_lock FROM procrastinate_jobs "
        "WHERE status = 'todo' AND queueing_lock = ANY(:keys)"
    )
    with _db.translating_db_errors(), engine.connect() as conn:
        return set(conn.execute(query, {"keys": keys}).scalars())


def run_worker(
    registry: Registry,
    engine: Engine,
    platforms: Sequence[str],
    *,
    concurrency: int,
    until_idle: bool,
    stalled_after: float,
    on_finding: Callable[[Finding, bool], None] | None,
    compile_key: CompileKey | None = None,
) -> None:
    """See ``Registry.run_audit_worker`` (``compile_key``: checked already,
    ``registry/_queue_compile.py``)."""
    names = [platforms] if isinstance(platforms, str) else list(platforms)
    queues = sorted({queue_of(p) for p in names})
    if not queues:
        raise InvalidNameError("an audit worker needs at least one platform")
    if stalled_after < 1:
        raise InvalidNameError(f"stalled_after must be at least 1 second, got {stalled_after}")
    check(engine)

    def job(
        context: Any, digest: str, platform: str, nr_devices: int, timeout: float,
        jax: str | None = None,
    ) -> str:  # fmt: skip
        found = audit_one(
            registry, engine, digest=digest, platform=platform, nr_devices=nr_devices,
            timeout=timeout, job_id=context.job.id, jax=jax,
        )  # fmt: skip
        if found is None:
            return "gone"
        if on_finding is not None:
            on_finding(*found)
        if compile_key is not None:  # the finding is recorded: compiling cannot lose it
            compile_audited(registry, found[0], jax, compile_key, timeout)
        return found[0].status

    from jaxport.registry._rescue_queue import rescue_runner
    from jaxport.registry._retention_queue import register_retention
    from jaxport.registry._watch_queue import register_watch

    app = _new_app(engine, job, rescue_runner(registry))
    register_retention(app, registry, queues[0])  # periodic (``_retention_queue``)
    register_watch(app, registry, queues[0])  # periodic when asked (``_watch_queue``)
    options: dict[str, Any] = {
        "queues": queues,
        "concurrency": concurrency,
        "name": f"jaxport-audit-{'+'.join(q.removeprefix('audit-') for q in queues)}",
        "update_heartbeat_interval": min(stalled_after / 4, _HEARTBEAT),
        "stalled_worker_timeout": stalled_after,
        "fetch_job_polling_interval": min(stalled_after / 2, 5.0),
        "delete_jobs": "never",
    }
    with _translating_queue_errors():
        asyncio.run(_work(app, engine, queues, options, until_idle, stalled_after))


async def _work(
    app: App,
    engine: Engine,
    queues: list[str],
    options: dict[str, Any],
    until_idle: bool,
    stalled_after: float,
) -> None:
    async with app.open_async():
        if until_idle:  # bounded: ends once no job of these queues waits or runs anywhere
            while True:
                await _recover_stalled(app, stalled_after)
                await app.run_worker_async(wait=False, **options)
                if not await asyncio.to_thread(_pending, engine, queues):
                    return
                await asyncio.sleep(min(stalled_after / 2, 5.0))
        worker = asyncio.create_task(app.run_worker_async(wait=True, **options))
        while not worker.done():
            await _recover_stalled(app, stalled_after)
            await asyncio.wait({worker}, timeout=stalled_after)
        worker.result()


async def _recover_stalled(app: App, stalled_after: float) -> None:
    """Puts back to ``todo`` the audit jobs of workers silent for ``stalled_after`` seconds (on
    any queue: a CPU host rescues a dead TPU host's job for another TPU host). A job whose
    workers died ``MAX_ATTEMPTS`` times is left ``failed`` instead: it may be what kills them."""
    from procrastinate.exceptions import ConnectorException
    from procrastinate.jobs import Status

    from jaxport.registry._rescue_queue import RESCUE_TASK

    stalled = [
        job
        for task in (TASK, RESCUE_TASK)
        for job in await app.job_manager.get_stalled_jobs(
            task_name=task, seconds_since_heartbeat=stalled_after
        )
    ]
    for job in stalled:
        with contextlib.suppress(ConnectorException):  # another worker got to it first
            if job.attempts + 1 >= MAX_ATTEMPTS:  # it took its workers down every time
                await app.job_manager.finish_job(job, status=Status.FAILED, delete_job=False)
            else:
                await app.job_manager.retry_job(job)


def _pending(engine: Engine, queues: list[str]) -> bool:
    """Whether an audit job of ``queues`` waits or runs (on any worker)."""
    query = text(
        "SELECT 1 FROM procrastinate_jobs WHERE task_name IN (:task, :rescue) "
        "AND queue_name = ANY(:queues) "
        "AND status IN ('todo', 'doing') LIMIT 1"
    )
    with _db.translating_db_errors(), engine.connect() as conn:
        found = conn.execute(query, {"task": TASK, "rescue": _RESCUE, "queues": queues})
        return found.first() is not None


def _new_app(
    engine: Engine,
    job: Callable[..., str] | None = None,
    rescue: Callable[..., str] | None = None,
) -> App:
    """A procrastinate App on the registry's database, with the audit task (``job``: how this
    process runs it; enqueueing only needs its name) and the rescue task (``rescue``,
    ``registry/_rescue_queue.py``)."""
    import procrastinate

    url = engine.url.set(drivername="postgresql")
    connector = procrastinate.PsycopgConnector(conninfo=url.render_as_string(hide_password=False))
    app = procrastinate.App(connector=connector)
    retry = procrastinate.RetryStrategy(
        max_attempts=MAX_ATTEMPTS, exponential_wait=2, retry_exceptions={RegistryError, AuditError}
    )
    app.task(name=TASK, pass_context=True, retry=retry)(job or _never_here)
    app.task(name=_RESCUE, pass_context=True, retry=retry)(rescue or _never_here)
    return app


def _never_here(*_args: Any, **_kwargs: Any) -> str:
    raise RegistryError("audit jobs run in `jaxport audit-worker`")


@contextlib.contextmanager
def _opened(engine: Engine) -> Iterator[App]:
    """A procrastinate App for deferring jobs, open for the ``with`` block.

    Raises:
        RegistryError: the database cannot be reached.
    """
    app = _new_app(engine)
    with _translating_queue_errors():
        app.open()
    try:
        yield app
    finally:
        app.close()


@contextlib.contextmanager
def _translating_queue_errors() -> Iterator[None]:
    """Turns procrastinate's and psycopg's errors into ``RegistryError`` (jaxport's own, and
    SQLAlchemy's through ``_db``, pass through)."""
    import psycopg
    import psycopg_pool
    from procrastinate.exceptions import ProcrastinateException

    try:
        with _db.translating_db_errors():
            yield
    except (ProcrastinateException, psycopg.Error, psycopg_pool.PoolTimeout) as e:
        cause = e.__cause__ if isinstance(e.__cause__, psycopg.Error) else e
        detail = str(cause).splitlines()
        raise RegistryError(
            f"the audit queue failed: {type(cause).__name__}: {detail[0] if detail else ''}"
        ) from None
