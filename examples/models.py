"""Real JAX programs for the examples: a transformer language model, a convolutional
classifier and an Adam optimizer step. Plain jax, random weights, no downloads."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    vocab: int = 256
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 64


def init_transformer(key: jax.Array, cfg: TransformerConfig) -> dict[str, Any]:
    """Parameters of a decoder-only transformer: f32 arrays in a dict pytree."""
    keys = iter(jax.random.split(key, 4 + 6 * cfg.n_layers))
    d = cfg.d_model

    def dense(n_in: int, n_out: int) -> jax.Array:
        return jax.random.normal(next(keys), (n_in, n_out), jnp.float32) / jnp.sqrt(n_in)

    layers = [
        {
            "ln1": jnp.ones(d),
            "qkv": dense(d, 3 * d),
            "proj": dense(d, d),
            "ln2": jnp.ones(d),
            "up": dense(d, 4 * d),
            "down": dense(4 * d, d),
        }
        for _ in range(cfg.n_layers)
    ]
    return {
        "embed": jax.random.normal(next(keys), (cfg.vocab, d), jnp.float32) * 0.02,
        "pos": jax.random.normal(next(keys), (cfg.max_len, d), jnp.float32) * 0.02,
        "layers": layers,
        "ln_f": jnp.ones(d),
    }


def _layer_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def embed_tokens(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
    """Token plus position embeddings f32[batch, seq, d_model] for int32 tokens [batch, seq]."""
    return params["embed"][tokens] + params["pos"][: tokens.shape[1]]


def transformer_lm(params: dict[str, Any], tokens: jax.Array, n_heads: int = 4) -> jax.Array:
    """Next-token logits f32[batch, seq, vocab] for int32 tokens [batch, seq] (causal)."""
    batch, seq = tokens.shape
    x = embed_tokens(params, tokens)
    d = x.shape[-1]
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    for layer in params["layers"]:
        h = _layer_norm(x, layer["ln1"])
        q, k, v = jnp.split(h @ layer["qkv"], 3, axis=-1)
        heads = lambda t: t.reshape(batch, seq, n_heads, d // n_heads)  # noqa: E731
        att = jnp.einsum("bqhd,bkhd->bhqk", heads(q), heads(k)) / jnp.sqrt(d // n_heads)
        att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", att, heads(v)).reshape(batch, seq, d)
        x = x + out @ layer["proj"]
        x = x + jax.nn.gelu(_layer_norm(x, layer["ln2"]) @ layer["up"]) @ layer["down"]
    return _layer_norm(x, params["ln_f"]) @ params["embed"].T


def init_convnet(key: jax.Array, channels: int = 16, classes: int = 10) -> dict[str, Any]:
    """Parameters of a small CNN for 28x28x1 images (NHWC)."""
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "conv1": jax.random.normal(k1, (3, 3, 1, channels), jnp.float32) / 3.0,
        "conv2": jax.random.normal(k2, (3, 3, channels, channels), jnp.float32)
        / (3.0 * channels**0.5),
        "dense": jax.random.normal(k3, (channels, classes), jnp.float32) / channels**0.5,
    }


def convnet(params: dict[str, Any], images: jax.Array) -> jax.Array:
    """Class logits f32[batch, classes] for images f32[batch, 28, 28, 1]."""
    dn = ("NHWC", "HWIO", "NHWC")
    x = jax.lax.conv_general_dilated(images, params["conv1"], (1, 1), "SAME", dimension_numbers=dn)
    x = jax.nn.relu(x)
    x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
    x = jax.nn.relu(
        jax.lax.conv_general_dilated(x, params["conv2"], (1, 1), "SAME", dimension_numbers=dn)
    )
    return x.mean(axis=(1, 2)) @ params["dense"]


def adam_init(params: Any) -> dict[str, Any]:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return {"m": zeros, "v": zeros, "step": jnp.zeros((), jnp.int32)}


def adam_step(
    params: Any, opt_state: dict[str, Any], images: jax.Array, labels: jax.Array, lr: float = 1e-3
) -> tuple[Any, dict[str, Any], jax.Array]:
    """One Adam step on the convnet's cross-entropy: (new params, new state, loss)."""

    def loss_fn(p: Any) -> jax.Array:
        logp = jax.nn.log_softmax(convnet(p, images))
        return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    step = opt_state["step"] + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt_state["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt_state["v"], grads)
    t = step.astype(jnp.float32)

    # sqrt(v + 1e-16), not sqrt(v): differentiable at v = 0, so a gradient through the step
    # (with materialized zero cotangents, as through an exported VJP) is not 0 * inf = NaN.
    def update(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        m_hat, v_hat = m / (1 - 0.9**t), v / (1 - 0.999**t)
        return p - lr * m_hat / (jnp.sqrt(v_hat + 1e-16) + 1e-8)

    return jax.tree.map(update, params, m, v), {"m": m, "v": v, "step": step}, loss


def fine_tune_head(
    params: dict[str, Any], tokens: jax.Array, n_heads: int = 4, steps: int = 3, lr: float = 0.1
) -> dict[str, Any]:
    """A few SGD steps of next-token loss on the last layer and ``ln_f`` only (the rest frozen,
    as when fine-tuning a head): only those tensors change."""

    def loss(trainable: Any) -> jax.Array:
        p = {**params, "layers": [*params["layers"][:-1], trainable[0]], "ln_f": trainable[1]}
        logits = transformer_lm(p, tokens[:, :-1], n_heads)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1).mean()

    trainable = (params["layers"][-1], params["ln_f"])
    for _ in range(steps):
        grads = jax.grad(loss)(trainable)
        trainable = jax.tree.map(lambda w, g: w - lr * g, trainable, grads)
    return {**params, "layers": [*params["layers"][:-1], trainable[0]], "ln_f": trainable[1]}
