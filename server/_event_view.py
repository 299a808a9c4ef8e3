"""The event log as a token sees it (``GET /api/v1/events``, the events page): a token limited
to name prefixes sees the events of its names only, and of those, no other name: a version's
``derived_from`` (its push event) outside its names reads as null, as ``/api/v1/lineage`` shows
such a source hidden, its ``derivation`` kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxport.registry import Event, TokenInfo

__all__ = ["visible_events"]

#: Detail keys that name another version (``NAME:VERSION``).
SOURCE_KEYS = ("derived_from",)


def visible_events(events: Sequence[Event], principal: TokenInfo) -> list[Event]:
    """The events ``principal`` may see, each with the names outside its prefixes hidden."""
    if not principal.prefixes:
        return list(events)
    return [
        _hidden(e, principal)
        for e in events
        if e.name is not None and principal.allows_name(e.name)
    ]


def _hidden(event: Event, principal: TokenInfo) -> Event:
    outside = [
        key
        for key in SOURCE_KEYS
        if isinstance(event.detail.get(key), str)
        and not principal.allows_name(event.detail[key].rpartition(":")[0])
    ]
    if not outside:
        return event
    return dataclasses.replace(event, detail={**event.detail, **dict.fromkeys(outside)})
