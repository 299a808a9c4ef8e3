"""PyTreeDefs <-> ``jaxport.fb.PyTreeDef``, as a flat list of nodes in pre-order.

Node kinds follow jax.export's own serialization: leaf, None, tuple, list, dict (string keys),
and custom nodes registered with ``jax.export.register_pytree_node_serialization`` or
``jax.export.register_namedtuple_serialization`` (stored by their serialized name and the
auxdata bytes their serializer returns). Reading calls only deserializers that the program
registered itself; nothing from the archive is executed. Both directions are iterative and
share the limits of ``_limits`` (depth, nodes, children), so a tree written is a tree read.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
from collections.abc import Iterator, Sequence
from typing import Any

import flatbuffers
from jax import tree_util

from jaxport import CorruptArchiveError, JaxportError, UnsupportedFeatureError
from jaxport.export import _conversions, _fb, _limits, _standin
from jaxport.export._jax import export_impl
from jaxport.schema import fb

__all__ = ["decode_pytreedef", "encode_pytreedef", "pytree_paths", "unstorable_node"]

_BUILTIN_KINDS = {
    types.NoneType: fb.PyTreeKind.none,
    tuple: fb.PyTreeKind.tuple,
    list: fb.PyTreeKind.list,
    dict: fb.PyTreeKind.dict,
}


def encode_pytreedef(builder: flatbuffers.Builder, treedef: Any) -> int:
    """An ``fb.PyTreeDef`` for ``treedef``: its nodes in pre-order.

    Raises:
        UnsupportedFeatureError: a dict with non-string keys, a node type not registered for
            serialization, or a tree over the reader's limits (``_limits.MAX_PYTREE_DEPTH``
            levels, ``MAX_PYTREE_NODES`` nodes, ``MAX_CHILDREN`` children of a node).
    """
    nodes: list[int] = []
    stack = [(treedef, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > _limits.MAX_PYTREE_DEPTH:
            raise UnsupportedFeatureError(
                f"a pytree deeper than {_limits.MAX_PYTREE_DEPTH} levels cannot be stored"
            )
        children = node.children()
        if len(children) > _limits.MAX_CHILDREN:
            raise UnsupportedFeatureError(
                f"a pytree node with {len(children)} children cannot be stored "
                f"(limit {_limits.MAX_CHILDREN})"
            )
        nodes.append(_encode_node(builder, node, len(children)))
        if len(nodes) > _limits.MAX_PYTREE_NODES:
            raise UnsupportedFeatureError(
                f"a pytree of more than {_limits.MAX_PYTREE_NODES} nodes cannot be stored"
            )
        stack.extend((child, depth + 1) for child in reversed(children))
    vector = _fb._offsets_vector(builder, nodes)
    fb.PyTreeDefStart(builder)
    fb.PyTreeDefAddNodes(builder, vector)
    return int(fb.PyTreeDefEnd(builder))


def unstorable_node(treedef: Any) -> tuple[str, type] | None:
    """The first node of ``treedef`` in pre-order that ``encode_pytreedef`` cannot store (a
    custom node type not registered with ``jax.export.register_pytree_node_serialization``),
    as ``(its key path, e.g. "['enc'][0]", "" at the root; its type)``, or None.

    Iterative, one visit per node: the tree is one a method returned, already in memory.
    """
    stack: list[tuple[Any, str]] = [(treedef, "")]
    while stack:
        node, path = stack.pop()
        node_data = node.node_data()
        if node_data is None:
            continue
        node_type, aux = node_data
        children = node.children()
        if node_type is dict:
            labels = [f"[{k!r}]" for k in aux]
        elif node_type in _BUILTIN_KINDS:
            labels = [f"[{i}]" for i in range(len(children))]
        elif node_type is _standin.StandIn or node_type in export_impl.serialization_registry:
            fields = getattr(node_type, "_fields", None)
            labels = [f".{f}" for f in fields] if fields else []
            if len(labels) != len(children):
                labels = [f"[{i}]" for i in range(len(children))]
        else:
            return path, node_type
        stack.extend(reversed([(c, path + lab) for c, lab in zip(children, labels, strict=True)]))
    return None


def _encode_node(builder: flatbuffers.Builder, treedef: Any, num_children: int) -> int:
    node_data = treedef.node_data()
    keys = name = auxdata = None
    if node_data is None:
        kind = fb.PyTreeKind.leaf
    elif node_data[0] in _BUILTIN_KINDS:
        kind = _BUILTIN_KINDS[node_data[0]]
        if kind == fb.PyTreeKind.dict:
            keys = _fb.str_vector(builder, _dict_keys(node_data[1]))
    else:
        kind = fb.PyTreeKind.custom
        name, auxdata = _encode_custom(builder, node_data)
    fb.PyTreeNodeStart(builder)
    fb.PyTreeNodeAddKind(builder, kind)
    fb.PyTreeNodeAddNumChildren(builder, num_children)
    if keys is not None:
        fb.PyTreeNodeAddDictKeys(builder, keys)
    if name is not None:
        fb.PyTreeNodeAddCustomName(builder, name)
        fb.PyTreeNodeAddCustomAuxdata(builder, auxdata)
    return int(fb.PyTreeNodeEnd(builder))


def _dict_keys(keys: Sequence[Any]) -> Sequence[str]:
    for k in keys:
        if not isinstance(k, str):
            raise UnsupportedFeatureError(
                f"only dicts with string keys can be stored; found key {k!r} of type {type(k)}: "
                f"{_conversions.STRING_KEYS}"
            )
    return keys


def _encode_custom(builder: flatbuffers.Builder, node_data: Any) -> tuple[int, int]:
    node_type, aux = node_data
    if node_type is _standin.StandIn:  # written back as the node it stands for
        name, auxdata = aux
        return builder.CreateString(name), _fb.bytes_vector(builder, auxdata)
    registered = export_impl.serialization_registry.get(node_type)
    if registered is None:
        raise UnsupportedFeatureError(
            f"cannot store a pytree with the unregistered node type {node_type}: "
            f"{_conversions.conversion(node_type)}"
        )
    serialized_name, serialize_auxdata = registered
    data = serialize_auxdata(aux)
    if not isinstance(data, bytes | bytearray):
        raise UnsupportedFeatureError(
            f"the auxdata serializer of {node_type} returned {type(data)}, not bytes"
        )
    return builder.CreateString(serialized_name), _fb.bytes_vector(builder, bytes(data))


def decode_pytreedef(table: fb.PyTreeDef, leaves: Sequence[Any]) -> Any:
    """The PyTreeDef of an ``fb.PyTreeDef`` with ``len(leaves)`` leaves.

    The leaves (the avals) stand in the rebuilt pytree, as in jax's own deserializer, since a
    custom node's unflatten may look at them. Iterative: time and memory are linear in the
    number of nodes, whatever the depth.

    Raises:
        CorruptArchiveError: a malformed node list (unknown kind, a node claiming more children
            than nodes follow, a dict whose keys are not sorted, unique strings, one per
            child), a tree over the limits of ``_limits``, or a leaf count that is not
            ``len(leaves)``.
        UnsupportedFeatureError: a custom node whose serialized name this program has not
            registered (within ``_standin.standins_allowed()``, read as a ``StandIn``).
    """
    nodes = _Nodes(table)
    leaf_iter = iter(leaves)
    open_nodes: list[_OpenNode] = []
    root: list[Any] = []
    for i in range(len(nodes)):
        kind, n = nodes.kind_and_children(i, len(open_nodes))
        if n:
            open_nodes.append(_OpenNode(nodes.node(i), kind, n, []))
            continue
        if kind == fb.PyTreeKind.leaf:
            value = _leaf(leaf_iter, i)
        else:
            value = _build(nodes.node(i), kind, [])
        while True:
            parent = open_nodes[-1].children if open_nodes else root
            parent.append(value)
            if not open_nodes or len(parent) < open_nodes[-1].num_children:
                break
            done = open_nodes.pop()
            value = _build(done.node, done.kind, done.children)
        if not open_nodes and i != len(nodes) - 1:
            raise CorruptArchiveError(f"pytree definition has {len(nodes) - i - 1} extra nodes")
    if open_nodes or len(root) != 1:
        raise CorruptArchiveError("pytree definition ends early")
    if next(leaf_iter, _NONE_LEAF) is not _NONE_LEAF:
        raise CorruptArchiveError("pytree definition has fewer leaves than avals")
    treedef: Any = tree_util.tree_structure(root[0])
    if treedef.num_leaves != len(leaves):
        raise CorruptArchiveError(
            f"the rebuilt pytree has {treedef.num_leaves} leaves for {len(leaves)} avals "
            "(a custom node that flattens differently from how it was stored)"
        )
    return treedef


_NONE_LEAF = object()


@dataclasses.dataclass
class _OpenNode:
    node: Any
    kind: int
    num_children: int
    children: list[Any]


class _Nodes:
    """The nodes of a PyTreeDef, their positions read in bulk; each distinct node table is
    read once (a hostile header may refer to one table from every element)."""

    def __init__(self, table: fb.PyTreeDef) -> None:
        self._table = table
        self._positions = _fb.table_positions(table, "PyTreeDef.Nodes")
        if not self._positions:
            raise CorruptArchiveError("empty pytree definition")
        if len(self._positions) > _limits.MAX_PYTREE_NODES:
            raise CorruptArchiveError(
                f"pytree of {len(self._positions)} nodes (limit {_limits.MAX_PYTREE_NODES})"
            )
        self._seen: dict[int, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._positions)

    def node(self, index: int) -> fb.PyTreeNode:
        return _fb.table_at(fb.PyTreeNode, self._table, self._positions[index])

    def kind_and_children(self, index: int, depth: int) -> tuple[int, int]:
        """Node ``index``'s kind and child count, checked; ``depth``: its open ancestors."""
        position = self._positions[index]
        seen = self._seen.get(position)
        if seen is None:
            seen = self._seen[position] = _fb.read_node_header(self._table, position)
        kind, n = seen
        if depth >= _limits.MAX_PYTREE_DEPTH:
            raise CorruptArchiveError(f"pytree deeper than {_limits.MAX_PYTREE_DEPTH} levels")
        follow = len(self._positions) - index - 1
        if n > min(follow, _limits.MAX_CHILDREN):
            raise CorruptArchiveError(
                f"pytree node {index} claims {n} children, only {follow} nodes follow"
            )
        if kind not in _KINDS:
            raise CorruptArchiveError(f"pytree node {index} has unknown kind {kind}")
        if kind in (fb.PyTreeKind.leaf, fb.PyTreeKind.none) and n:
            raise CorruptArchiveError(f"pytree node {index} (a leaf or None) has {n} children")
        return kind, n


_KINDS = frozenset(
    {
        fb.PyTreeKind.leaf,
        fb.PyTreeKind.none,
        fb.PyTreeKind.tuple,
        fb.PyTreeKind.list,
        fb.PyTreeKind.dict,
        fb.PyTreeKind.custom,
    }
)


def _leaf(leaves: Iterator[Any], index: int) -> Any:
    leaf = next(leaves, _NONE_LEAF)
    if leaf is _NONE_LEAF:
        raise CorruptArchiveError(f"pytree definition has more leaves than avals (node {index})")
    return leaf


def _build(node: Any, kind: int, children: list[Any]) -> Any:
    if kind == fb.PyTreeKind.none:
        return None
    if kind == fb.PyTreeKind.tuple:
        return tuple(children)
    if kind == fb.PyTreeKind.list:
        return children
    if kind == fb.PyTreeKind.dict:
        return dict(zip(_dict_node_keys(node, len(children)), children, strict=True))
    return _build_custom(node, children)


def _dict_node_keys(node: Any, n: int) -> tuple[str, ...]:
    keys = _fb.read_strs(node, "DictKeys")
    if len(keys) != n:
        raise CorruptArchiveError("a pytree dict with a different number of keys and children")
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise CorruptArchiveError("a pytree dict whose keys are not sorted and unique")
    return keys


def _build_custom(node: Any, children: list[Any]) -> Any:
    name = _fb.read_str(node.CustomName())
    registered = export_impl.deserialization_registry.get(name)
    if registered is None and _standin.standins_on():
        return _standin.StandIn(name, _fb.read_bytes(node, "CustomAuxdata") or b"", children)
    if registered is None:
        raise UnsupportedFeatureError(
            f"the archive has a pytree node {name!r} that this program has not registered: call "
            "jax.export.register_pytree_node_serialization or "
            "jax.export.register_namedtuple_serialization for it before loading"
        )
    _, deserialize_auxdata, from_children = registered
    auxdata = _fb.read_bytes(node, "CustomAuxdata") or b""
    try:
        return from_children(deserialize_auxdata(auxdata), children)
    except JaxportError:
        raise
    except Exception as e:  # the program's own deserializer, on bytes from the archive
        raise CorruptArchiveError(
            f"the deserializer registered for pytree node {name!r} failed: "
            f"{type(e).__name__}: {str(e)[:200]}"
        ) from e


#: The longest key path ``pytree_paths`` returns; longer ones keep their start and their last
#: label, with "..." between.
MAX_PATH_CHARS = 256


def pytree_paths(table: fb.PyTreeDef) -> list[str]:
    """The key path of every leaf (``"[0][1]['w']"``), from the nodes alone, without jax types.

    Iterative, with the checks of ``decode_pytreedef`` on depth and child counts; each path
    is at most MAX_PATH_CHARS characters.

    Raises:
        CorruptArchiveError: a malformed node list (see ``decode_pytreedef``).
    """
    nodes = _Nodes(table)
    paths: list[str] = []
    open_nodes: list[_PathFrame] = []
    for i in range(len(nodes)):
        if i and not open_nodes:
            raise CorruptArchiveError(f"pytree definition has {len(nodes) - i} extra nodes")
        kind, n = nodes.kind_and_children(i, len(open_nodes))
        prefix = open_nodes[-1].next_path() if open_nodes else ""
        if kind == fb.PyTreeKind.leaf:
            paths.append(prefix)
        if n:
            keys = _dict_node_keys(nodes.node(i), n) if kind == fb.PyTreeKind.dict else None
            open_nodes.append(_PathFrame(prefix, keys, n))
        while open_nodes and open_nodes[-1].remaining == 0:
            open_nodes.pop()
    if open_nodes:
        raise CorruptArchiveError("pytree definition ends early")
    return paths


@dataclasses.dataclass
class _PathFrame:
    prefix: str
    keys: tuple[str, ...] | None
    remaining: int
    index: int = 0

    def next_path(self) -> str:
        label = f"[{self.keys[self.index]!r}]" if self.keys is not None else f"[{self.index}]"
        self.index += 1
        self.remaining -= 1
        return _join_path(self.prefix, label)


def _join_path(prefix: str, label: str) -> str:
    if len(prefix) + len(label) <= MAX_PATH_CHARS:
        return prefix + label
    half = MAX_PATH_CHARS // 2
    head = prefix.split("...", 1)[0][:half]
    return f"{head}...{label[-half:]}"
