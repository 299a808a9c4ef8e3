"""PyTreeDefs <-> ``jaxport.fb.PyTreeDef``, as a flat list of nodes in pre-order.

Node kinds follow jax.export's own serialization: leaf, None, tuple, list, dict (string keys),
and custom nodes registered with ``jax.export.register_pytree_node_serialization`` or
``jax.export.register_namedtuple_serialization`` (stored by their serialized name and the
auxdata bytes their serializer returns). Reading calls only deserializers that the program
registered itself; nothing from the archive is executed.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Sequence
from typing import Any

import flatbuffers
from jax import tree_util
from jax._src.export import _export

from jaxport._errors import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export import _fb
from jaxport.schema import fb

__all__ = ["decode_pytreedef", "encode_pytreedef", "pytree_paths"]

_BUILTIN_KINDS = {
    types.NoneType: fb.PyTreeKind.none,
    tuple: fb.PyTreeKind.tuple,
    list: fb.PyTreeKind.list,
    dict: fb.PyTreeKind.dict,
}


def encode_pytreedef(builder: flatbuffers.Builder, treedef: Any) -> int:
    """An ``fb.PyTreeDef`` for ``treedef``.

    Raises:
        UnsupportedFeatureError: a dict with non-string keys, or a node type not registered
            for serialization.
    """
    nodes: list[int] = []
    _encode_nodes(builder, treedef, nodes)
    vector = _fb._offsets_vector(builder, nodes)
    fb.PyTreeDefStart(builder)
    fb.PyTreeDefAddNodes(builder, vector)
    return fb.PyTreeDefEnd(builder)


def _encode_nodes(builder: flatbuffers.Builder, treedef: Any, out: list[int]) -> None:
    node_data = treedef.node_data()
    children = treedef.children()
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
    fb.PyTreeNodeAddNumChildren(builder, len(children))
    if keys is not None:
        fb.PyTreeNodeAddDictKeys(builder, keys)
    if name is not None:
        fb.PyTreeNodeAddCustomName(builder, name)
        fb.PyTreeNodeAddCustomAuxdata(builder, auxdata)
    out.append(fb.PyTreeNodeEnd(builder))
    for child in children:
        _encode_nodes(builder, child, out)


def _dict_keys(keys: Sequence[Any]) -> Sequence[str]:
    for k in keys:
        if not isinstance(k, str):
            raise UnsupportedFeatureError(
                f"only dicts with string keys can be stored; found key {k!r} of type {type(k)}"
            )
    return keys


def _encode_custom(builder: flatbuffers.Builder, node_data: Any) -> tuple[int, int]:
    node_type, aux = node_data
    registered = _export.serialization_registry.get(node_type)
    if registered is None:
        raise UnsupportedFeatureError(
            f"cannot store a pytree with the unregistered node type {node_type}: register it "
            "with jax.export.register_pytree_node_serialization or "
            "jax.export.register_namedtuple_serialization"
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
    custom node's unflatten may look at them.

    Raises:
        CorruptArchiveError: a malformed node list, or a leaf count that is not ``len(leaves)``.
        UnsupportedFeatureError: a custom node whose serialized name this program has not
            registered.
    """
    nodes = _fb.read_tables(table, "Nodes")
    if not nodes:
        raise CorruptArchiveError("empty pytree definition")
    leaf_iter = iter(leaves)
    position = iter(range(len(nodes)))
    tree = _build(nodes, position, leaf_iter, depth=0)
    if next(position, None) is not None or next(leaf_iter, None) is not None:
        raise CorruptArchiveError("pytree definition does not match the number of avals")
    return tree_util.tree_structure(tree)


_NONE_LEAF = object()
_MAX_DEPTH = 500


def _build(nodes: Sequence[Any], position: Iterator[int], leaves: Iterator[Any], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise CorruptArchiveError(f"pytree deeper than {_MAX_DEPTH} levels")
    i = next(position, None)
    if i is None:
        raise CorruptArchiveError("pytree definition ends early")
    node = nodes[i]
    kind = node.Kind()
    n = _fb.count(node.NumChildren(), node)
    children = [_build(nodes, position, leaves, depth + 1) for _ in range(n)]
    if kind == fb.PyTreeKind.leaf:
        if n:
            raise CorruptArchiveError("a pytree leaf with children")
        leaf = next(leaves, _NONE_LEAF)
        if leaf is _NONE_LEAF:
            raise CorruptArchiveError("pytree definition has more leaves than avals")
        return leaf
    if kind == fb.PyTreeKind.none:
        return None
    if kind == fb.PyTreeKind.tuple:
        return tuple(children)
    if kind == fb.PyTreeKind.list:
        return children
    if kind == fb.PyTreeKind.dict:
        keys = _fb.read_strs(node, "DictKeys")
        if len(keys) != n:
            raise CorruptArchiveError("a pytree dict with a different number of keys and children")
        return dict(zip(keys, children, strict=True))
    if kind == fb.PyTreeKind.custom:
        return _build_custom(node, children)
    raise CorruptArchiveError(f"unknown pytree node kind {kind}")


def _build_custom(node: Any, children: list[Any]) -> Any:
    name = _fb.read_str(node.CustomName())
    registered = _export.deserialization_registry.get(name)
    if registered is None:
        raise UnsupportedFeatureError(
            f"the archive has a pytree node {name!r} that this program has not registered: call "
            "jax.export.register_pytree_node_serialization or "
            "jax.export.register_namedtuple_serialization for it before loading"
        )
    _, deserialize_auxdata, from_children = registered
    auxdata = deserialize_auxdata(_fb.read_bytes(node, "CustomAuxdata") or b"")
    return from_children(auxdata, children)


def pytree_paths(table: fb.PyTreeDef) -> list[str]:
    """The key path of every leaf (``"[0][1]['w']"``), from the nodes alone, without jax types."""
    nodes = _fb.read_tables(table, "Nodes")
    paths: list[str] = []
    pending: list[list[str]] = []  # for each open node, the labels of its children not yet seen
    for node in nodes:
        prefix = pending[-1].pop(0) if pending else ""
        n = _fb.count(node.NumChildren(), node)
        if node.Kind() == fb.PyTreeKind.leaf:
            paths.append(prefix)
        elif n and node.Kind() == fb.PyTreeKind.dict:
            pending.append([f"{prefix}[{k!r}]" for k in _fb.read_strs(node, "DictKeys")])
        elif n:
            pending.append([f"{prefix}[{j}]" for j in range(n)])
        while pending and not pending[-1]:
            pending.pop()
    return paths
