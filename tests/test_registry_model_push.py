"""Pushing a model never joins its archive: each tensor blob is written from the model's own
array, so a push allocates a small fraction of the archive's size (each test on SQLite and
PostgreSQL)."""

from __future__ import annotations

import hashlib
import tracemalloc
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxport
from jaxport import Registry

N_TENSORS, ROWS = 4, 4096
X = jax.ShapeDtypeStruct((2, 1024), jnp.float32)


def _params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"w{i}": rng.normal(size=(ROWS, 1024)).astype(np.float32) for i in range(N_TENSORS)}


def _apply(p: Any, x: jax.Array) -> jax.Array:
    return x @ p["w0"].T


def test_push_of_a_model_allocates_far_less_than_its_archive(registry: Registry) -> None:
    model = jaxport.Model(_params(), _apply, [X])  # 4 tensors of 16 MiB
    archive_size = sum(t.nbytes for t in model.tensors)
    tracemalloc.start()
    try:
        result = registry.push(model, "big")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < archive_size / 8, (peak, archive_size)  # no joined archive, no tensor copy
    pulled = registry.pull_bytes("big")
    assert pulled == model.dumps()  # the parts give the archive back, byte for byte
    assert result.variants[0].digest == hashlib.sha256(pulled).hexdigest()


def test_push_of_a_pulled_model_stores_nothing_new(registry: Registry) -> None:
    model = jaxport.Model(_params(), _apply, [X])
    first = registry.push(model, "big")
    again = registry.push(registry.pull_model("big"), "big")  # tensors mapped from the store
    assert (again.version, again.created) == (first.version, False)
    other = registry.push(registry.pull_model("big"), "copy")
    assert other.variants[0].digest == first.variants[0].digest
