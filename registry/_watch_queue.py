"""The jax-release watcher by the audit queue: a procrastinate periodic task that every audit
worker (``jaxport audit-worker``, ``registry/_queue.py``) registers when
``$JAXPORT_WATCH_CRON`` names a schedule, run by one of them per tick.

The schedule is cron (five fields, or six with seconds first: procrastinate's;
``registry/_cron.py``), e.g.
``23 * * * *`` for hourly; unset or ``off`` (the default), no worker watches: reading the
package index is a network request a worker should make only when asked. Each tick defers one
job (procrastinate's periodic defers are unique per task and tick, whichever worker defers
first) on the queue of the worker that deferred it; it runs ``Registry.watch_jax()`` with the
worker's package index configuration (``$PIP_INDEX_URL``, pip's), recorded as the worker.
Two watches at once record each release once (``registry/_releases.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxport.registry._cron import OFF, schedule

if TYPE_CHECKING:
    from procrastinate import App

    from jaxport.registry._registry import Registry

__all__ = ["WATCH_CRON_ENV", "WATCH_TASK", "register_watch"]

#: The procrastinate task name of a watch.
WATCH_TASK = "jaxport.watch"
#: The environment variable that names the schedule (unset or ``off``: no periodic watch).
WATCH_CRON_ENV = "JAXPORT_WATCH_CRON"


def register_watch(app: App, registry: Registry, queue: str) -> None:
    """Registers the periodic watch on ``app`` when ``$JAXPORT_WATCH_CRON`` is set, its jobs on
    ``queue`` (one the worker listens to), run through ``registry``.

    Raises:
        InvalidNameError: ``$JAXPORT_WATCH_CRON`` is not a cron expression of five or six
            fields.
    """
    cron = schedule(WATCH_CRON_ENV, OFF)
    if cron is None:
        return

    def watch(context: Any, timestamp: int) -> str:
        report = registry.watch_jax()
        return f"{len(report.new)} new release(s), {len(report.releases)} jax release(s) judged"

    task = app.task(name=WATCH_TASK, queue=queue, pass_context=True)(watch)
    app.periodic(cron=cron, periodic_id="watch")(task)
