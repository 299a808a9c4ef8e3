"""Parameters from other formats: a safetensors file, an Orbax checkpoint.

Both libraries are optional extras (``pip install jaxport[safetensors]``,
``pip install jaxport[orbax]``); without them these functions raise
``UnsupportedFeatureError``, never ``ImportError``. ``jaxport.Model.from_safetensors`` and
``jaxport.Model.from_orbax`` build a model from what they return.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxport import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export import _limits

__all__ = [
    "MAX_JSON_NESTING",
    "MAX_KEY_CHARS",
    "MAX_KEY_PARTS",
    "MAX_ORBAX_METADATA",
    "MAX_SAFETENSORS_HEADER",
    "check_key",
    "nest_keys",
    "params_from_orbax",
    "params_from_safetensors",
]

#: What separates the levels of a nested key in a safetensors file ("layers.0.kernel").
KEY_SEPARATOR = "."
#: Parts of one nested key (safetensors' ``"a.b.c"``, an Orbax tree's key path): a key of
#: ``n`` parts nests ``n + 1`` levels of parameters, inside a method's ``in_tree``
#: ``((params, *args), {})`` two more, which may hold ``_limits.MAX_PYTREE_DEPTH`` levels.
MAX_KEY_PARTS = _limits.MAX_PYTREE_DEPTH - 3
#: Characters of one safetensors key (real ones hold tens: ``model.layers.31.mlp.up.weight``).
MAX_KEY_CHARS = 1024
#: Bytes of a safetensors file's JSON header that are read: the same as an archive's header.
MAX_SAFETENSORS_HEADER = 64 * 2**20


def params_from_safetensors(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tensors of a safetensors file as nested dicts of numpy arrays (see ``nest_keys``).

    Each tensor keeps its shape and dtype (``bfloat16`` and the other ml_dtypes included); its
    bytes are read into memory. The file's ``__metadata__`` is not returned.

    Nothing is read before the header's declared length is checked against the file and
    ``MAX_SAFETENSORS_HEADER``; the safetensors library then parses the header and checks
    every tensor's offsets against the file and its shape and dtype (so no tensor allocates
    more than the file holds), and the keys are checked before any tensor is read.

    Raises:
        UnsupportedFeatureError: the ``safetensors`` package is not installed; two keys where
            one is a prefix level of the other (``"a"`` and ``"a.b"``); a key of more than
            ``MAX_KEY_PARTS`` parts or ``MAX_KEY_CHARS`` characters.
        CorruptArchiveError: the file is not a well-formed safetensors file (not a regular
            file, a header longer than the file or ``MAX_SAFETENSORS_HEADER``, offsets
            outside the file).
        OSError: the file cannot be read.
    """
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise _missing("safetensors", "safetensors") from None
    name = os.fspath(path)
    _check_safetensors_header(name)
    try:
        with safe_open(name, framework="numpy") as f:
            keys = list(f.keys())
            for key in keys:
                check_key(key)
            flat = {key: f.get_tensor(key) for key in keys}
    except SafetensorError as e:
        raise CorruptArchiveError(f"not a readable safetensors file: {e}", path=name) from None
    return nest_keys(flat)


def _check_safetensors_header(path: str) -> None:
    """The file is a regular file whose header length (8 bytes, little-endian: the format's
    first field) fits in it and in ``MAX_SAFETENSORS_HEADER``; read without blocking (a FIFO).

    Raises:
        CorruptArchiveError: it does not; OSError: the file cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        size = info.st_size
        if not stat.S_ISREG(info.st_mode):
            raise CorruptArchiveError("not a safetensors file: not a regular file", path=path)
        start = f.read(8)
    if len(start) < 8:
        raise CorruptArchiveError(
            f"not a readable safetensors file: {size} bytes, less than its header length's 8",
            path=path,
        )
    declared = int.from_bytes(start, "little")
    if not 0 < declared <= min(size - 8, MAX_SAFETENSORS_HEADER):
        raise CorruptArchiveError(
            f"not a readable safetensors file: a {size}-byte file declaring a header of "
            f"{declared} bytes (at most the file's size and {MAX_SAFETENSORS_HEADER})",
            path=path,
        )


def check_key(key: str) -> None:
    """A safetensors key nests within the limits (``MAX_KEY_CHARS``, ``MAX_KEY_PARTS``).

    Raises:
        UnsupportedFeatureError: over either; the message gives the key's start, its size and
            the limit.
    """
    depth = key.count(KEY_SEPARATOR) + 1
    if depth > MAX_KEY_PARTS:
        raise UnsupportedFeatureError(
            f"key {key[:64]!r}... nests {depth} levels deep (limit {MAX_KEY_PARTS}: a "
            f"parameter tree holds {_limits.MAX_PYTREE_DEPTH} levels with a method's arguments)"
        )
    if len(key) > MAX_KEY_CHARS:
        raise UnsupportedFeatureError(
            f"key {key[:64]!r}... has {len(key)} characters (limit {MAX_KEY_CHARS})"
        )


def nest_keys(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b.c": x}`` as ``{"a": {"b": {"c": x}}}``: each key split at every ``"."``.

    Every level is a dict with string keys, numbers included (``"layers.0.w"`` gives
    ``{"layers": {"0": {"w": ...}}}``, not a list); empty levels (``"a..b"``) are kept as ``""``.

    Raises:
        UnsupportedFeatureError: a key that is also a level of another (``"a"`` and ``"a.b"``:
            ``"a"`` cannot be both a tensor and a dict), the message naming both keys; a key
            over the limits of ``check_key``.
    """
    for key in flat:
        check_key(key)
    root: dict[str, Any] = {}
    for key in sorted(flat):  # sorted: "a" comes before every "a.<...>"
        node, parts = root, key.split(KEY_SEPARATOR)
        for i, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise _conflict(KEY_SEPARATOR.join(parts[: i + 1]), key)
        node[parts[-1]] = flat[key]
    return root


def _conflict(tensor_key: str, nested_key: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"keys {tensor_key!r} and {nested_key!r} conflict: {tensor_key!r} would be both a "
        "tensor and a level of nested keys"
    )


def params_from_orbax(
    directory: str | os.PathLike[str],
    *,
    step: int | None = None,
    item: str | None = None,
    subtree: str | Sequence[str] | Mapping[str, str] | None = None,
) -> Any:
    """The parameter pytree of an Orbax checkpoint.

    ``directory`` is either one given to ``save`` (``PyTreeCheckpointer``,
    ``StandardCheckpointer``: it holds ``_METADATA``), or a ``CheckpointManager``'s: its step
    directories (``<root>/<step>/<item>/``; ``_orbax_layout.item_directory`` picks ``step``,
    by default the newest, and ``item``, by default the only one or ``default``).

    Then the parameters are chosen in the restored tree (``_orbax_layout.select_params``): the
    ``subtree`` named (``"params"``, ``"state/params"``; ``""`` for the whole tree; several as
    a list, ``["params", "batch_stats"]`` giving ``{"params": ..., "batch_stats": ...}``, or a
    dict ``{key: path}``), else the
    ``params`` entry of a train state (``{"step", "params", "opt_state"}``); a tree that holds
    an optimizer state (``opt_state``, ``optimizer``) but no ``params`` is refused, never
    stored as weights.

    Arrays are restored as numpy arrays on the host (``RestoreArgs(restore_type=np.ndarray)``,
    whatever their sharding when saved), with their shapes and dtypes; scalars as 0-d numpy
    arrays; other leaves (strings) as Orbax restores them, which ``jaxport.Model`` refuses.

    Raises:
        InvalidArgumentError: an argument of another type (checked first).
        UnsupportedFeatureError: the ``orbax-checkpoint`` package is not installed; a train
            state without ``params`` (the message lists its keys: pass ``subtree``).
        CorruptArchiveError: ``directory`` is not a checkpoint Orbax can restore.
        FileNotFoundError: ``directory`` does not exist, or holds no such ``step``, ``item``
            or ``subtree`` (the message lists those there are).
    """
    from jaxport.export import _orbax_layout

    _orbax_layout.check_arguments(directory, step, item)
    chosen = _orbax_layout.subtrees(subtree)
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise _missing("orbax-checkpoint", "orbax") from None
    if not os.path.exists(directory):
        raise FileNotFoundError(f"no Orbax checkpoint at {os.fspath(directory)!r}")
    from jax import tree_util

    # absolute: Orbax finds no item metadata under a relative path (orbax-checkpoint 0.12)
    where = _orbax_layout.item_directory(Path(directory).absolute(), step=step, item=item)
    _check_orbax_metadata(where)
    checkpointer = ocp.PyTreeCheckpointer()
    try:
        metadata = checkpointer.metadata(where)
        tree = getattr(getattr(metadata, "item_metadata", metadata), "tree", metadata)
        # None: an empty node as Orbax records it (optax's EmptyState), restored as stored
        restore_args = tree_util.tree_map(_restore_args, tree, is_leaf=lambda x: x is None)
        restored = checkpointer.restore(where, restore_args=restore_args)
    except (ValueError, OSError, KeyError, TypeError, RecursionError) as e:
        # RecursionError: a tree nested deeper than the checks above saw (their bound is the
        # one Orbax writes; this is the net for what Orbax may read besides).
        message = f"not a restorable Orbax checkpoint: {type(e).__name__}: {e}"
        raise CorruptArchiveError(message, path=os.fspath(where)) from None
    params = _orbax_layout.select_params(restored, chosen, where)
    return tree_util.tree_map(_host_leaf, params)


#: Bytes of an Orbax checkpoint's tree metadata file (``_METADATA``) that are read.
MAX_ORBAX_METADATA = 64 * 2**20
#: How deep the JSON of Orbax's metadata may nest (``[`` and ``{``): its tree metadata is
#: flat (each entry lists its key path), so this is the parameter tree's bound again.
MAX_JSON_NESTING = _limits.MAX_PYTREE_DEPTH


def _check_orbax_metadata(directory: Path) -> None:
    """Bounds what Orbax walks recursively, before it does: its tree metadata (``_METADATA``,
    JSON) within ``MAX_ORBAX_METADATA`` bytes and ``MAX_JSON_NESTING`` levels, and each key
    path (``key_metadata``) within ``MAX_KEY_PARTS`` parts. A missing file is left to Orbax.

    Raises:
        CorruptArchiveError: a file over the size or nesting bound, or not JSON.
        UnsupportedFeatureError: a key path deeper than ``MAX_KEY_PARTS``.
    """
    path = directory / "_METADATA"  # orbax.checkpoint's PYTREE_METADATA_FILE
    if not path.is_file():
        return
    if path.stat().st_size > MAX_ORBAX_METADATA:
        raise CorruptArchiveError(
            f"an Orbax tree metadata file over {MAX_ORBAX_METADATA} bytes", path=str(path)
        )
    text = path.read_bytes()
    metadata = _bounded_json(text, str(path))
    entries = metadata.get("tree_metadata") if isinstance(metadata, dict) else None
    for key, entry in (entries or {}).items() if isinstance(entries, dict) else ():
        parts = entry.get("key_metadata") if isinstance(entry, dict) else None
        if isinstance(parts, list) and len(parts) > MAX_KEY_PARTS:
            raise UnsupportedFeatureError(
                f"Orbax key path {key[:64]!r}... nests {len(parts)} levels deep (limit "
                f"{MAX_KEY_PARTS}: a parameter tree holds {_limits.MAX_PYTREE_DEPTH} levels "
                "with a method's arguments)"
            )
    rich = metadata.get("value_metadata_tree") if isinstance(metadata, dict) else None
    if isinstance(rich, str):  # a JSON document in a string, which Orbax parses too
        _bounded_json(rich.encode(), str(path))


#: A JSON string (escapes included), which may hold brackets that do not nest.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _bounded_json(text: bytes, where: str) -> Any:
    """``json.loads(text)``, once its nesting (counted without recursion) is within
    ``MAX_JSON_NESTING``.

    Raises:
        CorruptArchiveError: deeper, or not JSON.
    """
    brackets = np.frombuffer(_JSON_STRING.sub(b"", text), np.uint8)
    steps = np.isin(brackets, (ord("["), ord("{"))).astype(np.int64)
    steps -= np.isin(brackets, (ord("]"), ord("}")))
    depth = int(np.cumsum(steps).max(initial=0))
    if depth > MAX_JSON_NESTING:
        raise CorruptArchiveError(
            f"JSON nested {depth} levels deep (limit {MAX_JSON_NESTING})", path=where
        )
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CorruptArchiveError(f"not JSON: {e}", path=where) from None


def _restore_args(leaf_metadata: Any) -> Any:
    import orbax.checkpoint as ocp

    if isinstance(leaf_metadata, ocp.metadata.ArrayMetadata):
        return ocp.RestoreArgs(restore_type=np.ndarray)
    return ocp.RestoreArgs()


def _host_leaf(leaf: Any) -> Any:
    if isinstance(leaf, int | float | complex | np.generic):
        return np.asarray(leaf)
    return leaf


def _missing(package: str, extra: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"this needs the {package!r} package, which is not installed: pip install jaxport[{extra}]"
    )
