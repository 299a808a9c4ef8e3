"""Models from other formats: Model.from_safetensors, Model.from_orbax (optional extras).

The round trips need the extras (``pip install -e ".[dev]"`` has both); they skip only where
the package is not installed (the per-jax-release venvs of scripts/test_jax_versions.sh).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxport
from jaxport.export import _import

X = jax.ShapeDtypeStruct((4, 3), jnp.float32)


def params() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "dense": {
            "w": rng.normal(size=(3, 5)).astype(np.float32),
            "b": rng.normal(size=(5,)).astype(np.float32),
        },
        "scale": np.asarray(2.0, np.float32),
    }


def apply(p: Any, x: Any) -> Any:
    return (x @ p["dense"]["w"] + p["dense"]["b"]) * p["scale"]


def expected(x: np.ndarray) -> np.ndarray:
    return np.asarray(apply(params(), x))


def _x() -> np.ndarray:
    return np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def test_from_safetensors_round_trip(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    p = params()
    path = tmp_path / "m.safetensors"
    safetensors_numpy.save_file(
        {"dense.w": p["dense"]["w"], "dense.b": p["dense"]["b"], "scale": p["scale"]}, path
    )
    model = jaxport.Model.from_safetensors(path, apply, [X], metadata={"from": "st"})
    assert [t.path for t in model.tensors] == ["['dense']['b']", "['dense']['w']", "['scale']"]
    np.testing.assert_array_equal(model.apply(_x()), expected(_x()))
    model.save(tmp_path / "m.jaxport")
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    assert loaded.metadata == {"from": "st"}
    np.testing.assert_array_equal(loaded.apply(_x()), expected(_x()))
    np.testing.assert_array_equal(loaded.tensor("['dense']['w']"), p["dense"]["w"])


def test_params_from_safetensors_nested_keys_and_dtypes(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    flat = {
        "layers.0.attn.kernel": np.ones((2, 2), ml_dtypes.bfloat16),
        "layers.1.attn.kernel": np.zeros((2, 2), np.float16),
        "layers.10.norm": np.arange(3, dtype=np.int8),
        "head": np.full((1,), 7, np.int32),
    }
    safetensors_numpy.save_file(flat, tmp_path / "t.safetensors")
    got = _import.params_from_safetensors(tmp_path / "t.safetensors")
    assert set(got) == {"layers", "head"}
    assert set(got["layers"]) == {"0", "1", "10"}  # numbered levels stay dict keys
    for key, value in flat.items():
        node = got
        for part in key.split("."):
            node = node[part]
        assert node.dtype == value.dtype and node.shape == value.shape
        np.testing.assert_array_equal(node, value)


@pytest.mark.parametrize(
    ("flat", "result"),
    [
        ({"a": 1, "b": 2}, {"a": 1, "b": 2}),
        ({"a.b.c": 1, "a.b.d": 2, "a.e": 3}, {"a": {"b": {"c": 1, "d": 2}, "e": 3}}),
        ({"a..b": 1, "c.": 2}, {"a": {"": {"b": 1}}, "c": {"": 2}}),  # empty levels kept
    ],
)
def test_nest_keys(flat: dict[str, int], result: dict[str, Any]) -> None:
    assert _import.nest_keys(flat) == result


@pytest.mark.parametrize(
    ("flat", "named"),
    [
        ({"a": 1, "a.b": 2}, ("'a'", "'a.b'")),
        ({"x.y": 1, "x.y.z.w": 2, "x.q": 3}, ("'x.y'", "'x.y.z.w'")),
        ({"a.b.c": 1, "a.b": 2}, ("'a.b'", "'a.b.c'")),
    ],
)
def test_nest_keys_conflict_names_both_keys(flat: dict[str, int], named: tuple[str, str]) -> None:
    with pytest.raises(jaxport.UnsupportedFeatureError) as e:
        _import.nest_keys(flat)
    assert all(name in str(e.value) for name in named)


def test_from_safetensors_conflict(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "c.safetensors"
    safetensors_numpy.save_file({"dense": np.ones(2), "dense.w": np.ones(2)}, path)
    with pytest.raises(jaxport.UnsupportedFeatureError, match=re.escape("'dense' and 'dense.w'")):
        jaxport.Model.from_safetensors(path, apply, [X])


def test_from_safetensors_corrupt_and_missing_file(tmp_path: Path) -> None:
    pytest.importorskip("safetensors.numpy")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 8 + b"not a header")
    with pytest.raises(jaxport.CorruptArchiveError, match="safetensors"):
        _import.params_from_safetensors(bad)
    with pytest.raises(FileNotFoundError):
        _import.params_from_safetensors(tmp_path / "missing.safetensors")


def _orbax_save(directory: Path, tree: Any) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    checkpointer = ocp.PyTreeCheckpointer()
    checkpointer.save(directory, tree)


def test_from_orbax_round_trip(tmp_path: Path) -> None:
    p = params()
    # Saved as jax Arrays, restored as numpy arrays whatever the saved sharding.
    _orbax_save(tmp_path / "ckpt", jax.tree.map(jnp.asarray, p))
    restored = _import.params_from_orbax(tmp_path / "ckpt")
    assert all(type(x) is np.ndarray for x in jax.tree.leaves(restored))
    assert jax.tree.structure(restored) == jax.tree.structure(p)  # type: ignore[operator]
    model = jaxport.Model.from_orbax(tmp_path / "ckpt", apply, [X])
    np.testing.assert_array_equal(model.apply(_x()), expected(_x()))
    model.save(tmp_path / "m.jaxport")
    np.testing.assert_array_equal(
        jaxport.load_model(tmp_path / "m.jaxport").apply(_x()), expected(_x())
    )


def test_params_from_orbax_dtypes_lists_and_scalars(tmp_path: Path) -> None:
    tree: dict[str, Any] = {
        "layers": [np.ones((2, 3), ml_dtypes.bfloat16), np.arange(4, dtype=np.int8)],
        "step": 3,
    }
    _orbax_save(tmp_path / "ckpt", tree)
    got = _import.params_from_orbax(tmp_path / "ckpt")
    assert isinstance(got["layers"], list)
    for a, b in zip(got["layers"], tree["layers"], strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert isinstance(got["step"], np.ndarray) and got["step"] == 3


def test_params_from_orbax_not_a_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("orbax.checkpoint")
    (tmp_path / "empty").mkdir()
    with pytest.raises(jaxport.CorruptArchiveError, match="Orbax"):
        _import.params_from_orbax(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        _import.params_from_orbax(tmp_path / "missing")


@pytest.mark.parametrize(
    ("modules", "call", "extra"),
    [
        (("safetensors", "safetensors.numpy"), _import.params_from_safetensors, "safetensors"),
        (("orbax", "orbax.checkpoint"), _import.params_from_orbax, "orbax"),
    ],
)
def test_missing_library_is_a_jaxport_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, modules: tuple[str, ...], call: Any, extra: str
) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    with pytest.raises(jaxport.UnsupportedFeatureError, match=rf"pip install jaxport\[{extra}\]"):
        call(tmp_path / "anything")


def test_missing_library_through_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(jaxport.UnsupportedFeatureError, match="safetensors"):
        jaxport.Model.from_safetensors(tmp_path / "m.safetensors", apply, [X])
    monkeypatch.setitem(sys.modules, "orbax", None)
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    with pytest.raises(jaxport.UnsupportedFeatureError, match="orbax"):
        jaxport.Model.from_orbax(tmp_path / "ckpt", apply, [X])


# -- Orbax: CheckpointManager layouts and train states ----------------------------------------


def _train_state() -> dict[str, Any]:
    """A train state as flax's TrainState and optax's adam save it: moments of the same shapes
    as the parameters, which must never be taken for them."""
    p = params()
    zeros = jax.tree.map(np.zeros_like, p)
    return {"step": np.int32(7), "params": p, "opt_state": [{"mu": zeros, "nu": zeros}]}


def _manager_save(root: Path, steps: dict[int, Any], item_names: tuple[str, ...] = ()) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    manager = ocp.CheckpointManager(root, item_names=item_names or None)
    for step, tree in steps.items():
        if item_names:
            composite = {n: ocp.args.StandardSave(tree[n]) for n in item_names}
            manager.save(step, args=ocp.args.Composite(**composite))
        else:
            manager.save(step, args=ocp.args.StandardSave(tree))
    manager.wait_until_finished()
    manager.close()


def test_from_orbax_reads_a_checkpoint_manager_and_takes_the_params(tmp_path: Path) -> None:
    old = _train_state()
    old["params"]["scale"] = np.asarray(-1.0, np.float32)
    _manager_save(tmp_path / "run", {1: old, 2: _train_state()})
    # the newest step, its "default" item, the train state's params: not its moments
    model = jaxport.Model.from_orbax(tmp_path / "run", apply, [X])
    assert [t.path for t in model.tensors] == ["['dense']['b']", "['dense']['w']", "['scale']"]
    np.testing.assert_array_equal(model.apply(_x()), expected(_x()))
    first = _import.params_from_orbax(tmp_path / "run", step=1)
    assert first["scale"] == -1
    step_dir = _import.params_from_orbax(tmp_path / "run" / "1")  # a step directory itself
    assert step_dir["scale"] == -1
    mu = _import.params_from_orbax(tmp_path / "run", subtree="opt_state/0/mu")
    assert jax.tree.structure(mu) == jax.tree.structure(params())  # type: ignore[operator]
    whole = _import.params_from_orbax(tmp_path / "run", subtree="")
    assert set(whole) == {"step", "params", "opt_state"}


def test_from_orbax_named_items(tmp_path: Path) -> None:
    _manager_save(tmp_path / "run", {5: {"state": _train_state(), "extra": {"x": np.ones(2)}}},
                  item_names=("state", "extra"))  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"items \['extra', 'state'\]: pass item="):
        _import.params_from_orbax(tmp_path / "run")
    got = _import.params_from_orbax(tmp_path / "run", item="state")
    np.testing.assert_array_equal(got["dense"]["w"], params()["dense"]["w"])
    with pytest.raises(FileNotFoundError, match=r"no item 'nope'; its items"):
        _import.params_from_orbax(tmp_path / "run", item="nope")
    with pytest.raises(FileNotFoundError, match=r"no step 9; its steps: \[5\]"):
        _import.params_from_orbax(tmp_path / "run", step=9, item="state")


def test_from_orbax_never_stores_optimizer_moments_as_weights(tmp_path: Path) -> None:
    moments = {"opt_state": _train_state()["opt_state"], "model": params()}
    _orbax_save(tmp_path / "ckpt", moments)
    with pytest.raises(jaxport.UnsupportedFeatureError, match=r"optimizer state.*subtree="):
        _import.params_from_orbax(tmp_path / "ckpt")
    got = _import.params_from_orbax(tmp_path / "ckpt", subtree="model")
    np.testing.assert_array_equal(got["dense"]["b"], params()["dense"]["b"])
    with pytest.raises(FileNotFoundError, match=r"no subtree 'modl' .*\['model', 'opt_state'\]"):
        _import.params_from_orbax(tmp_path / "ckpt", subtree="modl")


def test_from_orbax_takes_several_subtrees(tmp_path: Path) -> None:
    """Flax Linen's BatchNorm variables: ``params`` and ``batch_stats`` from one train state
    (its optimizer moments left out), as a list keyed by the paths or a dict."""
    p = params()
    stats = {"mean": np.full(5, 0.5, np.float32)}
    state = {"step": np.int32(3), "params": p, "batch_stats": stats, "opt_state": [p]}
    _orbax_save(tmp_path / "ckpt", state)

    def bn_apply(variables: Any, x: Any) -> Any:
        return apply(variables["params"], x) - variables["batch_stats"]["mean"]

    model = jaxport.Model.from_orbax(
        tmp_path / "ckpt", bn_apply, [X], subtree=["params", "batch_stats"]
    )
    np.testing.assert_allclose(model.apply(_x()), expected(_x()) - 0.5)
    assert sorted({t.path.split("]")[0] for t in model.tensors}) == ["['batch_stats'", "['params'"]
    keyed = _import.params_from_orbax(tmp_path / "ckpt", subtree={"p": "params", "s": "step"})
    assert sorted(keyed) == ["p", "s"] and keyed["s"] == 3


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"subtree": 3}, "subtree takes a path"),
        ({"subtree": ["params", 3]}, "subtree takes a path"),
        ({"subtree": []}, "subtree takes a path"),
        ({"subtree": {"p": ["params"]}}, "subtree takes a path"),
        ({"subtree": ("params", "params")}, "names a key twice"),
        ({"step": "5"}, "step takes an int"),
        ({"step": True}, "step takes an int"),
        ({"item": 0}, "item takes a str"),
        ({"directory": None}, "directory takes a path"),
    ],
)
def test_from_orbax_refuses_an_argument_of_another_type(
    tmp_path: Path, kwargs: dict[str, Any], says: str
) -> None:
    directory = kwargs.pop("directory", tmp_path / "ckpt")
    with pytest.raises(jaxport.InvalidArgumentError, match=says) as e:
        jaxport.Model.from_orbax(directory, apply, [X], **kwargs)
    assert isinstance(e.value, TypeError)
