"""Element types: ``jaxport.fb.DType`` <-> numpy / jax dtypes.

Every dtype jax supports has an enum value (schema/jaxport.fbs, ``enum DType``); typed PRNG keys
are ``prng_key`` plus the implementation's name. A dtype the running jax does not define (say
``float6_e2m3fn`` read by an older jax) is an ``UnsupportedFeatureError`` on read.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from jaxport import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export._jax import dtypes as jax_dtypes
from jaxport.schema import fb

__all__ = ["decode_dtype", "dtype_name", "encode_dtype", "numpy_dtype"]

# enum value -> numpy dtype name; float0 and prng_key are handled apart.
_NAME_OF_ENUM: dict[int, str] = {
    value: ("bool" if name == "bool_" else name)
    for name, value in vars(fb.DType).items()
    if not name.startswith("_") and name not in ("Missing", "float0", "prng_key")
}
_ENUM_OF_NAME = {name: value for value, name in _NAME_OF_ENUM.items()}


def _is_prng_key(dtype: Any) -> bool:
    return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def encode_dtype(dtype: Any) -> tuple[int, str | None]:
    """``(fb.DType value, prng implementation name or None)`` of an aval dtype.

    Raises:
        UnsupportedFeatureError: a dtype with no enum value (an extended dtype other than a key).
    """
    if _is_prng_key(dtype):
        return fb.DType.prng_key, str(dtype._impl.name)
    if dtype == jax_dtypes.float0:
        return fb.DType.float0, None
    value = _ENUM_OF_NAME.get(np.dtype(dtype).name)
    if value is None:
        raise UnsupportedFeatureError(f"dtype {dtype} cannot be stored in a jaxport archive")
    return value, None


def decode_dtype(value: int, prng_impl: str | None) -> Any:
    """The dtype of an ``fb.DType`` value (and PRNG implementation name, for keys).

    Raises:
        CorruptArchiveError: an enum value that no format version defines.
        UnsupportedFeatureError: a dtype or PRNG implementation the running jax does not have.
    """
    if value == fb.DType.prng_key:
        return _prng_key_dtype(prng_impl or "")
    if value == fb.DType.float0:
        return jax_dtypes.float0
    name = _NAME_OF_ENUM.get(value)
    if name is None:
        raise CorruptArchiveError(f"unknown dtype enum value {value}")
    dt = getattr(jax.numpy, name, None)
    if dt is None:
        raise UnsupportedFeatureError(f"dtype {name} is not defined by jax {jax.__version__}")
    return np.dtype(dt)


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype named ``name`` (``"bfloat16"`` and the other ml_dtypes included)."""
    value = _ENUM_OF_NAME.get(name)
    if value is None:
        raise UnsupportedFeatureError(f"dtype {name} cannot be stored in a jaxport archive")
    dtype: np.dtype[Any] = np.dtype(decode_dtype(value, None))
    return dtype


def dtype_name(value: int, prng_impl: str | None) -> str:
    """A dtype's name without importing it: ``"float32"``, ``"key<threefry2x32>"``, ..."""
    if value == fb.DType.prng_key:
        return f"key<{prng_impl}>"
    if value == fb.DType.float0:
        return "float0"
    return _NAME_OF_ENUM.get(value, f"unknown({value})")


@functools.cache
def _prng_key_dtype(impl: str) -> Any:
    try:
        return jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype
    except (ValueError, TypeError, KeyError) as e:
        raise UnsupportedFeatureError(
            f"PRNG implementation {impl!r} is not known to jax {jax.__version__}"
        ) from e
