"""Which variants run where: the platform and device rules, each written once, as the SQL
predicate ``resolve`` and ``search`` filter with and the Python reason ``resolve`` reports,
side by side (``tests/test_registry_rules.py`` checks that the two agree).

The device rule is jax's call-time check (``Exported.call``): an export for N devices runs on
exactly N devices; one for 1 device with no shardings runs on any count.

The predicates import SQLAlchemy when called: the reasons serve the registry server's client
too (``VariantInfo.reason``), which loads no database library.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "device_reason",
    "devices_parts",
    "devices_predicate",
    "platform_join",
    "platform_predicate",
    "platform_reason",
]


def platform_predicate(platform: Any) -> Any:
    """SQL: the variant was exported for ``platform``."""
    from sqlalchemy import exists

    from jaxport.registry._models import VariantPlatformRow, VariantRow

    return exists().where(
        VariantPlatformRow.variant_id == VariantRow.id, VariantPlatformRow.platform == platform
    )


def platform_join(platform: Any) -> Any:
    """SQL: ``platform_predicate`` as the condition of a join to ``variant_platforms`` (one
    row per variant and platform, so the join keeps each variant once), which lets that
    table's ``(platform, variant_id)`` index drive a query in ``variant_id`` order."""
    from sqlalchemy import and_

    from jaxport.registry._models import VariantPlatformRow, VariantRow

    return and_(
        VariantPlatformRow.variant_id == VariantRow.id, VariantPlatformRow.platform == platform
    )


def platform_reason(platforms: tuple[str, ...], platform: str | None) -> str | None:
    """Why a variant exported for ``platforms`` does not run on ``platform`` (None: it does)."""
    if platform is None or platform in platforms:
        return None
    return f"exported for {', '.join(platforms)}, not {platform}"


def devices_predicate(nr_devices: Any) -> Any:
    """SQL: the variant runs on ``nr_devices`` devices (an int or a bound parameter), checked
    on rows that another index yields (SQLite would otherwise drive by
    ``ix_variants_nr_devices``, an OR over two counts, over the selective path)."""
    from sqlalchemy import or_

    from jaxport.registry._models import VariantRow
    from jaxport.registry._selects import unindexed

    count = unindexed(VariantRow.nr_devices)
    return or_(*devices_parts(nr_devices, one_device=False, count=count))


def devices_parts(nr_devices: Any, *, one_device: bool, count: Any = None) -> list[Any]:
    """SQL: the device rule as the conditions whose OR it is, on ``count`` (by default, None:
    the column, so each is a range of the index ``variants (nr_devices, id)``): exactly
    ``nr_devices``; else (unless ``one_device``: the count is 1) 1 device, unsharded."""
    from sqlalchemy import and_

    from jaxport.registry._models import VariantRow

    if count is None:
        count = VariantRow.nr_devices
    exact = count == nr_devices
    if one_device:
        return [exact]
    return [exact, and_(count == 1, VariantRow.sharded.is_(False))]


def device_reason(exported_for: int, sharded: bool, nr_devices: int | None) -> str | None:
    """Why a variant for ``exported_for`` devices does not run on ``nr_devices`` (None: it does)."""
    if nr_devices is None or exported_for == nr_devices or (exported_for == 1 and not sharded):
        return None
    return f"exported for {exported_for} devices, not {nr_devices}"
