"""Golden archives of every released format version still load and run.

They are made by tests/golden/make_golden.py (its docstring says when and how).
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import jaxport

GOLDEN = Path(__file__).with_name("golden")


def test_golden_v1_is_read():
    path = GOLDEN / "v1_poly_vjp1.jaxport"
    info = jaxport.inspect(path)
    assert info.format_version == 1
    assert info.metadata == {"golden": "v1"}
    assert info.platforms == ("cpu", "cuda", "tpu")
    assert info.symbolic_constraints == ("b >= 1",)
    assert [a.shape for a in info.in_avals] == [("b", 4), (4, 3)]
    assert info.vjp_order == 1

    exp = jaxport.load(path)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = exp.call(x, y)
    np.testing.assert_allclose(out["out"], np.sin(x) @ y, rtol=1e-5)
    np.testing.assert_allclose(out["sum"], x.sum(), atol=1e-5)
    grad = jax.grad(lambda x: exp.call(x, y)["out"].sum())(x)
    np.testing.assert_allclose(grad, np.cos(x) * y.sum(axis=1), rtol=1e-5)


def test_golden_v2_model_is_read():
    import sys

    sys.path.insert(0, str(GOLDEN))
    from make_golden import golden_params

    path = GOLDEN / "v2_model_two_methods.jaxport"
    info = jaxport.inspect(path)
    assert (info.format_version, info.kind, info.metadata) == (2, "model", {"golden": "v2"})
    assert [(m.name, m.vjp_order) for m in info.methods] == [("embed", 0), ("logits", 1)]
    assert [(t.path, t.dtype) for t in info.tensors] == [
        ("['dense']['b']", "bfloat16"),
        ("['dense']['w']", "float32"),
        ("['emb']", "int8"),
        ("['scale']", "float32"),
    ]
    model = jaxport.load_model(path)
    params = golden_params()
    jax.tree.map(np.testing.assert_array_equal, model.params, params)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    expected = (np.tanh(x @ params["dense"]["w"]) + np.arange(3)) * 0.5
    np.testing.assert_allclose(model.logits(x), expected, rtol=1e-5)
    np.testing.assert_allclose(model.embed(np.array([0, 1, 4])), [[-2.5, -2], [-1.5, -1], [1.5, 2]])
    grad = jax.grad(lambda x: model.logits(x).sum())(x)
    assert grad.shape == x.shape


def test_golden_v3_model_with_a_compressed_tensor_is_read():
    import sys

    sys.path.insert(0, str(GOLDEN))
    from make_golden import golden_table

    path = GOLDEN / "v3_model_compressed.jaxport"
    info = jaxport.inspect(path)
    assert (info.format_version, info.kind, info.metadata) == (3, "model", {"golden": "v3"})
    compression = {t.path: info.sections[t.section].compression for t in info.tensors}
    assert compression == {"['offset']": "none", "['table']": "zstd"}
    model = jaxport.load_model(path)
    np.testing.assert_array_equal(model.tensor("['table']"), golden_table())
    np.testing.assert_array_equal(model.lookup(np.array([0, 5, 63], np.int32)), [7, 12, 70])


def test_golden_v4_function_with_two_vjp_levels_is_read():
    path = GOLDEN / "v4_poly_vjp2.jaxport"
    info = jaxport.inspect(path)
    assert (info.format_version, info.kind, info.metadata) == (4, "function", {"golden": "v4"})
    assert info.vjp_order == 2
    sections = info.sections  # one a level: module k is the whole of section k
    assert [m.length for m in info.modules] == [s.uncompressed_length for s in sections]
    assert [s.compression for s in sections] == ["zstd", "zstd", "zstd"]
    assert all(s.offset % 64 == 0 for s in sections)
    exp = jaxport.load(path)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(exp.call(x, y)["out"], np.sin(x) @ y, rtol=1e-5)
    grad = jax.grad(lambda x: exp.call(x, y)["out"].sum())
    np.testing.assert_allclose(grad(x), np.cos(x) * y.sum(axis=1), rtol=1e-5)
    second = jax.grad(lambda x: grad(x).sum())(x)  # reads the VJP of order 2
    np.testing.assert_allclose(second, -np.sin(x) * y.sum(axis=1), rtol=1e-4, atol=1e-5)


def test_every_released_version_has_a_golden_archive():
    versions = range(jaxport.MIN_SUPPORTED_FORMAT_VERSION, jaxport.MAX_SUPPORTED_FORMAT_VERSION + 1)
    for v in versions:
        if not list(GOLDEN.glob(f"v{v}_*.jaxport")):
            pytest.fail(f"no golden archive for format version {v}")
