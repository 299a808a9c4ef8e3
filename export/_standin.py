"""Stand-ins for custom pytree nodes a reading program has not registered.

An archive may hold custom nodes (a parameter tree of ``flax.core.FrozenDict``, an optax
state) that the writing program registered with ``jax.export.register_pytree_node_serialization``.
The ``jaxport`` command, audit workers and ``verify --deep`` workers cannot import and register
the user's classes, yet they need only the tree's structure, never the node's Python type: they
read such a node, within ``jaxport._standins.standins_allowed()`` (``standins_on()``), as a
``StandIn`` that keeps its serialized name and auxdata bytes. A ``StandIn`` is a pytree node of
its children (so the parameters and the method's ``in_tree`` agree and a method runs), and is
written back as the node it stands for (same name, same auxdata bytes), so a tree read and
written is the tree that was written. Nothing of the auxdata is interpreted. Elsewhere an
unregistered node is still refused, naming its registration.
"""

from __future__ import annotations

from typing import Any

from jax import tree_util

from jaxport._standins import standins_on

__all__ = ["StandIn", "standins_on"]


class StandIn:
    """An unregistered custom node read from an archive: its serialized ``name``, its
    ``auxdata`` bytes as stored, and its ``children``."""

    __slots__ = ("auxdata", "children", "name")

    def __init__(self, name: str, auxdata: bytes, children: list[Any]) -> None:
        self.name = name
        self.auxdata = auxdata
        self.children = list(children)

    def __repr__(self) -> str:
        return f"StandIn({self.name!r}, {len(self.children)} children)"


def _flatten(node: StandIn) -> tuple[list[Any], tuple[str, bytes]]:
    return node.children, (node.name, node.auxdata)


def _unflatten(aux: tuple[str, bytes], children: Any) -> StandIn:
    return StandIn(aux[0], aux[1], list(children))


tree_util.register_pytree_node(StandIn, _flatten, _unflatten)
