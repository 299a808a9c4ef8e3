"""Retention by the audit queue: a procrastinate periodic task that every audit worker
(``jaxport audit-worker``, ``registry/_queue.py``) registers, run by one of them per tick.

The schedule is ``$JAXPORT_RETAIN_CRON`` (cron, five fields, or six with seconds first:
procrastinate's; ``registry/_cron.py``), by default ``RETAIN_CRON`` (daily at 03:17 UTC; also
where it is empty); ``off`` disables it. Each tick defers one job (procrastinate's periodic
defers are unique per task and tick, whichever worker defers first), on the queue of the
worker that deferred it: it runs
``Registry.retain()`` over every name a policy covers, recorded as the worker (its events'
actor). A worker started more than procrastinate's 10 minutes after a tick does not catch it
up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxport.registry._cron import schedule

if TYPE_CHECKING:
    from procrastinate import App

    from jaxport.registry._registry import Registry

__all__ = ["RETAIN_CRON", "RETAIN_CRON_ENV", "RETAIN_TASK", "register_retention"]

#: The procrastinate task name of a retention run.
RETAIN_TASK = "jaxport.retain"
#: The default schedule: daily at 03:17 (UTC, the database's clock).
RETAIN_CRON = "17 3 * * *"
#: The environment variable that overrides it (``off``: no periodic retention).
RETAIN_CRON_ENV = "JAXPORT_RETAIN_CRON"


def register_retention(app: App, registry: Registry, queue: str) -> None:
    """Registers the periodic retention task on ``app``, its jobs on ``queue`` (one the
    worker listens to), run through ``registry``.

    Raises:
        InvalidNameError: ``$JAXPORT_RETAIN_CRON`` is not a cron expression of five or six
            fields.
    """
    cron = schedule(RETAIN_CRON_ENV, RETAIN_CRON)
    if cron is None:
        return

    def retain(context: Any, timestamp: int) -> str:
        plan = registry.retain()
        return f"deleted {len(plan.deleted)}, kept {len(plan.kept)}"

    task = app.task(name=RETAIN_TASK, queue=queue, pass_context=True)(retain)
    app.periodic(cron=cron, periodic_id="retain")(task)
