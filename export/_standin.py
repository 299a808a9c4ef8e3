"""Stand-ins for custom pytree nodes a reading program has not registered.

An archive may hold custom nodes (a parameter tree of ``flax.core.FrozenDict``, an optax
state) that the writing program registered with ``jax.export.register_pytree_node_serialization``.
The ``jaxport`` command, audit workers and ``verify --deep`` workers cannot import and register
the user's classes, yet they need only the tree's structure, never the node's Python type: they
read such a node, within ``standins_allowed()``, as a ``StandIn`` that keeps its serialized
name and auxdata bytes. A ``StandIn`` is a pytree node of its children (so the parameters and
the method's ``in_tree`` agree and a method runs), and is written back as the node it stands
for (same name, same auxdata bytes), so a tree read and written is the tree that was written.
Nothing of the auxdata is interpreted. Outside ``standins_allowed()`` an unregistered node is
still refused, naming its registration.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from jax import tree_util

__all__ = ["StandIn", "standins_allowed", "standins_on"]

#: How many ``standins_allowed()`` blocks are open, in any thread: the command and the workers
#: are whole processes that never import the user's classes, and their readers may run in
#: threads of their own.
_OPEN = [0]
_LOCK = threading.Lock()


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


def standins_on() -> bool:
    """Whether an unregistered custom node is read as a ``StandIn`` here."""
    return _OPEN[0] > 0


@contextlib.contextmanager
def standins_allowed() -> Iterator[None]:
    """While it is open, unregistered custom nodes are read as ``StandIn``s in every thread of
    the process (for the CLI and the workers, not for library callers)."""
    with _LOCK:
        _OPEN[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _OPEN[0] -= 1
