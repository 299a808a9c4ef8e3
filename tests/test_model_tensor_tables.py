"""A model's tensor tables as ``decode_tensor`` reads them straight from their vtables (issue
27: the first tensor of a mapped model): the same values the generated readers give, the same
refusals, and a loaded model's tensor paths as the parameter tree gives them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import flatbuffers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport import CorruptArchiveError
from jaxport.export import _fb, _limits, _tensors
from jaxport.schema import fb

DIGEST = bytes(range(32))


def _table(
    *,
    shape: tuple[int, ...] | None = (2, 3),
    dtype: int | None = fb.DType.float32,
    byte_order: int | None = fb.ByteOrder.little,
    section: int | None = 1,
    sha256: bytes | None = DIGEST,
    path: str | None = "['w']",
) -> fb.Tensor:
    builder = flatbuffers.Builder(256)
    path_at = builder.CreateString(path) if path is not None else None
    shape_at = _fb.int64_vector(builder, shape) if shape is not None else None
    digest_at = _fb.bytes_vector(builder, sha256) if sha256 is not None else None
    fb.TensorStart(builder)
    if path_at is not None:
        fb.TensorAddPath(builder, path_at)
    if shape_at is not None:
        fb.TensorAddShape(builder, shape_at)
    if dtype is not None:
        fb.TensorAddDtype(builder, dtype)
    if byte_order is not None:
        fb.TensorAddByteOrder(builder, byte_order)
    if section is not None:
        fb.TensorAddSection(builder, section)
    if digest_at is not None:
        fb.TensorAddSha256(builder, digest_at)
    builder.Finish(fb.TensorEnd(builder))
    return fb.Tensor.GetRootAs(bytes(builder.Output()), 0)


def _sections(nbytes: int) -> list[Any]:
    return [SimpleNamespace(uncompressed_length=0), SimpleNamespace(uncompressed_length=nbytes)]


def _decode(table: fb.Tensor, sections: list[Any]) -> _tensors.TensorInfo:
    with _fb.translating_read_errors(None), _limits.header_budget(1 << 20):
        return _tensors.decode_tensor(table, 0, sections)


@pytest.mark.parametrize(
    ("shape", "dtype", "nbytes"),
    [((2, 3), fb.DType.float32, 24), ((), fb.DType.int8, 1), ((4, 0), fb.DType.bfloat16, 0)],
)
def test_a_tensor_table_reads_as_the_generated_readers_read_it(
    shape: tuple[int, ...], dtype: int, nbytes: int
) -> None:
    table = _table(shape=shape, dtype=dtype)
    info = _decode(table, _sections(nbytes))
    assert info.shape == shape == tuple(_fb.read_ints(table, "Shape"))
    assert info.dtype == np.dtype(_tensors._dtypes.decode_dtype(table.Dtype(), None)).name
    assert info.sha256 == bytes(table.Sha256AsNumpy()).hex() == DIGEST.hex()
    assert (info.section, info.nbytes, info.path) == (table.Section(), nbytes, "['w']")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"shape": (2, -3)}, "not a valid static shape"),
        ({"shape": (1,) * 65}, "not a valid static shape"),
        ({"byte_order": None}, "unknown byte order 0"),
        ({"byte_order": 2}, "unknown byte order 2"),
        ({"dtype": fb.DType.prng_key}, "not a tensor dtype"),
        ({"dtype": fb.DType.float0}, "not a tensor dtype"),
        ({"dtype": 250}, "unknown dtype enum value 250"),
        ({"sha256": None}, "no sha256 digest"),
        ({"sha256": DIGEST[:31]}, "no sha256 digest"),
        ({"section": 7}, "section 7 does not exist"),
        ({"shape": (2, 4)}, "32 bytes for shape (2, 4) float32, its section holds 24"),
    ],
)
def test_a_bad_tensor_table_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(CorruptArchiveError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _decode(_table(**fields), _sections(24))


def test_a_shape_vector_past_the_buffer_is_a_corrupt_archive() -> None:
    table = _table(shape=(2, 3))
    data = bytearray(table._tab.Bytes)
    start = table._tab.Vector(table._tab.Offset(6))
    data[start - 4 : start] = (len(data) // 8 - 1).to_bytes(4, "little")  # a length too long
    with pytest.raises(CorruptArchiveError):
        _decode(fb.Tensor.GetRootAs(bytes(data), 0), _sections(24))


def test_a_loaded_model_names_its_tensors_as_the_parameter_tree_does(tmp_path: Path) -> None:
    params = {"b": {"x": np.ones(3, np.float32)}, "a": [np.zeros((2, 2), np.float32)]}
    model = jaxport.Model(
        params,
        lambda p, v: v + p["b"]["x"] + p["a"][0].sum(),
        [jax.ShapeDtypeStruct((3,), jnp.float32)],
    )
    model.save(tmp_path / "m.jaxport")
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    paths = [t.path for t in loaded.tensors]
    assert paths == [t.path for t in model.tensors] == ["['a'][0]", "['b']['x']"]
    assert loaded.tensors == model.tensors  # shapes, dtypes, sizes, digests too
    np.testing.assert_array_equal(loaded.tensor("['b']['x']"), params["b"]["x"])
    with pytest.raises(KeyError):
        loaded.tensor("['c']")
