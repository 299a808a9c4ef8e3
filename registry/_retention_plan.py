"""The plan of a retention run (``registry/_retention.py``): which live versions of the names a
policy covers stay, by which rule, and which go, and why; read in five statements whatever the
registry's size (policies, versions, aliases, gates, full findings), decided in Python
(``benchmarks/bench_retain.py``). The rules are ``_retention``'s module doc.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select

from jaxport.registry._models import (
    AliasGateRow,
    AliasRow,
    AuditRow,
    NameRow,
    RetentionPolicyRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._retention_types import RetentionDecision, RetentionPolicy, format_duration
from jaxport.registry._selects import live

__all__ = ["plan", "policies"]


def plan(
    conn: Connection, prefix: str | None, now: float
) -> tuple[list[RetentionDecision], list[RetentionDecision], list[int]]:
    """``(kept, deleted, ids of deleted)`` for the live versions of names starting with
    ``prefix`` (None: all) that a policy covers, in ``(name, version)`` order; the deleted ones'
    ``restorable_until`` is ``now`` + their policy's period."""
    longest_first = sorted(policies(conn), key=lambda p: len(p.prefix), reverse=True)
    if not longest_first:
        return [], [], []
    q = (
        select(
            VersionRow.id,
            VersionRow.model_id,
            VersionRow.version,
            VersionRow.created_at,
            NameRow.name,
        )
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(live())
    )
    if prefix is not None:
        q = q.where(NameRow.name.like(_like(prefix), escape="\\"))
    covered: dict[int, tuple[str, RetentionPolicy, list[Any]]] = {}
    for row in conn.execute(q):
        entry = covered.get(row.model_id)
        if entry is None:
            policy = next((p for p in longest_first if row.name.startswith(p.prefix)), None)
            if policy is None:
                continue
            entry = covered[row.model_id] = (row.name, policy, [])
        entry[2].append(row)
    if not covered:
        return [], [], []
    pinned = _pinned(conn)
    ok = (
        _newest_ok(conn, covered)
        if any(p.keep_ok_per_target for _, p, _ in covered.values())
        else {}
    )
    kept, doomed, ids = [], [], []
    for model_id, (name, policy, rows) in sorted(covered.items(), key=lambda e: e[1][0]):
        rows.sort(key=lambda r: r.version, reverse=True)
        for index, row in enumerate(rows):
            rules = _keeping(
                policy, index, row, now, pinned.get((model_id, row.version), ()), ok.get(row.id, ())
            )
            if rules:
                kept.append(
                    RetentionDecision(name, row.version, True, rules, policy.prefix, row.created_at)
                )
            else:
                until = now + policy.restore_period
                doomed.append(
                    RetentionDecision(
                        name, row.version, False, _why(policy), policy.prefix, row.created_at, until
                    )
                )
                ids.append(row.id)
    order = sorted(range(len(doomed)), key=lambda i: (doomed[i].name, doomed[i].version))
    kept.sort(key=lambda d: (d.name, d.version))
    return kept, [doomed[i] for i in order], [ids[i] for i in order]


def _keeping(
    policy: RetentionPolicy,
    index: int,
    row: Any,
    now: float,
    aliases: Sequence[str],
    targets: Sequence[str],
) -> tuple[str, ...]:
    """The rules of ``policy`` that keep ``row``, the ``index``-th newest live version."""
    rules = []
    if policy.keep_last is not None and index < policy.keep_last:
        rules.append(f"last {policy.keep_last}")
    rules += aliases
    if policy.keep_ok_per_target:
        rules += targets
    if policy.keep_younger_than is not None and now - row.created_at < policy.keep_younger_than:
        rules.append(f"younger than {format_duration(policy.keep_younger_than)}")
    return tuple(rules)


def _why(policy: RetentionPolicy) -> tuple[str, ...]:
    """Why no rule of ``policy`` keeps a version it deletes: each rule, as not met."""
    why = []
    if policy.keep_last is not None:
        why.append(f"not among the last {policy.keep_last}")
    why.append("no alias")
    if policy.keep_ok_per_target:
        why.append("newest ok for no supported target")
    if policy.keep_younger_than is not None:
        why.append(f"older than {format_duration(policy.keep_younger_than)}")
    return tuple(why)


def _pinned(conn: Connection) -> dict[tuple[int, int], list[str]]:
    """``(model_id, version)`` -> the rules of the aliases pointing at it (``alias @A``, or
    ``protected alias @A`` where the alias has gates)."""
    gated = {(m, a) for m, a in conn.execute(select(AliasGateRow.model_id, AliasGateRow.alias))}
    pinned: dict[tuple[int, int], list[str]] = defaultdict(list)
    rows = conn.execute(select(AliasRow.model_id, AliasRow.alias, AliasRow.version))
    for model_id, alias, version in sorted(rows, key=lambda r: r.alias):
        kind = "protected alias" if (model_id, alias) in gated else "alias"
        pinned[(model_id, version)].append(f"{kind} @{alias}")
    return pinned


def _newest_ok(
    conn: Connection, covered: dict[int, tuple[str, RetentionPolicy, list[Any]]]
) -> dict[int, list[str]]:
    """version id -> the targets it is the name's newest ``ok`` version for (``newest ok:
    PLATFORM xN jax RELEASE``), among the names in ``covered``."""
    numbers = {
        r.id: (model_id, r.version) for model_id, (_, _, rows) in covered.items() for r in rows
    }
    q = (
        select(
            VariantRow.version_id,
            VariantRow.nr_devices,
            VariantRow.jax_version.label("made"),
            VariantRow.sharded,
            AuditRow.platform,
            AuditRow.jax_version,
            AuditRow.status,
        )
        .join(AuditRow, AuditRow.digest == VariantRow.digest)
        .where(AuditRow.level == "full")
        .order_by(AuditRow.id)
    )
    newest: dict[tuple[Any, ...], tuple[str, bool]] = {}  # the newest finding speaks
    for r in conn.execute(q):
        if r.version_id in numbers:
            key = (r.version_id, r.platform, r.nr_devices, r.jax_version)
            newest[key] = (r.status, _supported(r.made, r.sharded, r.jax_version))
    best: dict[tuple[Any, ...], tuple[int, int]] = {}  # target -> (version, version id)
    for (version_id, platform, devices, release), (status, supported) in newest.items():
        if status != "ok" or not supported:
            continue
        model_id, version = numbers[version_id]
        target = (model_id, platform, devices, release)
        if target not in best or best[target][0] < version:
            best[target] = (version, version_id)
    found: dict[int, list[str]] = defaultdict(list)
    for (_, platform, devices, release), (_, version_id) in sorted(best.items(), key=str):
        found[version_id].append(f"newest ok: {platform} x{devices} jax {release}")
    return found


@functools.lru_cache(maxsize=4096)
def _supported(made_by: str, sharded: bool, release: str) -> bool:
    """Whether jax ``release`` is still inside the window of a variant made by jax
    ``made_by`` (an unknown date: it cannot be said, so it counts)."""
    from jaxport._window import jax_window

    return jax_window(made_by, sharded=sharded, running=release).within_window is not False


def policies(conn: Connection) -> list[RetentionPolicy]:
    table = RetentionPolicyRow.__table__
    rows = conn.execute(select(table).order_by(table.c.prefix))
    return [
        RetentionPolicy(
            r.prefix,
            r.keep_last,
            r.keep_younger_than,
            bool(r.keep_ok_per_target),
            r.restore_period,
            r.created_at,
        )
        for r in rows
    ]


def _like(prefix: str) -> str:
    """A LIKE pattern of the names starting with ``prefix`` (a valid name: ``_`` escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
