"""Reading an Exported from a file given to ``jaxport push``: recognised by content."""

from __future__ import annotations

from typing import Any

from jaxport._errors import CorruptArchiveError, JaxportError
from jaxport.export._container import MAGIC

__all__ = ["read_exported"]

_MAX_VJP_ORDER = 8


def read_exported(path: Any, data: bytes) -> tuple[Any, int]:
    """``(Exported, vjp orders it carries)`` from a jaxport archive or jax-native bytes.

    jax-native bytes (``Exported.serialize()``) are jax's FlatBuffer; jax documents them as
    trusted input, so anything jax fails on is reported as not an archive.

    Raises:
        CorruptArchiveError: neither a jaxport archive nor jax-native serialized bytes.
    """
    from jaxport import inspect, loads

    if data.startswith(MAGIC):
        return loads(data, path=str(path)), inspect(data).vjp_order
    import jax

    try:
        exp = jax.export.deserialize(bytearray(data))
        order, current = 0, exp
        while order < _MAX_VJP_ORDER and current.has_vjp():
            current, order = current.vjp(), order + 1
    except JaxportError:
        raise
    except Exception as e:  # jax's reader raises anything on bytes that are not its format
        raise CorruptArchiveError(
            f"neither a jaxport archive nor jax-native serialized Exported ({type(e).__name__})",
            path=str(path),
        ) from None
    return exp, order
