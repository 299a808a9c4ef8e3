"""Where the parameters are in an Orbax checkpoint: its directory layout and its tree.

Layouts (orbax-checkpoint 0.6 onwards): a directory given to ``PyTreeCheckpointer.save`` or
``StandardCheckpointer.save`` holds the item itself (its ``_METADATA`` file); a
``CheckpointManager`` root holds one directory per step (named by the step number, possibly
after a prefix and ``_``), each holding one directory per item (``default`` for a single
unnamed item, else the ``item_names`` given, e.g. ``state``). Directories Orbax is still
writing (``*.orbax-checkpoint-tmp-*``) are not steps.

Trees: a train state's (``{"step", "params", "opt_state"}``, flax's ``TrainState``) holds
optimizer moments of the same shapes as the parameters; only its ``params`` are weights.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jaxport import CorruptArchiveError, InvalidArgumentError, UnsupportedFeatureError

__all__ = ["OPTIMIZER_KEYS", "check_arguments", "item_directory", "select_params", "subtrees"]

#: Top-level keys of a tree that mark an optimizer state (optax's, a flax TrainState's, an
#: NNX ``Optimizer``'s).
OPTIMIZER_KEYS = frozenset({"opt_state", "optimizer", "opt", "optimizer_state"})

_METADATA = "_METADATA"
_STEP = re.compile(r"(?:.*_)?(\d+)")
_TMP = ".orbax-checkpoint-tmp"


def item_directory(root: Path, *, step: int | None, item: str | None) -> Path:
    """The directory of the item to restore under ``root``.

    Raises:
        FileNotFoundError: no such step or item (the message lists those there are).
        CorruptArchiveError: neither a checkpoint nor a directory of steps.
    """
    if (root / _METADATA).is_file():
        if step is not None or item is not None:
            raise FileNotFoundError(
                f"{root} is a single checkpoint (no steps or items): drop step= and item="
            )
        return root
    if _items(root) and step is None:  # a step directory given directly
        return _item(root, item)
    steps = _steps(root)
    if not steps:
        raise CorruptArchiveError(
            f"not an Orbax checkpoint: no {_METADATA}, no step directories", path=str(root)
        )
    chosen = max(steps) if step is None else step
    if chosen not in steps:
        raise FileNotFoundError(f"{root} has no step {chosen}; its steps: {sorted(steps)}")
    return _item(steps[chosen], item)


def _steps(root: Path) -> dict[int, Path]:
    steps: dict[int, Path] = {}
    for child in root.iterdir() if root.is_dir() else ():
        match = _STEP.fullmatch(child.name)
        if match and child.is_dir() and _TMP not in child.name:
            steps[int(match.group(1))] = child
    return steps


def _items(step_dir: Path) -> list[str]:
    if not step_dir.is_dir():
        return []
    return sorted(c.name for c in step_dir.iterdir() if (c / _METADATA).is_file())


def _item(step_dir: Path, item: str | None) -> Path:
    items = _items(step_dir)
    if item is None:
        if len(items) == 1:
            return step_dir / items[0]
        if "default" in items:
            return step_dir / "default"
        raise FileNotFoundError(
            f"{step_dir} holds the items {items or 'none'}: pass item= to choose one"
        )
    if item not in items:
        raise FileNotFoundError(f"{step_dir} has no item {item!r}; its items: {items}")
    return step_dir / item


def subtrees(subtree: Any) -> str | dict[str, str] | None:
    """``subtree`` as ``select_params`` takes it: None, one path, or ``{key: path}`` for
    several (a sequence of paths is keyed by the paths themselves: ``["params",
    "batch_stats"]`` gives flax's variables ``{"params": ..., "batch_stats": ...}``).

    Raises:
        InvalidArgumentError: not a str, a sequence of str or a mapping of str to str; an
            empty or repeated one.
    """
    if subtree is None or isinstance(subtree, str):
        return subtree
    if isinstance(subtree, Mapping):
        pairs = list(subtree.items())
    elif isinstance(subtree, list | tuple):
        pairs = [(path, path) for path in subtree]
    else:
        pairs = []
    if not pairs or any(not isinstance(x, str) for pair in pairs for x in pair):
        raise InvalidArgumentError(
            f"subtree takes a path (str, e.g. 'params'), a list of paths (['params', "
            f"'batch_stats']) or a dict of key to path, not {_shown(subtree)}"
        )
    if len({k for k, _ in pairs}) != len(pairs):
        raise InvalidArgumentError(f"subtree names a key twice: {_shown(subtree)}")
    return dict(pairs)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def select_params(tree: Any, subtree: str | Mapping[str, str] | None, where: Path) -> Any:
    """The parameters in a restored ``tree``: the ``subtree`` named (``"a/b"``: key ``b`` of
    key ``a``; ``""``: all of it; ``{key: path}``: a dict of several, e.g. ``params`` and
    ``batch_stats``), else a train state's ``params``.

    Raises:
        FileNotFoundError: no such subtree (the message lists the keys there are).
        UnsupportedFeatureError: an optimizer state without ``params``.
    """
    if isinstance(subtree, Mapping):
        return {key: select_params(tree, path, where) for key, path in subtree.items()}
    if subtree is not None:
        node = tree
        for key in (k for k in subtree.split("/") if k):
            node = _child(node, key, subtree, where)
        return node
    if not isinstance(tree, dict):
        return tree
    if "params" in tree and len(tree) > 1:
        return tree["params"]
    optimizer = sorted(OPTIMIZER_KEYS & set(tree))
    if optimizer:
        raise UnsupportedFeatureError(
            f"{where} holds an optimizer state ({', '.join(optimizer)}) and no 'params': its "
            f"moments are not weights; pass subtree= naming the parameters (keys: "
            f"{sorted(map(str, tree))}), or subtree='' for the whole tree"
        )
    return tree


def _child(node: Any, key: str, subtree: str, where: Path) -> Any:
    """Entry ``key`` of a dict, or item ``int(key)`` of a list or tuple."""
    if isinstance(node, dict) and key in node:
        return node[key]
    if isinstance(node, list | tuple) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    keys = sorted(map(str, node)) if isinstance(node, dict) else []
    if isinstance(node, list | tuple):
        keys = [str(i) for i in range(len(node))]
    raise FileNotFoundError(f"{where}: no subtree {subtree!r} (at {key!r}; keys there: {keys})")


def check_arguments(directory: Any, step: Any, item: Any) -> None:
    """The types ``from_orbax`` takes for its checkpoint arguments.

    Raises:
        InvalidArgumentError: ``directory`` is not a str or path, ``step`` not an int (or
            None), ``item`` not a str (or None).
    """
    if not isinstance(directory, str | os.PathLike):
        raise InvalidArgumentError(
            f"directory takes a path (str or os.PathLike), not {_shown(directory)}"
        )
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise InvalidArgumentError(f"step takes an int (a step number), not {_shown(step)}")
    if item is not None and not isinstance(item, str):
        raise InvalidArgumentError(f"item takes a str (an item's name), not {_shown(item)}")
