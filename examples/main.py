"""The main job: export real models, push them, serve them from another process, update them.

    python examples/main.py [--small] [--registry URL] [--blobs DIR]

1. Exports a transformer language model as a `jaxport.Model` (methods `logits` and `embed`,
   parameters stored once as tensors) with a symbolic batch dimension for cpu, cuda and tpu at
   once, and a second variant sharded for 8 devices; pushes both to a registry (default: a fresh
   one in a temporary directory) as `transformer-lm`, `prod` pointing at it.
2. A separate process (`examples/serve.py`) that has only the registry URL, no weights and no
   model code, pulls `transformer-lm@prod`, runs both methods on inputs this process saved next
   to the registry and checks the numbers against the outputs saved with them.
3. Fine-tunes the last layer (new parameters, same code), pushes it as version 2 with
   `update_params` (no re-export), prints how much the blob store grew (the changed tensors
   only), moves `prod` and serves again from a new process.
4. Functions as before: a convolutional classifier (weights as constants) and an Adam training
   step with vjp_order=1, pushed, pulled for the local platform, run and compared, and a
   gradient through the pulled step.

Runs on CPU: 8 CPU devices are faked when jax has not started yet.
"""

from __future__ import annotations

import argparse
import os
import subprocess
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
    embed_tokens,
    fine_tune_head,
    init_convnet,
    init_transformer,
    transformer_lm,
)

import jaxport

PLATFORMS = ("cpu", "cuda", "tpu")


def transformer_models(cfg: TransformerConfig, params, seq: int):
    """The LM as two Models: for cpu/cuda/tpu with a symbolic batch, and sharded for 8 devices."""
    (b,) = jax.export.symbolic_shape("b")
    methods = {"logits": lambda p, t: transformer_lm(p, t, cfg.n_heads), "embed": embed_tokens}
    tokens = jax.ShapeDtypeStruct((b, seq), jnp.int32)
    multi = jaxport.Model(
        params, methods, {"logits": [tokens], "embed": [tokens]}, platforms=PLATFORMS
    )
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    replicated = jax.device_put(params, NamedSharding(mesh, P()))
    tokens16 = jax.ShapeDtypeStruct((16, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    sharded = jaxport.Model(replicated, methods, {"logits": [tokens16], "embed": [tokens16]})
    return multi, sharded


def save_reference(path: Path, cfg: TransformerConfig, params, tokens) -> None:
    """Inputs and this process's outputs, for the serving process to check against."""
    logits = transformer_lm(params, tokens, cfg.n_heads)
    np.savez(
        path,
        **{"logits.in0": tokens, "logits.out": logits},
        **{"embed.in0": tokens, "embed.out": embed_tokens(params, tokens)},
    )


def serve(registry: jaxport.Registry, reference: Path) -> None:
    """Runs examples/serve.py in a new process: it gets the registry's location, nothing else."""
    command = [sys.executable, "-P", str(Path(__file__).with_name("serve.py"))]
    command += ["--registry", registry.url, "--blobs", registry.blobs.url]
    command += ["--reference", str(reference)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    print(result.stdout, end="")
    if result.returncode != 0:
        raise SystemExit(f"the serving process failed:\n{result.stderr[-3000:]}")


def blob_bytes(registry: jaxport.Registry) -> int:
    """Bytes in a local blob store (0 for a remote one)."""
    root = Path(registry.blobs.url)
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0


def run_transformer(registry: jaxport.Registry, cfg: TransformerConfig, seq: int, workdir: Path):
    key = jax.random.key(0)
    params = init_transformer(key, cfg)
    multi, sharded = transformer_models(cfg, params, seq)
    for m, label in ((multi, "transformer"), (sharded, "transformer (8 devices)")):
        exp = m.exported["logits"]
        print(
            f"exported {label} as a Model: methods {list(m.methods)}, platforms "
            f"{exp.platforms}, nr_devices {exp.nr_devices}, {len(m.tensors)} tensors"
        )
    ref = registry.push([multi, sharded], "transformer-lm", aliases=["prod"])
    size = blob_bytes(registry)
    print(f"pushed {ref}: {len(ref.variants)} variants, blob store {size:,} bytes")

    tokens = jax.random.randint(jax.random.fold_in(key, 2), (3, seq), 0, cfg.vocab)
    save_reference(workdir / "reference-v1.npz", cfg, params, tokens)
    serve(registry, workdir / "reference-v1.npz")

    tuned = fine_tune_head(params, tokens, cfg.n_heads)
    changed = [
        (path, a.nbytes)
        for (path, a), b in zip(
            jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(tuned), strict=True
        )
        if not np.array_equal(a, b)
    ]
    v2 = registry.push([multi.update_params(tuned), sharded.update_params(tuned)], "transformer-lm")
    growth = blob_bytes(registry) - size
    changed_bytes = sum(n for _, n in changed)
    print(
        f"fine-tuned the head ({len(changed)} of {len(multi.tensors)} tensors changed, "
        f"{changed_bytes:,} bytes), pushed {v2} with update_params"
    )
    print(
        f"  blob store grew by {growth:,} bytes: the changed tensors' {changed_bytes:,} and "
        f"{growth - changed_bytes:,} of the two variants' headers and modules; no unchanged "
        "tensor stored again"
    )
    assert changed_bytes <= growth < changed_bytes + 2 * 2**20, (growth, changed_bytes)
    registry.alias("transformer-lm", "prod", v2.version)
    save_reference(workdir / "reference-v2.npz", cfg, tuned, tokens)
    serve(registry, workdir / "reference-v2.npz")

    if jax.device_count() >= 8:
        pulled8 = registry.pull_model("transformer-lm@prod", nr_devices=8)
        tokens16 = jax.random.randint(jax.random.fold_in(key, 3), (16, seq), 0, cfg.vocab)
        out = pulled8.logits(tokens16)
        print(f"pulled the 8-device variant: output on {len(out.sharding.device_set)} devices")
        check("transformer, 8 devices", out, transformer_lm(tuned, tokens16, cfg.n_heads))


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


def run(registry: jaxport.Registry, small: bool = False, workdir: Path | None = None) -> None:
    cfg = TransformerConfig(d_model=32, n_layers=1) if small else TransformerConfig()
    seq = 16 if small else 32
    key = jax.random.key(0)
    c_params = init_convnet(jax.random.fold_in(key, 1), channels=8 if small else 32)
    local = jax.default_backend()
    print(f"jax {jax.__version__}, local platform {local}, {jax.device_count()} devices")
    with tempfile.TemporaryDirectory() as tmp:
        run_transformer(registry, cfg, seq, Path(workdir or tmp))

    conv = export_convnet(c_params)
    print(f"pushed {registry.push(conv, 'convnet', aliases=['prod'])}")
    train = export_train_step(c_params, batch=4)
    train_ref = registry.push(train, "convnet-train-step", vjp_order=1, aliases=["prod"])
    print(f"pushed {train_ref} (vjp_order=1)")

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
            run(registry, small=args.small, workdir=Path(tmp))


if __name__ == "__main__":
    main()
