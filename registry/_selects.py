"""Statement pieces the read queries share (``_queries``, ``_search``): variants with their
version number and name, a name's id as a scalar subquery, a column no index may serve, and
``live``: the one predicate by which every read hides soft-deleted versions (``_retention``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from jaxport.registry._models import NameRow, VariantRow, VersionRow

__all__ = [
    "live",
    "live_variant",
    "model_id_select",
    "unindexed",
    "variants_looked_up",
    "variants_select",
]


def live() -> Any:
    """``versions`` rows that are not soft-deleted (``deleted_at`` NULL): a version a retention
    run deleted is hidden from every read until it is restored (``registry/_retention.py``)."""
    return VersionRow.deleted_at.is_(None)


def live_variant() -> Any:
    """``variants`` rows whose version is ``live``, as a correlated EXISTS (a primary-key look-up
    per row, for queries that read ``variants`` alone)."""
    return select(VersionRow.id).where(VersionRow.id == VariantRow.version_id, live()).exists()


def variants_select() -> Any:
    """Every column of ``variants`` of ``live`` versions, with ``v_number`` (its version) and
    ``m_name`` (its name)."""
    return (
        select(
            VariantRow.__table__, VersionRow.version.label("v_number"), NameRow.name.label("m_name")
        )
        .join(VersionRow, VariantRow.version_id == VersionRow.id)
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(live())
    )


def variants_looked_up() -> Any:
    """``variants_select``'s columns from ``variants`` alone: ``v_number`` and ``m_name`` are
    looked up by primary key for each row returned (scalar subqueries), so the planner has one
    table to place, not three (PostgreSQL planned a union of two three-table joins in 1.5 ms
    and ran it in 0.1 ms)."""
    version = select(VersionRow.version).where(VersionRow.id == VariantRow.version_id)
    name = select(NameRow.name).where(NameRow.id == VariantRow.model_id)
    return select(
        VariantRow.__table__,
        version.scalar_subquery().label("v_number"),
        name.scalar_subquery().label("m_name"),
    )


def model_id_select(name: Any, *conditions: Any) -> Any:
    """The id of ``name`` (a str or a bound parameter; if ``conditions`` on its ``models`` row
    hold), as a scalar subquery: a query of one name's versions then reads its ``(model_id,
    version)`` index in version order (PostgreSQL does not, across a join to ``models``)."""
    return select(NameRow.id).where(NameRow.name == name, *conditions).scalar_subquery()


def unindexed(column: Any) -> Any:
    """``column`` as an expression no index serves (``coalesce(column, column)``: the same
    value and type), for a filter that must not drive a query: SQLite, which keeps no
    statistics, would pick its index over a more selective one."""
    return func.coalesce(column, column)
