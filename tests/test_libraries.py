"""Real libraries' models, end to end as their users would: Flax Linen and NNX, Equinox, optax
and a transformers Flax GPT-2 (a tiny config built in place: nothing is downloaded).

Each model is made into a ``jaxport.Model`` with the one-line conversion the README shows,
saved, then handed to the ``jaxport`` command in a subprocess, which imports none of these
libraries: ``run`` (inputs keyed by name), ``push``, ``audit`` and ``verify --deep``. A library
that is not installed skips its tests (``pip install -e ".[dev]"`` has them all; the
per-jax-release venvs of scripts/test_jax_versions.sh do not).

Library containers that are refused name their conversion; containers a user registered for
serialization (FrozenDict, optax's namedtuples) are read by the command as stand-ins.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_cli import base_env, run

import jaxport

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
X_SPEC = jax.ShapeDtypeStruct((2, 4), jnp.float32)


def _skip_without(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (jaxport[dev] has it)")


# -- the models, as each library's user writes them ------------------------------------------


def _linen() -> tuple[jaxport.Model, dict[str, np.ndarray], Any]:
    nn = _skip_without("flax.linen")
    flax_core = _skip_without("flax.core")

    class Mlp(nn.Module):  # type: ignore[misc,name-defined]
        @nn.compact
        def __call__(self, x: Any) -> Any:
            return nn.Dense(3)(nn.relu(nn.Dense(8)(x)))

    mlp = Mlp()
    variables = flax_core.unfreeze(mlp.init(jax.random.key(0), X))  # a dict, whatever flax gives
    model = jaxport.Model(variables, mlp.apply, [X_SPEC])
    return model, {"[0]": X}, mlp.apply(variables, X)


def _nnx() -> tuple[jaxport.Model, dict[str, np.ndarray], Any]:
    flax = _skip_without("flax")
    nnx = _skip_without("flax.nnx")
    mlp = nnx.Sequential(nnx.Linear(4, 8, rngs=nnx.Rngs(0)), nnx.relu,
                         nnx.Linear(8, 3, rngs=nnx.Rngs(1)))  # fmt: skip
    graphdef, state = nnx.split(mlp)
    # list layers have int keys: one level of string keys ("layers/0/kernel")
    flat = flax.traverse_util.flatten_dict(nnx.to_pure_dict(state))
    params = {"/".join(map(str, k)): v for k, v in flat.items()}

    def apply(params: Any, x: Any) -> Any:
        copy = jax.tree.map(lambda v: v, state)
        nnx.replace_by_pure_dict(copy, flax.traverse_util.unflatten_dict(params, sep="/"))
        return nnx.merge(graphdef, copy)(x)

    return jaxport.Model(params, apply, [X_SPEC]), {"[0]": X}, mlp(X)


def _nnx_dropout_batchnorm() -> tuple[jaxport.Model, dict[str, np.ndarray], Any]:
    """The README's NNX recipe for a model with Dropout (an RNG key in its state) and
    BatchNorm (batch statistics): eval mode, parameters and batch statistics stored, the RNG
    state kept out of the archive (eval-mode Dropout never draws from it)."""
    flax = _skip_without("flax")
    nnx = _skip_without("flax.nnx")

    class Net(nnx.Module):  # type: ignore[misc,name-defined]
        def __init__(self, rngs: Any) -> None:
            self.lin1 = nnx.Linear(4, 8, rngs=rngs)
            self.bn = nnx.BatchNorm(8, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)
            self.lin2 = nnx.Linear(8, 3, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.lin2(self.drop(nnx.relu(self.bn(self.lin1(x)))))

    net = Net(nnx.Rngs(0))
    net(X * 3 + 1)  # a training step: the batch statistics move away from their init
    net.eval()  # Dropout off, BatchNorm on its running averages
    graphdef, params, stats, rest = nnx.split(net, nnx.Param, nnx.BatchStat, ...)

    def pure(state: Any) -> dict[str, Any]:
        flat = flax.traverse_util.flatten_dict(nnx.to_pure_dict(state))
        return {"/".join(map(str, k)): v for k, v in flat.items()}

    weights = {"params": pure(params), "batch_stats": pure(stats)}

    def apply(weights: Any, x: Any) -> Any:
        p, s = jax.tree.map(lambda v: v, (params, stats))
        nnx.replace_by_pure_dict(p, flax.traverse_util.unflatten_dict(weights["params"], sep="/"))
        nnx.replace_by_pure_dict(
            s, flax.traverse_util.unflatten_dict(weights["batch_stats"], sep="/")
        )
        return nnx.merge(graphdef, p, s, rest)(x)

    return jaxport.Model(weights, apply, [X_SPEC]), {"[0]": X}, net(X)


def _equinox() -> tuple[jaxport.Model, dict[str, np.ndarray], Any]:
    eqx = _skip_without("equinox")
    mlp = eqx.nn.MLP(4, 3, width_size=8, depth=2, key=jax.random.key(0))
    arrays, static = eqx.partition(mlp, eqx.is_array)
    leaves, treedef = jax.tree.flatten(arrays)

    def apply(leaves: Any, x: Any) -> Any:
        return jax.vmap(eqx.combine(jax.tree.unflatten(treedef, leaves), static))(x)

    return jaxport.Model(leaves, apply, [X_SPEC]), {"[0]": X}, jax.vmap(mlp)(X)


def _gpt2() -> tuple[jaxport.Model, dict[str, np.ndarray], Any]:
    transformers = _skip_without("transformers")
    _skip_without("flax")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2,
                                     n_head=2)  # fmt: skip
    lm = transformers.FlaxGPT2LMHeadModel(config, seed=0)
    ids = (np.arange(8, dtype=np.int32) * 7 % 64).reshape(1, 8)
    mask = np.array([[1, 1, 1, 1, 1, 1, 0, 0]], np.int32)

    def logits(params: Any, batch: Any) -> Any:
        return lm(batch["input_ids"], attention_mask=batch["attention_mask"], params=params).logits

    spec = {"input_ids": jax.ShapeDtypeStruct((1, 8), jnp.int32),
            "attention_mask": jax.ShapeDtypeStruct((1, 8), jnp.int32)}  # fmt: skip
    model = jaxport.Model(lm.params, logits, [spec])
    # keyed by the batch's names, in the caller's order (jax sorts them: attention_mask first)
    inputs = {"input_ids": ids, "attention_mask": mask}
    return model, inputs, logits(lm.params, inputs)


MODELS: dict[str, Callable[[], tuple[jaxport.Model, dict[str, np.ndarray], Any]]] = {
    "flax-linen": _linen,
    "flax-nnx": _nnx,
    "flax-nnx-dropout-batchnorm": _nnx_dropout_batchnorm,
    "equinox": _equinox,
    "transformers-gpt2": _gpt2,
}


# -- end to end through the command ----------------------------------------------------------


def _through_the_cli(tmp_path: Path, path: Path, inputs: dict[str, np.ndarray], name: str,
                     expected: Any) -> None:  # fmt: skip
    """``run`` (compared with the library's own output), ``push``, ``audit``, ``verify
    --deep``, each in a subprocess that imports no library of the model."""
    env = base_env(tmp_path)
    npz = tmp_path / "inputs.npz"
    np.savez(npz, **inputs)  # type: ignore[arg-type]
    out = tmp_path / "out.npz"
    run(env, "run", str(path), "apply", "-i", str(npz), "-o", str(out))
    with np.load(out) as got:
        np.testing.assert_allclose(got["out"], np.asarray(expected), rtol=1e-5, atol=1e-5)
    run(env, "push", str(path), "--name", name)
    (finding,) = run(env, "audit", "run", name, "--json").json()["findings"]
    assert finding["status"] == "ok", finding
    report = run(env, "verify", "--deep", "--json").json()
    assert report["invalid"] == [] and report["corrupt"] == [], report


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("library", list(MODELS))
def test_a_library_model_end_to_end(tmp_path: Path, library: str) -> None:
    model, inputs, expected = MODELS[library]()
    path = tmp_path / f"{library}.jaxport"
    model.save(path)
    back = jaxport.load_model(path)
    args = [inputs["[0]"]] if "[0]" in inputs else [inputs]
    np.testing.assert_allclose(back.apply(*args), np.asarray(expected), rtol=1e-5, atol=1e-5)
    _through_the_cli(tmp_path, path, inputs, library, expected)


# -- containers: refused with their conversion, or registered and read as stand-ins ----------


def _frozen_dict() -> Any:
    flax_core = _skip_without("flax.core")
    return flax_core.freeze({"w": np.ones((4, 3), np.float32)})


def _nnx_state() -> Any:
    nnx = _skip_without("flax.nnx")
    return nnx.split(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))[1]


def _eqx_module() -> Any:
    eqx = _skip_without("equinox")
    return eqx.nn.Linear(4, 3, key=jax.random.key(0))


def _optax_state() -> Any:
    optax = _skip_without("optax")
    return optax.adam(1e-3).init({"w": np.ones((4, 3), np.float32)})


def _int_keys() -> Any:
    return {"layers": {0: np.ones(3, np.float32)}}


@pytest.mark.parametrize(
    "make, says",
    [
        (_frozen_dict, "flax.core.unfreeze(params)"),
        (_nnx_state, "nnx.to_pure_dict(state)"),
        (_eqx_module, "eqx.partition(model, eqx.is_array)"),
        (_optax_state, "jax.export.register_namedtuple_serialization(ScaleByAdamState, "
                       "serialized_name='optax.ScaleByAdamState')"),
        (_int_keys, "flax.traverse_util.flatten_dict(params)"),
    ],
    ids=["FrozenDict", "nnx.State", "eqx.Module", "optax", "int-keys"],
)  # fmt: skip
def test_a_library_container_is_refused_with_its_conversion(make: Any, says: str) -> None:
    with pytest.raises(jaxport.UnsupportedFeatureError) as e:
        jaxport.Model(make(), lambda p, x: x, [X_SPEC])
    assert says in str(e.value), str(e.value)


_REGISTERED = """
import json, sys
import jax, jax.numpy as jnp, numpy as np, optax
from flax.core import FrozenDict, freeze
import jaxport

# what the refusals suggest: register the nodes for serialization
jax.export.register_pytree_node_serialization(
    FrozenDict, serialized_name="flax.core.FrozenDict",
    serialize_auxdata=lambda keys: json.dumps(list(keys)).encode(),
    deserialize_auxdata=lambda data: tuple(json.loads(data)))
for cls in (optax.ScaleByAdamState, optax.EmptyState):
    jax.export.register_namedtuple_serialization(cls, serialized_name="optax." + cls.__name__)

params = freeze({"dense": {"w": np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)}})
state = (params, optax.adam(1e-3).init(params))
model = jaxport.Model(state, lambda s, x: x @ s[0]["dense"]["w"],
                      [jax.ShapeDtypeStruct((2, 4), jnp.float32)])
model.save(sys.argv[1])
"""


def test_registered_library_nodes_pass_the_command(tmp_path: Path) -> None:
    """FrozenDict and optax's states registered as the refusals suggest: the command, which
    registers nothing, runs, pushes, audits and deeply verifies the archive."""
    _skip_without("flax.core")
    _skip_without("optax")
    path = tmp_path / "registered.jaxport"
    subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(_REGISTERED), str(path)],
                   check=True, env=base_env(tmp_path))  # fmt: skip
    w = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
    _through_the_cli(tmp_path, path, {"[0]": X}, "registered", X @ w)
    pulled = tmp_path / "pulled.jaxport"
    run(base_env(tmp_path), "pull", "registered", "-o", str(pulled))
    assert pulled.read_bytes() == path.read_bytes()  # stand-ins written back as they were
    with pytest.raises(jaxport.UnsupportedFeatureError, match=r"flax\.core\.FrozenDict"):
        jaxport.load_model(path)  # this process registered nothing: refused, as before


def test_an_nnx_state_with_an_rng_key_is_refused_naming_the_split() -> None:
    """The recipe without the split: Dropout's RNG key is a typed key, refused with the fix."""
    nnx = _skip_without("flax.nnx")
    _, state = nnx.split(nnx.Dropout(0.5, rngs=nnx.Rngs(1)))
    with pytest.raises(jaxport.UnsupportedFeatureError) as e:
        jaxport.Model(nnx.to_pure_dict(state), lambda p, x: x, [X_SPEC])
    assert "typed PRNG key" in str(e.value)
    assert "nnx.split(model, nnx.Param, nnx.BatchStat, ...)" in str(e.value)


# -- a method that returns a library's container: refused when the model is made -------------


def _gpt2_output() -> tuple[Any, Any, Any]:
    transformers = _skip_without("transformers")
    _skip_without("flax")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1,
                                     n_head=2)  # fmt: skip
    lm = transformers.FlaxGPT2LMHeadModel(config, seed=0)
    spec = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    return lm.params, lambda params, ids: lm(ids, params=params), spec


def _frozen_dict_output() -> tuple[Any, Any, Any]:
    flax_core = _skip_without("flax.core")
    return {"w": X}, lambda p, x: {"h": [x, flax_core.freeze({"y": x * p["w"]})]}, X_SPEC


def _eqx_output() -> tuple[Any, Any, Any]:
    eqx = _skip_without("equinox")
    return {"w": X}, lambda p, x: eqx.nn.Linear(4, 3, key=jax.random.key(0)), X_SPEC


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.parametrize(
    "make, where, fix",
    [
        (_gpt2_output, "FlaxCausalLMOutputWithCrossAttentions at out,", "out.logits"),
        (_frozen_dict_output, "FrozenDict at out['h'][1],", "dict(out)"),
        (_eqx_output, "Linear at out,", "jax.tree.leaves(out)"),
    ],
    ids=["ModelOutput", "FrozenDict", "eqx.Module"],
)
def test_a_method_returning_a_library_container_is_refused_by_model(
    make: Any, where: str, fix: str
) -> None:
    params, method, spec = make()
    with pytest.raises(jaxport.UnsupportedFeatureError) as e:
        jaxport.Model(params, {"logits": method}, {"logits": [spec]})
    message = str(e.value)
    assert message.startswith("method 'logits' returns a container of type "), message
    assert where in message and fix in message, message
