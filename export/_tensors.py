"""Parameter tensors: host arrays <-> ``jaxport.fb.Tensor`` records and their bytes.

A tensor is stored as its elements in C order, little-endian, as numpy lays them out (one byte
per element for the sub-byte types of ml_dtypes, such as int4), with the sha256 of those bytes.
Reading checks the digest before an array is made over the bytes, which are not copied: an
array read from a memory-mapped file is a read-only view of the map.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from typing import Any

import flatbuffers
import numpy as np

from jaxport import CorruptArchiveError, IntegrityError, UnsupportedFeatureError
from jaxport.export import _dtypes, _fb, _limits
from jaxport.export._dtypes import numpy_dtype
from jaxport.export._hashing import THREADS, Sha256Jobs
from jaxport.export._info_types import TensorInfo
from jaxport.schema import fb

__all__ = [
    "THREADS",
    "TensorInfo",
    "array_from_bytes",
    "decode_tensor",
    "digest_jobs",
    "encode_tensor",
    "host_array",
    "numpy_dtype",
    "tensor_bytes",
    "tensor_digests",
]


def host_array(leaf: Any, path: str) -> np.ndarray[Any, Any]:
    """``leaf`` (a numpy or jax array, or a scalar) as a C-ordered little-endian host array.

    A sharded ``jax.Array`` is gathered. The dtype is jax's canonical one, what a method
    receives (``float64`` becomes ``float32`` unless ``jax_enable_x64`` is set). Raises:
        UnsupportedFeatureError: a typed PRNG key or ``float0`` (store ``jax.random.key_data``),
            or a leaf that is not an array.
    """
    import jax

    if isinstance(leaf, jax.Array):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            raise UnsupportedFeatureError(
                f"parameter {path} is a typed PRNG key: store jax.random.key_data(key) "
                "instead; an NNX model's RNG state (Dropout's key) is not a parameter: split "
                "it off with nnx.split(model, nnx.Param, nnx.BatchStat, ...) and store the "
                "first two (README: Models from Flax, Equinox, optax and transformers)"
            )
        leaf = np.asarray(jax.device_get(leaf))
    elif not isinstance(leaf, np.ndarray | np.generic | int | float | complex | bool):
        raise UnsupportedFeatureError(f"parameter {path} is a {type(leaf).__name__}, not an array")
    array = np.asarray(leaf, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(array.dtype))  # float64 -> float32
    if array.dtype != canonical or array.dtype.byteorder == ">":
        array = array.astype(canonical.newbyteorder("<"))
    _dtypes.encode_dtype(array.dtype)  # refuses what no archive can hold
    return array


def tensor_bytes(array: np.ndarray[Any, Any]) -> memoryview:
    """The bytes of a ``host_array`` result, without a copy."""
    flat: Any = array.reshape(-1).view(np.uint8)  # numpy's stubs do not say it is a Buffer
    return memoryview(flat)


def tensor_digests(datas: Sequence[memoryview], known: Sequence[str | None] = ()) -> list[bytes]:
    """The sha256 of each of ``datas``, hashed in threads, largest first; ``known[i]`` (hex),
    where given, is taken for ``datas[i]`` without hashing it."""
    return digest_jobs(datas, known).digests(THREADS)


def digest_jobs(datas: Sequence[memoryview], known: Sequence[str | None] = ()) -> Sha256Jobs:
    """``tensor_digests`` as jobs not started yet (``_hashing.Sha256Jobs``)."""
    return Sha256Jobs(datas, [bytes.fromhex(k) if k else None for k in known])


def encode_tensor(builder: flatbuffers.Builder, info: TensorInfo) -> int:
    """An ``fb.Tensor``."""
    path = builder.CreateString(info.path)
    shape = _fb.int64_vector(builder, info.shape)
    digest = _fb.bytes_vector(builder, bytes.fromhex(info.sha256))
    dtype, _ = _dtypes.encode_dtype(np.dtype(numpy_dtype(info.dtype)))
    fb.TensorStart(builder)
    fb.TensorAddPath(builder, path)
    fb.TensorAddShape(builder, shape)
    fb.TensorAddDtype(builder, dtype)
    fb.TensorAddByteOrder(builder, fb.ByteOrder.little)
    fb.TensorAddSection(builder, info.section)
    fb.TensorAddSha256(builder, digest)
    return int(fb.TensorEnd(builder))


def decode_tensor(table: fb.Tensor, index: int, sections: Sequence[Any]) -> TensorInfo:
    """The ``TensorInfo`` of tensor ``index``, checked against its section.

    Raises:
        CorruptArchiveError: a negative or oversized dimension, an unknown dtype or byte order,
            no such section, a digest that is not 32 bytes, or a section whose size is not the
            tensor's.
        UnsupportedFeatureError: a dtype the running jax does not define.
    """
    where = f"tensor {index}"
    # The fields read straight from the table's vtable, read once (``_fb.field_offsets``; a
    # model has a table per tensor, and each generated accessor costs a microsecond or more):
    # the values the generated readers give, lengths checked and charged as ``_fb`` does.
    tab = table._tab
    buf, pos = tab.Bytes, tab.Pos
    path_at, shape_at, dtype_at, order_at, section_at, sha_at = _fb.field_offsets(table, 6)
    shape: tuple[int, ...] = ()
    if shape_at:
        start, n = _vector(buf, pos + shape_at)
        shape = struct.unpack_from(f"<{_fb.count(n, table, 8)}q", buf, start)
    if len(shape) > _limits.MAX_RANK or any(not 0 <= d < 2**62 for d in shape):
        raise CorruptArchiveError(f"{where}: shape {shape[:8]} is not a valid static shape")
    byte_order = _fb.read_uint8(table, order_at)
    if byte_order != fb.ByteOrder.little:
        raise CorruptArchiveError(f"{where}: unknown byte order {byte_order}")
    dtype_enum = _fb.read_uint8(table, dtype_at)
    if dtype_enum in (fb.DType.prng_key, fb.DType.float0):
        raise CorruptArchiveError(f"{where}: dtype {dtype_enum} is not a tensor dtype")
    dtype = np.dtype(_dtypes.decode_dtype(dtype_enum, None))
    digest = b""
    if sha_at:
        start, n = _vector(buf, pos + sha_at)
        digest = bytes(buf[start : start + _fb.count(n, table, 1)])
    if len(digest) != 32:
        raise CorruptArchiveError(f"{where}: no sha256 digest")
    section: int = _UINT32.unpack_from(buf, pos + section_at)[0] if section_at else 0
    if section >= len(sections):
        raise CorruptArchiveError(f"{where}: section {section} does not exist")
    nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if sections[section].uncompressed_length != nbytes:
        raise CorruptArchiveError(
            f"{where}: {nbytes} bytes for shape {shape} {dtype.name}, its section holds "
            f"{sections[section].uncompressed_length}"
        )
    path = ""
    if path_at:
        start, n = _vector(buf, pos + path_at)  # a string: a vector of bytes
        path = _fb.read_str(bytes(buf[start : start + n]))
    return TensorInfo(path, shape, dtype.name, nbytes, digest.hex(), section)


_UINT32 = struct.Struct("<I")


def _vector(buf: bytes, at: int) -> tuple[int, int]:
    """Where the vector (or string) whose offset lies at ``at`` starts, and its length, as
    the generated readers' ``Vector`` / ``VectorLen`` / ``String`` read them. Raises:
    struct.error (a read outside the buffer)."""
    start = at + _UINT32.unpack_from(buf, at)[0] + 4
    return start, _UINT32.unpack_from(buf, start - 4)[0]


def array_from_bytes(
    info: TensorInfo, data: bytes | memoryview, *, path: str | None = None
) -> np.ndarray[Any, Any]:
    """The array over ``data`` (no copy), once ``data`` matches the tensor's digest.

    Raises:
        IntegrityError: the bytes do not match the digest (or the size).
    """
    found = hashlib.sha256(data).hexdigest()
    if len(data) != info.nbytes or found != info.sha256:
        raise IntegrityError(
            f"parameter {info.path} digest mismatch",
            expected=info.sha256,
            found=found,
            path=path,
        )
    # Over a read-only view: the array's WRITEABLE flag cannot be set back (a bytearray is
    # writable), so nothing writes to verified bytes through it.
    readonly = memoryview(data).toreadonly()
    return np.frombuffer(readonly, dtype=np.dtype(numpy_dtype(info.dtype))).reshape(info.shape)
