"""The registry's results as JSON and back: what the server sends and its client reads.

``to_wire`` turns a result (a frozen dataclass, or lists and dicts of them) into plain JSON
values, field by field, keeping numbers as they are (times stay unix seconds); ``from_wire``
rebuilds the dataclass from its field annotations, so ``from_wire(T, to_wire(x)) == x`` for
every result type of ``Registry`` (``VariantInfo`` with its methods and tensors, ``Ref``,
``PushResult``, ``Resolution``, ``Finding``, ``Event``, ...). Fields declared ``init=False``
(derived ones, such as ``Ref.kind``) are sent and not read back: the constructor derives them.

Nothing is evaluated: a value that does not fit its annotation raises ``CorruptArchiveError``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar, Union

from jaxport import CorruptArchiveError

__all__ = ["from_wire", "to_wire"]

T = TypeVar("T")


def to_wire(value: Any) -> Any:
    """``value`` as plain JSON values (dataclasses as objects of their fields, tuples as lists,
    dict keys as strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(x) for x in value]
    return value


def from_wire(kind: Any, data: Any, *, source: str = "a registry server's answer") -> Any:
    """``data`` (JSON values) read back as ``kind`` (a dataclass, ``list[...]``, ...);
    ``source`` says where it came from, in the error.

    Raises:
        CorruptArchiveError: ``data`` does not fit ``kind`` (the message names the field).
    """
    try:
        return _read(kind, data, "response")
    except (TypeError, ValueError, KeyError) as e:
        shown = getattr(kind, "__name__", kind)
        raise CorruptArchiveError(f"{source} does not fit {shown}: {e}") from None


def _read(kind: Any, data: Any, where: str) -> Any:
    if kind is int or kind is str or kind is bool:  # the most common case first
        _expect(data, kind, where)
        return data
    if kind is Any:
        return data
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _dataclass(kind, data, where)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        return _read(others[0], data, where) if len(others) == 1 else data
    if origin is tuple:
        _expect(data, list, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], x, where) for x in data)
        return tuple(_read(a, x, where) for a, x in zip(args, data, strict=True))
    if origin is list:
        _expect(data, list, where)
        return [_read(args[0], x, where) for x in data]
    if origin is dict:
        _expect(data, dict, where)
        return {k: _read(args[1], v, where) for k, v in data.items()}
    if kind is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise TypeError(f"{where}: expected a number, got {type(data).__name__}")
        return float(data)
    return data


def _dataclass(kind: type[T], data: Any, where: str) -> T:
    _expect(data, dict, where)
    values = {}
    for name, hint, field_where in _fields(kind):  # type: ignore[arg-type]
        if name in data:
            values[name] = _read(hint, data[name], field_where)
    return kind(**values)


@functools.cache
def _fields(kind: type) -> tuple[tuple[str, Any, str], ...]:
    """``(name, annotation, where)`` of each field the constructor takes (read once a kind:
    a commit may hold a million parts)."""
    hints = _hints(kind)
    return tuple(
        (f.name, hints[f.name], f"{kind.__name__}.{f.name}")
        for f in dataclasses.fields(kind)
        if f.init
    )


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    from jaxport.export import AvalInfo, MethodInfo, ModuleInfo, SectionInfo, TensorInfo
    from jaxport.registry._types import VariantInfo

    local = {
        "AvalInfo": AvalInfo, "MethodInfo": MethodInfo, "ModuleInfo": ModuleInfo,
        "SectionInfo": SectionInfo, "TensorInfo": TensorInfo, "VariantInfo": VariantInfo,
    }  # fmt: skip
    return typing.get_type_hints(kind, localns=local)


def _expect(data: Any, kind: type, where: str) -> None:
    if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
        raise TypeError(f"{where}: expected {kind.__name__}, got {type(data).__name__}")
