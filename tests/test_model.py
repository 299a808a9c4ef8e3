"""Model archives: jaxport.Model, load_model / loads_model, update_params, lazy verified reads."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.export import _container

F32 = jnp.float32


def transformer_params(d: int = 16, vocab: int = 32, layers: int = 2) -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def dense(i: int, o: int) -> dict[str, np.ndarray]:
        return {
            "w": rng.normal(size=(i, o)).astype(np.float32) / np.sqrt(i),
            "b": np.zeros(o, np.float32),
        }

    return {
        "embed": rng.normal(size=(vocab, d)).astype(np.float32),
        "layers": [
            {"attn": dense(d, 3 * d), "out": dense(d, d), "mlp": dense(d, d)} for _ in range(layers)
        ],
        "final": {"scale": np.ones(d, np.float32)},
    }


def embed(p: Any, tokens: jax.Array) -> jax.Array:
    return p["embed"][tokens]


def logits(p: Any, tokens: jax.Array) -> jax.Array:
    x = embed(p, tokens)
    for layer in p["layers"]:
        q, k, v = jnp.split(x @ layer["attn"]["w"] + layer["attn"]["b"], 3, axis=-1)
        att = jax.nn.softmax(q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]), axis=-1)
        x = x + (att @ v) @ layer["out"]["w"] + layer["out"]["b"]
        x = x + jax.nn.gelu(x @ layer["mlp"]["w"] + layer["mlp"]["b"])
    return (x * p["final"]["scale"]) @ p["embed"].T


TOKENS = jax.ShapeDtypeStruct((2, 8), jnp.int32)


@pytest.fixture(scope="module")
def model() -> jaxport.Model:
    return jaxport.Model(
        transformer_params(),
        {"logits": logits, "embed": embed},
        {"logits": [TOKENS], "embed": [TOKENS]},
        vjp_order={"logits": 1, "embed": 0},
        metadata={"kind": "lm"},
    )


@pytest.fixture(scope="module")
def saved(model: jaxport.Model, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "lm.jaxport"
    model.save(path)
    return path


def tokens() -> np.ndarray:
    return np.arange(16, dtype=np.int32).reshape(2, 8) % 32


def test_round_trip_through_a_file(model: jaxport.Model, saved: Path) -> None:
    loaded = jaxport.load_model(saved)
    assert list(loaded.methods) == ["embed", "logits"]
    assert loaded.vjp_orders == {"embed": 0, "logits": 1}
    assert loaded.metadata == {"kind": "lm"}
    expected = logits(model.params, tokens())
    np.testing.assert_allclose(loaded.logits(tokens()), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(loaded.methods["embed"](tokens()), model.embed(tokens()))
    jax.tree.map(np.testing.assert_array_equal, loaded.params, transformer_params())
    grad = jax.grad(lambda p: loaded.exported["logits"].call(p, tokens()).sum())(loaded.params)
    assert jax.tree.structure(grad) == jax.tree.structure(loaded.params)


def test_parameters_are_stored_once_outside_the_modules(model: jaxport.Model) -> None:
    data = model.dumps()
    info = jaxport.inspect(data)
    assert info.kind == "model" and info.format_version == 2
    params_bytes = sum(t.nbytes for t in info.tensors)
    assert [s.compression for s in info.sections] == ["zstd"] + ["none"] * len(info.tensors)
    assert sum(s.length for s in info.sections[1:]) == params_bytes
    # Neither the primal nor the VJP modules hold the parameters.
    import zstandard

    start = _container.PREAMBLE_LENGTH + info.header_length
    modules = zstandard.ZstdDecompressor().decompress(data[start : start + info.sections[0].length])
    embedding = np.asarray(model.tensor("['embed']"), np.float32).tobytes()
    assert embedding[:64] not in modules and embedding[-64:] not in modules
    assert [m.method for m in info.modules] == ["embed", "logits", "logits"]


def test_tensors_are_aligned_and_named(model: jaxport.Model) -> None:
    data = model.dumps()
    info = jaxport.inspect(data)
    payload_start = _container.PREAMBLE_LENGTH + info.header_length
    assert payload_start % 64 == 0
    for t in info.tensors:
        section = info.sections[t.section]
        assert (payload_start + section.offset) % 64 == 0
        start = payload_start + section.offset
        assert hashlib.sha256(data[start : start + t.nbytes]).hexdigest() == t.sha256
    assert info.tensors[0].path == "['embed']"
    assert info.tensors[-1].path == "['layers'][1]['out']['w']"


def test_same_model_same_bytes(model: jaxport.Model, saved: Path) -> None:
    assert model.dumps() == saved.read_bytes()
    assert jaxport.load_model(saved).dumps() == saved.read_bytes()


def test_reads_are_lazy(saved: Path) -> None:
    loaded = jaxport.load_model(saved)
    assert loaded.bytes_read == 0
    loaded.embed(tokens())
    embed_bytes = loaded.tensors[0].nbytes
    assert loaded.bytes_read == embed_bytes  # only the tensor the method's module keeps
    one = loaded.tensor("['final']['scale']")
    assert one.shape == (16,) and loaded.bytes_read == embed_bytes + one.nbytes
    assert not one.flags.writeable  # a view of the read-only map, not a copy


def test_a_corrupt_tensor_is_never_used(saved: Path, tmp_path: Path) -> None:
    data = bytearray(saved.read_bytes())
    info = jaxport.inspect(bytes(data))
    target = next(t for t in info.tensors if t.path == "['layers'][0]['mlp']['w']")
    start = _container.PREAMBLE_LENGTH + info.header_length + info.sections[target.section].offset
    data[start + 5] ^= 0x40
    bad = tmp_path / "bad.jaxport"
    bad.write_bytes(bytes(data))
    loaded = jaxport.load_model(bad)  # the header is fine
    loaded.embed(tokens())  # a method that does not use the tensor still runs
    with pytest.raises(jaxport.IntegrityError, match=r"\['layers'\]\[0\]\['mlp'\]\['w'\]"):
        loaded.logits(tokens())
    with pytest.raises(jaxport.IntegrityError):
        _ = loaded.params


def test_update_params(model: jaxport.Model, saved: Path) -> None:
    new = transformer_params()
    new["final"]["scale"] = np.full(16, 2.0, np.float32)
    updated = jaxport.load_model(saved).update_params(new)
    expected = logits(new, tokens())
    np.testing.assert_allclose(updated.logits(tokens()), expected, rtol=1e-4, atol=1e-5)
    reread = jaxport.loads_model(updated.dumps())
    np.testing.assert_array_equal(reread.tensor("['final']['scale']"), new["final"]["scale"])
    old_info, new_info = jaxport.inspect(model.dumps()), jaxport.inspect(updated.dumps())
    changed = [
        a.path
        for a, b in zip(old_info.tensors, new_info.tensors, strict=True)
        if a.sha256 != b.sha256
    ]
    assert changed == ["['final']['scale']"]
    assert old_info.sections[0] == new_info.sections[0]  # the same modules, not re-exported


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p: p["final"].update(scale=np.ones(17, np.float32)),
            r"\['final'\]\['scale'\]: float32\[17\]",
        ),
        (
            lambda p: p["final"].update(scale=np.ones(16, np.int32)),
            r"int32\[16\], the model's is float32\[16\]",
        ),
        (lambda p: p["final"].update(bias=np.ones(16, np.float32)), r"\['final'\]\['bias'\]"),
        (lambda p: p["layers"].pop(), "leaves"),
        (lambda p: p.update(embed=[1, 2]), r"\['embed'\]"),
    ],
)
def test_update_params_refuses_another_tree(
    model: jaxport.Model, change: Any, message: str
) -> None:
    params = transformer_params()
    change(params)
    with pytest.raises(jaxport.ParamsMismatchError, match=message):
        model.update_params(params)


def test_a_function_archive_is_not_a_model(model: jaxport.Model) -> None:
    with pytest.raises(jaxport.CorruptArchiveError, match=r"use jaxport\.load$"):
        jaxport.loads_model(jaxport.dumps(model.exported["embed"]))
    with pytest.raises(
        jaxport.CorruptArchiveError, match=r"use jaxport\.load_model or `jaxport run`$"
    ):
        jaxport.loads(model.dumps())


def test_function_archives_are_still_version_1(model: jaxport.Model) -> None:
    assert jaxport.inspect(jaxport.dumps(model.exported["embed"])).format_version == 1


def test_symbolic_batch_and_a_single_function() -> None:
    (b,) = jax.export.symbolic_shape("b")
    params = {"w": np.eye(3, dtype=np.float32)}
    single = jaxport.Model(params, lambda p, x: x @ p["w"], [jax.ShapeDtypeStruct((b, 3), F32)])
    loaded = jaxport.loads_model(single.dumps())
    for n in (1, 5):
        x = np.ones((n, 3), np.float32)
        np.testing.assert_array_equal(loaded.apply(x), x)
    assert jaxport.inspect(single.dumps()).methods[0].in_avals[0].shape == ("b", 3)


def test_input_specs_must_name_every_method() -> None:
    with pytest.raises(ValueError, match="input_specs names methods"):
        jaxport.Model({"w": np.ones(2)}, {"a": embed, "b": embed}, {"a": [TOKENS]})


@pytest.mark.parametrize(
    ("leaf", "message"),
    [("text", "not an array"), (jax.random.key(0), "PRNG key")],
)
def test_leaves_that_are_not_tensors(leaf: Any, message: str) -> None:
    with pytest.raises(jaxport.UnsupportedFeatureError, match=message):
        jaxport.Model({"w": np.ones(2), "x": leaf}, lambda p, x: x, [TOKENS])


def test_scalar_and_narrow_dtypes() -> None:
    import ml_dtypes

    params = {
        "s": np.float32(3),
        "h": np.arange(4, dtype=ml_dtypes.bfloat16),
        "q": np.arange(4, dtype=np.int8),
        "flag": np.array([True, False]),
    }
    m = jaxport.Model(
        params, lambda p, x: x * p["s"] + p["h"].astype(F32), [jax.ShapeDtypeStruct((4,), F32)]
    )
    loaded = jaxport.loads_model(m.dumps())
    jax.tree.map(np.testing.assert_array_equal, loaded.params, params)
    assert loaded.tensor("['s']").shape == ()


def test_sharded_parameters_are_placed_as_exported() -> None:
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    params = {"w": jax.device_put(w, NamedSharding(mesh, P("x", "y"))), "b": np.ones(8, np.float32)}
    m = jaxport.Model(params, lambda p, x: x @ p["w"] + p["b"], [jax.ShapeDtypeStruct((4, 8), F32)])
    assert m.exported["apply"].nr_devices == 8
    loaded = jaxport.loads_model(m.dumps())
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(loaded.apply(x), x @ w + 1)
    kept, placed = loaded.placed_params("apply")
    w_placed = placed[kept.index(1)]  # leaves are sorted: b, w
    # jax < 0.9 places it with the HloSharding form (a GSPMDSharding): compare the layouts.
    assert w_placed.sharding.is_equivalent_to(NamedSharding(mesh, P("x", "y")), 2)


def test_from_exported_checks_the_first_argument(model: jaxport.Model) -> None:
    params = transformer_params()
    same = jaxport.Model.from_exported(
        params, model.exported, vjp_order={"embed": 0, "logits": 1}, metadata={"kind": "lm"}
    )
    assert same.dumps() == model.dumps()
    params["final"]["scale"] = np.ones(8, np.float32)
    with pytest.raises(jaxport.ParamsMismatchError, match="takes"):
        jaxport.Model.from_exported(params, model.exported)


def test_non_zero_padding_is_refused() -> None:
    # Tensors of 12 bytes: each next one starts after 52 bytes of zero padding.
    params = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    m = jaxport.Model(params, lambda p, x: x + p["a"] + p["b"], [jax.ShapeDtypeStruct((3,), F32)])
    data = bytearray(m.dumps())
    info = jaxport.inspect(bytes(data))
    payload_start = _container.PREAMBLE_LENGTH + info.header_length
    first, second = info.sections[1], info.sections[2]
    assert second.offset - (first.offset + first.length) == 52
    data[payload_start + first.offset + first.length + 10] = 1
    with pytest.raises(jaxport.CorruptArchiveError, match="non-zero padding before section 2"):
        jaxport.loads_model(bytes(data))
