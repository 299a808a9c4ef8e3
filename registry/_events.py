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
KINDS: tuple[str, ...] = ("push", "alias", "delete", "gc", "sign", "token-create", "token-revoke")
#: Protected aliases' (``registry/_gates.py``): gates set on an alias, or removed. A gated move
#: is an ``alias`` (or ``push``) event whose detail records its gates and evidence.
KINDS += ("protect", "unprotect")
#: Retention's (``registry/_retention.py``): a version a run soft-deleted, one restored, one
#: gc purged after its restore period, a policy set or removed.
KINDS += ("retain", "restore", "purge", "retention-policy")
#: The jax-release watcher's (``registry/_releases.py``): a new jax release and what it says of
#: every variant (how many stay ok, expire, are refused, need rescue).
KINDS += ("jax-release",)
#: Fleet rescue's (``registry/_fleet_rescue.py``): a version re-exported and pushed again,
#: derived from its source; its detail names each variant's check and the aliases moved or
#: refused (the push and the moves record their own events too).
KINDS += ("rescue",)


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
