"""The statement of one page of ``search``: one filter drives it through its index, in
``variant_id`` order; every other filter is checked on the rows that index yields.

The filter that drives is the first given of: the name (index ``variants (model_id, id)``),
``fun_name`` (``variants (fun_name)``), the platform (``variant_platforms (platform,
variant_id)``), ``jax_version``, the calling convention version, ``shape_polymorphic`` and
``nr_devices`` (each ``variants (column, id)``, revision 0013); with none, the primary key. The
others are written (``unindexed``) so that SQLite, which keeps no statistics, cannot drive by
their index instead (it would pick a low-cardinality one over the selective one).

A driving filter is one or more parts, each read in ``variant_id`` order and cut at a page,
their union cut again: ``nr_devices=N`` is two index ranges (``N`` devices; 1 device,
unsharded: the device rule of ``resolve``), ``jax_version=P`` is two (``P`` itself, an index
range; the versions ``P.`` and longer: on PostgreSQL a range its planner reads in order or
sorts, by its statistics; on SQLite the primary key, under a LIMIT that an index probe sets to
0 when there is none). So a page costs O(log n) plus the rows the driving filter yields until
the other filters have let a page through (a soft-deleted version's variants are skipped
there too: ``_selects.live_variant``, a primary-key look-up per row); a search that matches
nothing costs O(log n) when its driving filter matches nothing (alone, every filter's does:
``tests/test_registry_queries.py`` counts SQLite's steps). The statement is built once per
combination of filters given (its values, the page size too, bound by name).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, bindparam, case, select, true, union_all

from jaxport import InvalidNameError
from jaxport.registry._models import VariantPlatformRow, VariantRow
from jaxport.registry._names import check_count, check_name, check_text, normalize_platform
from jaxport.registry._rules import (
    devices_parts,
    devices_predicate,
    platform_join,
    platform_predicate,
)
from jaxport.registry._selects import (
    live_variant,
    model_id_select,
    unindexed,
    variants_looked_up,
)

__all__ = ["SearchFilters", "search_statement"]


@dataclasses.dataclass(frozen=True)
class SearchFilters:
    """``Registry.search``'s filters, checked and normalized (None: not filtered on)."""

    name: str | None = None
    fun_name: str | None = None
    platform: str | None = None
    jax_version: str | None = None
    calling_convention_version: int | None = None
    shape_polymorphic: bool | None = None
    nr_devices: int | None = None

    @classmethod
    def check(cls, filters: Mapping[str, Any]) -> SearchFilters:
        """The filters ``Registry.search`` was given, checked.

        Raises:
            InvalidNameError: a bad name, platform, text, count or flag.
        """
        f = dict(filters)
        if (name := f.get("name")) is not None:
            check_name(name)
        if (fun_name := f.get("fun_name")) is not None:
            check_text(fun_name, "fun_name")
        if (platform := f.get("platform")) is not None:
            platform = normalize_platform(platform)
        if (prefix := f.get("jax_version")) is not None:
            check_text(prefix, "jax_version")
        if (cc := f.get("calling_convention_version")) is not None:
            cc = check_count(cc, "calling convention")
        poly = f.get("shape_polymorphic")
        if poly is not None and not isinstance(poly, bool):
            raise InvalidNameError(f"shape_polymorphic must be a bool, got {poly!r:.40}")
        if (nr_devices := f.get("nr_devices")) is not None:
            nr_devices = check_count(nr_devices, "a device count")
        return cls(name, fun_name, platform, prefix, cc, poly, nr_devices)


def search_statement(
    filters: SearchFilters, size: int, after: int | None, dialect: str
) -> tuple[Any, dict[str, Any]]:
    """A page of at most ``size`` variants matching ``filters`` with ``variant_id`` above
    ``after``, in ``variant_id`` order, with ``variants_select``'s columns, for the database
    ``dialect`` ("sqlite", "postgresql"): the statement and its parameters. The statement
    depends only on which filters are given (built once per shape: building a union of joins
    costs more than running it)."""
    given = tuple(f for f in _ORDER if getattr(filters, f) is not None)
    one_device = given[:1] == ("nr_devices",) and filters.nr_devices == 1
    statement = _statement(given, one_device, after is not None, dialect)
    parameters: dict[str, Any] = {f: getattr(filters, f) for f in given}
    parameters["size"] = size
    if filters.jax_version is not None:  # the versions longer than it: one range
        parameters["jax_version_dot"] = f"{filters.jax_version}."
        parameters["jax_version_slash"] = f"{filters.jax_version}/"
    if after is not None:
        parameters["after"] = after
    return statement, parameters


@functools.lru_cache(maxsize=512)
def _statement(given: tuple[str, ...], one_device: bool, paged: bool, dialect: str) -> Any:
    """``search_statement``'s statement for the filters ``given`` (``one_device``: the
    device count that drives is 1), ``after`` given if ``paged``; values are bound by name."""
    q, key = variants_looked_up(), VariantRow.id
    driving = given[0] if given else None
    if driving == "platform":
        q = q.join(VariantPlatformRow, platform_join(bindparam("platform")))
        key = VariantPlatformRow.variant_id
    q = q.where(live_variant(), *(_check(field) for field in given[1:]))
    if paged:
        q = q.where(VariantRow.id > bindparam("after"))
        if key is not VariantRow.id:  # PostgreSQL does not carry it across the join
            q = q.where(key > bindparam("after"))
    size: Any = bindparam("size")
    pages = [
        q.where(part).order_by(key).limit(size if guard is None else case((guard, size), else_=0))
        for part, guard in _parts(driving, one_device, dialect)
    ]
    if len(pages) == 1:
        return pages[0]
    both = union_all(*(select(p.subquery()) for p in pages)).subquery()
    return select(both).order_by(both.c.id).limit(size)


#: The filters in the order in which the first given drives.
_ORDER = (
    "name",
    "fun_name",
    "platform",
    "jax_version",
    "calling_convention_version",
    "shape_polymorphic",
    "nr_devices",
)


def _parts(driving: str | None, one_device: bool, dialect: str) -> list[tuple[Any, Any]]:
    """The driving filter as ``(condition, guard)`` pairs whose conditions' OR is it, each read
    in ``variant_id`` order through an index range (``guard`` None), or (on SQLite, the
    versions longer than a ``jax_version``: ``_longer_on_sqlite``) through the primary key once
    ``guard`` (an index probe) has found that any exists."""
    if driving is None or driving == "platform":  # platform: the join is the condition
        return [(true(), None)]
    value: Any = bindparam(driving)
    if driving == "name":
        return [(VariantRow.model_id == model_id_select(value), None)]
    if driving == "jax_version":
        exact = (VariantRow.jax_version == value, None)
        if dialect == "sqlite":
            return [exact, _longer_on_sqlite()]
        return [exact, (_longer_versions(VariantRow.jax_version), None)]
    if driving == "nr_devices":
        return [(p, None) for p in devices_parts(value, one_device=one_device)]
    return [(getattr(VariantRow, driving) == value, None)]


def _check(field: str) -> Any:
    """``field``'s condition, no index serving it (the name always drives when given)."""
    value: Any = bindparam(field)
    if field == "platform":
        return platform_predicate(value)
    if field == "jax_version":
        column = unindexed(VariantRow.jax_version)
        return (column == value) | _longer_versions(column)
    if field == "nr_devices":
        return devices_predicate(value)
    return unindexed(getattr(VariantRow, field)) == value


def _longer_versions(column: Any) -> Any:
    """``column`` starts with the ``jax_version`` asked for and a dot: one range, bytewise."""
    return and_(column >= bindparam("jax_version_dot"), column < bindparam("jax_version_slash"))


def _longer_on_sqlite() -> tuple[Any, Any]:
    """The versions longer than the ``jax_version`` asked for (``P.`` and more) on SQLite:
    read in ``variant_id`` order, so that a page of a prefix most variants match costs a page
    (SQLite, without statistics, would read the whole range and sort it for every page), and
    guarded by a probe of ``ix_variants_jax_version`` that makes the page's LIMIT 0, which
    SQLite checks before reading a row, when there is none. PostgreSQL's planner chooses
    between the range and the primary key itself, by its statistics."""
    probe = VariantRow.__table__.alias("longer_version")
    exists = select(probe.c.id).where(_longer_versions(probe.c.jax_version)).exists()
    return _longer_versions(unindexed(VariantRow.jax_version)), exists
