"""The statement of one page of ``search``: one filter drives it through its index, in
``variant_id`` order; every other filter is checked on the rows that index yields.

The filter that drives is the first given of: the name (index ``variants (model_id, id)``),
``fun_name`` (``variants (fun_name)``), the platform (``variant_platforms (platform,
variant_id)``), ``jax_version``, the calling convention version, ``shape_polymorphic`` and
``nr_devices`` (each ``variants (column, id)``, revision 0013); with none, the primary key. The
others are written (``unindexed``) so that SQLite, which keeps no statistics, cannot drive by
their index instead (it would pick a low-cardinality one over the selective one).

A driving filter is one or more index ranges ("parts"), each read in ``variant_id`` order and
cut at a page, their union cut again: ``nr_devices=N`` is two (``N`` devices; 1 device,
unsharded: the device rule of ``resolve``), ``jax_version=P`` is two (``P`` itself; the range
of ``P.`` followed by anything, which is sorted). So a page costs O(log n) plus the rows the
driving filter yields until the other filters have let a page through; a search that matches
nothing costs O(log n) when its driving filter matches nothing (alone, every filter's does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, select, true, union_all

from jaxport import InvalidNameError
from jaxport.registry._models import VariantPlatformRow, VariantRow
from jaxport.registry._names import check_count, check_name, check_text, normalize_platform
from jaxport.registry._rules import (
    devices_parts,
    devices_predicate,
    platform_join,
    platform_predicate,
)
from jaxport.registry._selects import model_id_select, unindexed, variants_select

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


def search_statement(filters: SearchFilters, size: int, after: int | None) -> Any:
    """A page of at most ``size`` variants matching ``filters`` with ``variant_id`` above
    ``after``, in ``variant_id`` order, as rows of ``variants_select``."""
    q, key = variants_select(), VariantRow.id
    driving = _driving(filters)
    if driving == "platform":
        assert filters.platform is not None
        q = q.join(VariantPlatformRow, platform_join(filters.platform))
        key = VariantPlatformRow.variant_id
    checks = [_check(filters, field) for field in _ORDER if field != driving]
    q = q.where(*(c for c in checks if c is not None))
    if after is not None:
        q = q.where(VariantRow.id > after)
        if key is not VariantRow.id:  # PostgreSQL does not carry it across the join
            q = q.where(key > after)
    pages = [q.where(part).order_by(key).limit(size) for part in _parts(filters, driving)]
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


def _driving(filters: SearchFilters) -> str | None:
    return next((f for f in _ORDER if getattr(filters, f) is not None), None)


def _parts(filters: SearchFilters, driving: str | None) -> list[Any]:
    """The driving filter as conditions that an index serves in ``variant_id`` order (one
    part of ``jax_version`` excepted: the range of its longer versions), whose OR is it."""
    value: Any = None if driving is None else getattr(filters, driving)
    if driving is None or driving == "platform":  # platform: the join is the condition
        return [true()]
    if driving == "name":
        return [VariantRow.model_id == model_id_select(value)]
    if driving == "jax_version":
        column = VariantRow.jax_version
        return [column == value, and_(column >= f"{value}.", column < f"{value}/")]
    if driving == "nr_devices":
        return devices_parts(value)
    return [getattr(VariantRow, driving) == value]


def _check(filters: SearchFilters, field: str) -> Any:
    """``field``'s condition (None: not filtered on), no index serving it (the name always
    drives when given)."""
    value: Any = getattr(filters, field)
    if value is None:
        return None
    if field == "platform":
        return platform_predicate(value)
    if field == "jax_version":
        column = unindexed(VariantRow.jax_version)
        return (column == value) | and_(column >= f"{value}.", column < f"{value}/")
    if field == "nr_devices":
        return devices_predicate(value)
    return unindexed(getattr(VariantRow, field)) == value
