"""Parameters from other formats: a safetensors file, an Orbax checkpoint.

Both libraries are optional extras (``pip install jaxport[safetensors]``,
``pip install jaxport[orbax]``); without them these functions raise
``UnsupportedFeatureError``, never ``ImportError``. ``jaxport.Model.from_safetensors`` and
``jaxport.Model.from_orbax`` build a model from what they return.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxport._errors import CorruptArchiveError, UnsupportedFeatureError

__all__ = ["nest_keys", "params_from_orbax", "params_from_safetensors"]

#: What separates the levels of a nested key in a safetensors file ("layers.0.kernel").
KEY_SEPARATOR = "."


def params_from_safetensors(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tensors of a safetensors file as nested dicts of numpy arrays (see ``nest_keys``).

    Each tensor keeps its shape and dtype (``bfloat16`` and the other ml_dtypes included); its
    bytes are read into memory. The file's ``__metadata__`` is not returned.

    Raises:
        UnsupportedFeatureError: the ``safetensors`` package is not installed; two keys where
            one is a prefix level of the other (``"a"`` and ``"a.b"``).
        CorruptArchiveError: the file is not a well-formed safetensors file.
        OSError: the file cannot be read.
    """
    try:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file
    except ImportError:
        raise _missing("safetensors", "safetensors") from None
    try:
        flat = load_file(os.fspath(path))
    except SafetensorError as e:
        raise CorruptArchiveError(f"not a readable safetensors file: {e}", path=str(path)) from None
    return nest_keys(flat)


def nest_keys(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b.c": x}`` as ``{"a": {"b": {"c": x}}}``: each key split at every ``"."``.

    Every level is a dict with string keys, numbers included (``"layers.0.w"`` gives
    ``{"layers": {"0": {"w": ...}}}``, not a list); empty levels (``"a..b"``) are kept as ``""``.

    Raises:
        UnsupportedFeatureError: a key that is also a level of another (``"a"`` and ``"a.b"``:
            ``"a"`` cannot be both a tensor and a dict); the message names both keys.
    """
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


def params_from_orbax(directory: str | os.PathLike[str]) -> Any:
    """The pytree of an Orbax checkpoint (``PyTreeCheckpointer``/``StandardCheckpointer``).

    ``directory`` is the one given to ``save``. Arrays are restored as numpy arrays on the host
    (``RestoreArgs(restore_type=np.ndarray)``, whatever their sharding when saved), with their
    shapes and dtypes; scalars as 0-d numpy arrays; other leaves (strings) as Orbax restores them,
    which ``jaxport.Model`` then refuses.

    Raises:
        UnsupportedFeatureError: the ``orbax-checkpoint`` package is not installed.
        CorruptArchiveError: ``directory`` is not a checkpoint Orbax can restore.
        FileNotFoundError: ``directory`` does not exist.
    """
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise _missing("orbax-checkpoint", "orbax") from None
    if not os.path.exists(directory):
        raise FileNotFoundError(f"no Orbax checkpoint at {os.fspath(directory)!r}")
    from jax import tree_util

    checkpointer = ocp.PyTreeCheckpointer()
    try:
        metadata = checkpointer.metadata(directory)
        tree = getattr(getattr(metadata, "item_metadata", metadata), "tree", metadata)
        restore_args = tree_util.tree_map(_restore_args, tree)
        restored = checkpointer.restore(directory, restore_args=restore_args)
    except (ValueError, OSError, KeyError, TypeError) as e:
        message = f"not a restorable Orbax checkpoint: {type(e).__name__}: {e}"
        raise CorruptArchiveError(message, path=os.fspath(directory)) from None
    return tree_util.tree_map(_host_leaf, restored)


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
