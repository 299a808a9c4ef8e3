"""The main job: export real models, push them, move `prod`, pull each for this machine, run it.

    python examples/main.py [--small] [--registry URL] [--blobs DIR]

Exports a transformer language model (weights as arguments) and a convolutional classifier
(weights baked in as constants), both with a symbolic batch dimension for cpu, cuda and tpu at
once; the transformer also sharded for 8 devices; and an Adam training step with vjp_order=1.
Pushes them to a registry (default: a fresh one in a temporary directory), points `prod` at
each, pulls each back for the local platform, runs it and checks the numbers against the
original function. Runs on CPU: 8 CPU devices are faked when jax has not started yet.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
import jax.export  # older jax releases do not import it with jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from models import (
    TransformerConfig,
    adam_init,
    adam_step,
    convnet,
    init_convnet,
    init_transformer,
    transformer_lm,
)

import jaxport

PLATFORMS = ("cpu", "cuda", "tpu")


def export_transformer(cfg: TransformerConfig, params, seq: int):
    (b,) = jax.export.symbolic_shape("b")
    fn = jax.jit(lambda p, t: transformer_lm(p, t, cfg.n_heads))
    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    multi = jax.export.export(fn, platforms=PLATFORMS)(
        spec, jax.ShapeDtypeStruct((b, seq), jnp.int32)
    )
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    sharded_fn = jax.jit(
        lambda p, t: transformer_lm(p, t, cfg.n_heads),
        in_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))),
        out_shardings=NamedSharding(mesh, P("data")),
    )
    sharded = jax.export.export(sharded_fn)(spec, jax.ShapeDtypeStruct((16, seq), jnp.int32))
    return multi, sharded, mesh


def export_convnet(params):
    (b,) = jax.export.symbolic_shape("b")
    return jax.export.export(jax.jit(lambda x: convnet(params, x)), platforms=PLATFORMS)(
        jax.ShapeDtypeStruct((b, 28, 28, 1), jnp.float32)
    )


def export_train_step(params, batch: int):
    spec = lambda t: jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), t)  # noqa: E731
    return jax.export.export(jax.jit(adam_step))(
        spec(params),
        spec(adam_init(params)),
        jax.ShapeDtypeStruct((batch, 28, 28, 1), jnp.float32),
        jax.ShapeDtypeStruct((batch,), jnp.int32),
    )


def check(name: str, got, want, rtol: float = 2e-4, atol: float = 2e-5) -> None:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
    print(f"  {name}: matches the original function")


def run(registry: jaxport.Registry, small: bool = False) -> None:
    cfg = TransformerConfig(d_model=32, n_layers=1) if small else TransformerConfig()
    seq = 16 if small else 32
    key = jax.random.key(0)
    t_params = init_transformer(key, cfg)
    c_params = init_convnet(jax.random.fold_in(key, 1), channels=8 if small else 32)
    local = jax.default_backend()
    print(f"jax {jax.__version__}, local platform {local}, {jax.device_count()} devices")

    multi, sharded, mesh = export_transformer(cfg, t_params, seq)
    for exp, label in ((multi, "transformer"), (sharded, "transformer (8 devices)")):
        print(f"exported {label}: platforms {exp.platforms}, nr_devices {exp.nr_devices}")
    ref = registry.push([multi, sharded], "transformer-lm", aliases=["prod"])
    size = sum(v.size_bytes for v in ref.variants)
    print(f"pushed {ref}: {len(ref.variants)} variants, {size:,} bytes")

    conv = export_convnet(c_params)
    print(f"pushed {registry.push(conv, 'convnet', aliases=['prod'])}")
    train = export_train_step(c_params, batch=4)
    train_ref = registry.push(train, "convnet-train-step", vjp_order=1, aliases=["prod"])
    print(f"pushed {train_ref} (vjp_order=1)")

    tokens = jax.random.randint(jax.random.fold_in(key, 2), (3, seq), 0, cfg.vocab)
    pulled = registry.pull("transformer-lm@prod")
    print(f"pulled transformer-lm@prod for {local}: platforms {pulled.platforms}")
    check(
        "transformer, batch 3",
        pulled.call(t_params, tokens),
        transformer_lm(t_params, tokens, cfg.n_heads),
    )

    if jax.device_count() >= 8:
        pulled8 = registry.pull("transformer-lm@prod", nr_devices=8)
        tokens16 = jax.random.randint(jax.random.fold_in(key, 3), (16, seq), 0, cfg.vocab)
        sharded_tokens = jax.device_put(tokens16, NamedSharding(mesh, P("data")))
        out = pulled8.call(t_params, sharded_tokens)
        n_out = len(out.sharding.device_set)
        print(f"pulled the 8-device variant: output sharded over {n_out} devices")
        check("transformer, 8 devices", out, transformer_lm(t_params, tokens16, cfg.n_heads))

    images = jax.random.normal(jax.random.fold_in(key, 4), (5, 28, 28, 1))
    check("convnet, batch 5", registry.pull("convnet@prod").call(images), convnet(c_params, images))

    step = registry.pull("convnet-train-step@prod")
    opt = adam_init(c_params)
    labels = jnp.array([1, 2, 3, 4], jnp.int32)
    check(
        "adam step",
        step.call(c_params, opt, images[:4], labels),
        adam_step(c_params, opt, images[:4], labels),
    )
    grad = jax.grad(lambda p: step.call(p, opt, images[:4], labels)[2])(c_params)
    want = jax.grad(lambda p: adam_step(p, opt, images[:4], labels)[2])(c_params)
    check("gradient through the pulled step (vjp_order=1)", grad, want)

    trained, _, loss = step.call(c_params, opt, images[:4], labels)
    v2 = registry.push(export_convnet(trained), "convnet")
    registry.alias("convnet", "prod", v2.version)
    print(f"trained one step (loss {float(loss):.4f}), pushed {v2}, moved convnet@prod to it")
    check(
        "convnet@prod after the move",
        registry.pull("convnet@prod").call(images),
        convnet(trained, images),
    )
    print("done: every pulled model ran and matched")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny models, for tests")
    parser.add_argument("--registry", help="database URL (default: a fresh temporary registry)")
    parser.add_argument("--blobs", help="blob directory or fsspec URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.registry or f"sqlite:///{Path(tmp) / 'registry.db'}"
        with jaxport.Registry(url, blobs=args.blobs or Path(tmp) / "blobs") as registry:
            print(f"registry: {registry!r}")
            run(registry, small=args.small)


if __name__ == "__main__":
    main()
