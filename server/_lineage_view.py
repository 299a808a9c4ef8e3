"""The lineage on a version's page (``templates/_lineage.html``): the chain of sources, the
version and what derives from it as one nested list, made here from ``Registry.lineage``
(no script, no library); a prefix-limited token sees it as ``/api/v1/lineage`` shows it."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from jaxport.registry import Registry, TokenInfo
from jaxport.registry._internal import visible

__all__ = ["LineageItem", "lineage_tree"]


@dataclasses.dataclass(frozen=True)
class LineageItem:
    """One version in the list: ``label`` (``NAME:VERSION``, or what stands for a hidden or
    deleted one), its page's ``href`` (None: no page), ``derivation`` (how it derives from the
    item above), ``state``, whether it is the page's version, and the items below it."""

    label: str
    href: str | None
    derivation: str | None
    state: str
    current: bool = False
    children: tuple[LineageItem, ...] = ()


def lineage_tree(
    reg: Registry, principal: TokenInfo, name: str, version: int
) -> tuple[LineageItem, Any]:
    """The page's list (its root: the oldest source shown) and the ``Lineage`` it shows."""
    found = reg.lineage(f"{name}:{version}")
    if principal.prefixes:
        found = visible(found, principal.allows_name)
    item = LineageItem(
        f"{name}:{version}", None, found.derivation, "live", True,
        tuple(_item(n) for n in found.descendants),
    )  # fmt: skip
    for node in found.ancestors:
        item = dataclasses.replace(_item(node), children=(item,))
    return item, found


def _item(node: Any) -> LineageItem:
    href = None
    if node.name is not None and node.state == "live":
        href = f"/names/{urllib.parse.quote(node.name, safe='')}/{node.version}"
    return LineageItem(
        str(node), href, node.derivation, node.state, False,
        tuple(_item(c) for c in node.children),
    )  # fmt: skip
