"""The schedule of a periodic task of the audit queue (``registry/_retention_queue.py``,
``registry/_watch_queue.py``): a cron expression an environment variable names, checked here
once for every such task."""

from __future__ import annotations

import os

from jaxport import InvalidNameError

__all__ = ["OFF", "schedule"]

#: The value that disables a periodic task.
OFF = "off"
#: The longest expression taken, in characters.
_MAX_CHARS = 200


def schedule(env: str, default: str) -> str | None:
    """The cron expression ``$env`` names (five fields, or six with seconds first:
    procrastinate's), ``default`` where it is unset or empty, None where it is ``off`` (in any
    case).

    Raises:
        InvalidNameError: neither ``off`` nor 5 or 6 fields within 200 characters; the message
            names ``env`` and shows the value's first 60 characters.
    """
    cron = os.environ.get(env, "").strip() or default
    if cron.lower() == OFF:
        return None
    if len(cron.split()) not in (5, 6) or len(cron) > _MAX_CHARS:
        raise InvalidNameError(
            f"{env} must be a cron expression (5 or 6 fields) or 'off', got {cron[:60]!r}"
        )
    return cron
