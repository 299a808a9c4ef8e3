"""Lineage in the database (``registry/_lineage.py`` states what it is): the columns a push
writes (``lineage_columns``), and a version's provenance, its chain of sources (ancestors) and
the tree of versions derived from it (descendants) read back from ``versions.derived_from_id``;
``Lineage`` is what ``Registry.lineage`` returns.

A version has at most one source, so ancestors are a chain; descendants are read level by
level (one statement a level), at most ``MAX_NODES`` versions in all (``truncated`` says when
more were left out). A source whose row is gone reads as ``deleted``, named from its child's
push event; a soft-deleted one (``deleted_at``) as ``deleted`` with its name. ``visible``
hides from a prefix-limited token what lies outside its names.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, select

from jaxport.registry import _db
from jaxport.registry._lineage import (
    DELETED,
    HIDDEN,
    LIVE,
    Lineage,
    LineageInput,
    LineageNode,
    Provenance,
    missing_source,
)
from jaxport.registry._models import EventRow, NameRow, VariantRow, VersionRow
from jaxport.registry._names import parse_reference
from jaxport.registry._queries import Queries

__all__ = [
    "MAX_NODES",
    "lineage_columns",
    "lineage_of",
    "read_lineage",
    "visible",
]

#: The most versions one lineage lists, ancestors and descendants together.
MAX_NODES = 1000

_COLUMNS = (
    VersionRow.id,
    VersionRow.version,
    VersionRow.created_at,
    VersionRow.derived_from_id,
    VersionRow.derivation,
    VersionRow.deleted_at,
    NameRow.name,
)


#: How many of a name's newest versions holding a push's first archive ``examples`` compares.
_SAME_ARCHIVES_LOOKBACK = 16


def lineage_columns(
    conn: Connection,
    of: tuple[int, str],
    digests: Sequence[str],
    has_examples: bool,
    lineage: LineageInput | None,
    detail: dict[str, Any],
) -> dict[str, Any]:
    """The lineage and provenance columns of a new version of the name ``of`` (its id and
    name) whose variants are ``digests`` (in order), in the push's transaction. Its source:

    - where the push has examples and no source is given, or the given one is by
      ``update_params``: the newest version of the name with the same archives in the same
      order, if any, as ``examples`` (a params update pushed again with other examples derives
      from its first push, where the update is recorded);
    - else the given source (it must exist; a soft-deleted one may be named), but for one by
      ``update_params`` (what ``push`` infers from a pulled model) that is gone: then none,
      and the push goes on.

    One statement for a given source, two for a search by archives. The source goes into
    ``detail`` too (``derived_from`` as ``NAME:VERSION``, ``derivation``): the push event's,
    which names a source deleted later.

    Raises:
        NotFoundError: the given source is not a version (but by ``update_params``).
    """
    model_id, of_name = of
    lineage = lineage or LineageInput()
    columns: dict[str, Any] = {"derived_from_id": None, "derivation": None}
    columns |= lineage.provenance.as_columns()
    name, version, how = of_name, 0, lineage.derivation
    source: int | None = None
    if has_examples and lineage.derivation in (None, "update_params"):
        same = _same_archives(conn, model_id, digests)
        if same is not None:
            (source, version), how = same, "examples"
    if source is None and lineage.derived_from is not None:
        name, version = lineage.derived_from
        source = conn.execute(
            select(VersionRow.id)
            .join(NameRow, NameRow.id == VersionRow.model_id)
            .where(NameRow.name == name, VersionRow.version == version)
        ).scalar_one_or_none()
        if source is None and how != "update_params":
            raise missing_source(name, version)
    if source is not None:
        columns |= {"derived_from_id": int(source), "derivation": how}
        detail |= {"derived_from": f"{name}:{version}", "derivation": how}
    return columns


def _same_archives(
    conn: Connection, model_id: int, digests: Sequence[str]
) -> tuple[int, int] | None:
    """``(id, version)`` of the newest version of ``model_id`` whose variants are ``digests``
    in order (None: none); a version's variants are in push order by id."""
    candidates = conn.execute(
        select(VariantRow.version_id, VersionRow.version)
        .join(VersionRow, VersionRow.id == VariantRow.version_id)
        .where(VariantRow.model_id == model_id, VariantRow.digest == digests[0])
        .order_by(VersionRow.version.desc())
        .limit(_SAME_ARCHIVES_LOOKBACK)
    ).all()
    if not candidates:
        return None
    held: dict[int, list[str]] = {}
    for version_id, digest in conn.execute(
        select(VariantRow.version_id, VariantRow.digest)
        .where(VariantRow.version_id.in_([c.version_id for c in candidates]))
        .order_by(VariantRow.id)
    ):
        held.setdefault(int(version_id), []).append(digest)
    for c in candidates:
        if held.get(int(c.version_id)) == list(digests):
            return int(c.version_id), int(c.version)
    return None


def lineage_of(engine: Engine, queries: Queries, reference: str, depth: int | None) -> Lineage:
    """``Registry.lineage`` on a database: the version ``reference`` names (as ``get``).

    Raises:
        NotFoundError: no such name, version, alias or digest.
    """
    with _db.translating_db_errors(), _db.read_connection(engine) as conn:
        name, version = queries.locate(conn, parse_reference(reference))
    return read_lineage(engine, name, version, depth)


def read_lineage(engine: Engine, name: str, version: int, depth: int | None) -> Lineage:
    """The lineage of ``name:version`` (an existing version: the caller located it), at most
    ``depth`` levels each way (None: all, within ``MAX_NODES``)."""
    limit = MAX_NODES if depth is None else depth
    with _db.translating_db_errors(), _db.read_connection(engine) as conn:
        row = conn.execute(
            select(*_COLUMNS, *_PROVENANCE)
            .join(NameRow, NameRow.id == VersionRow.model_id)
            .where(NameRow.name == name, VersionRow.version == version)
        ).one()
        budget = [MAX_NODES]
        ancestors, cut_up = _ancestors(conn, row, limit, budget)
        descendants, cut_down = _descendants(conn, [row.id], limit, budget)
        actor = _push_event(conn, name, version)
    provenance = Provenance(
        git_commit=row.git_commit, function_qualname=row.function_qualname,
        jax_version=row.pushed_jax_version, jaxlib_version=row.pushed_jaxlib_version,
        host=row.pushed_host, user=row.pushed_by,
    )  # fmt: skip
    return Lineage(
        name, version, row.derivation, provenance, None if actor is None else actor[0],
        tuple(ancestors), tuple(descendants.get(row.id, ())), cut_up or cut_down,
    )  # fmt: skip


_PROVENANCE = (
    VersionRow.git_commit,
    VersionRow.function_qualname,
    VersionRow.pushed_jax_version,
    VersionRow.pushed_jaxlib_version,
    VersionRow.pushed_host,
    VersionRow.pushed_by,
)


def _ancestors(
    conn: Connection, row: Any, depth: int, budget: list[int]
) -> tuple[list[LineageNode], bool]:
    """The chain of sources of ``row``, one statement a step; a source whose row is gone ends
    it, named from its child's push event where that recorded it."""
    chain: list[LineageNode] = []
    child = row
    while child.derived_from_id is not None:
        if len(chain) >= depth or budget[0] <= 0:
            return chain, True
        budget[0] -= 1
        source = conn.execute(
            select(*_COLUMNS)
            .join(NameRow, NameRow.id == VersionRow.model_id)
            .where(VersionRow.id == child.derived_from_id)
        ).one_or_none()
        if source is None:
            chain.append(_gone(conn, child))
            break
        chain.append(_node(source))
        child = source
    return chain, False


def _gone(conn: Connection, child: Any) -> LineageNode:
    """A deleted source of ``child``: its name and version as ``child``'s push event recorded
    them (``derived_from``), else unnamed."""
    event = _push_event(conn, child.name, child.version)
    named = event[1].get("derived_from") if event is not None else None
    if isinstance(named, str) and ":" in named:
        name, _, text = named.rpartition(":")
        if text.isdigit():
            return LineageNode(name, int(text), DELETED)
    return LineageNode(None, None, DELETED)


def _push_event(conn: Connection, name: str, version: int) -> tuple[str, dict[str, Any]] | None:
    """``(actor, detail)`` of the event that created ``name:version`` (None: none left)."""
    found = conn.execute(
        select(EventRow.actor, EventRow.detail)
        .where(EventRow.name == name, EventRow.version == version, EventRow.kind == "push")
        .order_by(EventRow.id)
        .limit(1)
    ).one_or_none()
    if found is None:
        return None
    try:
        detail = json.loads(found.detail)
    except ValueError:
        detail = {}
    return str(found.actor), detail if isinstance(detail, dict) else {}


def _descendants(
    conn: Connection, roots: Sequence[int], depth: int, budget: list[int]
) -> tuple[dict[int, tuple[LineageNode, ...]], bool]:
    """The versions derived from ``roots``, level by level (one statement a level): each id's
    children as nodes with their own children."""
    levels: list[list[Any]] = []
    frontier, truncated = list(roots), False
    while frontier:
        if len(levels) >= depth or budget[0] <= 0:
            deeper = select(VersionRow.id).where(VersionRow.derived_from_id.in_(frontier))
            truncated = conn.execute(deeper.limit(1)).first() is not None
            break
        rows = list(
            conn.execute(
                select(*_COLUMNS)
                .join(NameRow, NameRow.id == VersionRow.model_id)
                .where(VersionRow.derived_from_id.in_(frontier))
                .order_by(VersionRow.id)
                .limit(budget[0] + 1)
            )
        )
        if len(rows) > budget[0]:
            rows, truncated = rows[: budget[0]], True
        budget[0] -= len(rows)
        levels.append(rows)
        frontier = [r.id for r in rows]
        if truncated:
            break
    children: dict[int, tuple[LineageNode, ...]] = {}
    for rows in reversed(levels):  # the deepest first: each node is built with its children
        built: dict[int, list[LineageNode]] = {}
        for r in rows:
            built.setdefault(r.derived_from_id, []).append(_node(r, children.pop(r.id, ())))
        children.update({k: tuple(v) for k, v in built.items()})
    return children, truncated


def _node(row: Any, children: tuple[LineageNode, ...] = ()) -> LineageNode:
    state = LIVE if row.deleted_at is None else DELETED
    return LineageNode(
        row.name, int(row.version), state, row.derivation, float(row.created_at), children
    )


# -- what a prefix-limited token sees ---------------------------------------------------------


def visible(lineage: Lineage, allows: Callable[[str], bool]) -> Lineage:
    """``lineage`` as a token that ``allows`` only some names sees it: an ancestor outside its
    names is ``hidden`` (no name, version or time) and ends the chain; a descendant outside
    them is left out with what derives from it."""
    ancestors: list[LineageNode] = []
    for node in lineage.ancestors:
        if node.name is not None and not allows(node.name):
            ancestors.append(LineageNode(None, None, HIDDEN, node.derivation))
            break
        ancestors.append(node)
    return dataclasses.replace(
        lineage, ancestors=tuple(ancestors), descendants=_seen(lineage.descendants, allows)
    )


def _seen(nodes: Sequence[LineageNode], allows: Callable[[str], bool]) -> tuple[LineageNode, ...]:
    return tuple(
        dataclasses.replace(n, children=_seen(n.children, allows))
        for n in nodes
        if n.name is None or allows(n.name)
    )
