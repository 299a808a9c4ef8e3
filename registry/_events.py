"""The event log: every write to a registry, appended to ``events`` and never changed.

A write (push, alias move, delete, gc, signing, a token's creation or revocation) appends one
row after it succeeds: ``actor`` (who), ``kind`` (what), the name and version it touched and a
JSON ``detail``. The actor is ``current_actor``: the registry server sets it to the request's
token name for the request's duration (``acting_as``); a direct client is ``local:USER``.

A push or an alias move appends its event in its own transaction (both commit or neither);
delete, gc, signing and token changes append theirs in a transaction right after theirs, so a
process killed between the two loses that event, never the write. The log itself, on a
database, is ``registry/_event_log.py``; this module imports no database library.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import getpass
from collections.abc import Iterator
from typing import Any

__all__ = ["Event", "acting_as", "current_actor"]

#: Event kinds, in the order a reader meets them in the docs.
KINDS = ("push", "alias", "delete", "gc", "sign", "token-create", "token-revoke")


def _local_actor() -> str:
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (a container's numeric uid)
        return "local:unknown"


_ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("jaxport_actor", default=None)


def current_actor() -> str:
    """Who the writes of this context are recorded as: the token name set by ``acting_as``,
    else ``local:USER``."""
    return _ACTOR.get() or _local_actor()


@contextlib.contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Records the writes made inside the ``with`` block as ``actor`` (a token's name)."""
    reset = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(reset)


@dataclasses.dataclass(frozen=True)
class Event:
    """One write: ``id`` (increasing), ``at`` (unix seconds), ``actor``, ``kind`` (one of
    push, alias, delete, gc, sign, token-create, token-revoke), ``name`` and ``version`` (None
    where the write has none) and ``detail`` (what else it did, JSON-ready)."""

    id: int
    at: float
    actor: str
    kind: str
    name: str | None
    version: int | None
    detail: dict[str, Any]
