"""Pushing a model never joins its archive: each tensor blob is written from the model's own
array, so a push allocates a small fraction of the archive's size (each test on SQLite and
PostgreSQL)."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path
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


def test_push_hashes_what_it_stores_even_if_the_source_changed(
    registry: Registry, tmp_path: Path
) -> None:
    """A model mapped from a file that someone rewrites in place after its tensors were
    verified: the push names each blob by the bytes it writes, so the store stays intact."""
    model = jaxport.Model(_params(), _apply, [X])
    model.save(tmp_path / "m.jaxport")
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    loaded.params  # noqa: B018  (every tensor verified, views of the map)
    data = (tmp_path / "m.jaxport").read_bytes()
    with (tmp_path / "m.jaxport").open("r+b") as f:  # in place: the map shows it
        f.seek(data.find(_params()["w1"].tobytes()))
        f.write(b"\x00\x00\x80\x7f")
    registry.push(loaded, "changed")
    report = registry.verify()
    assert (report.missing, report.corrupt, report.problems) == ((), (), ())
    pulled = registry.pull_model("changed").tensor("['w1']")
    np.testing.assert_array_equal(pulled, loaded.tensor("['w1']"))
