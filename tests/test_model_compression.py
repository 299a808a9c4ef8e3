"""Compressed tensor sections (``Model.save(path, compress=True)``): zstd where it pays, raw
elsewhere; read back by every reader, file and registry (each registry test on SQLite and
PostgreSQL), and never beyond the compression ratio a default reader accepts."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxport
from jaxport import Registry

X = jax.ShapeDtypeStruct((2, 256), jnp.float32)


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "noise": rng.normal(size=(256, 256)).astype(np.float32),  # does not compress
        "small": np.ones(8, np.float32),  # too small to be worth a frame
        "steps": np.repeat(np.arange(64, dtype=np.int32), 1024),  # compresses well
        "zeros": np.zeros((256, 256), np.float32),
    }


def _apply(p: Any, x: jax.Array) -> jax.Array:
    return x @ p["noise"] + p["zeros"][0] + p["small"].sum()


def _model(params: dict[str, np.ndarray] | None = None) -> jaxport.Model:
    return jaxport.Model(params or _params(), _apply, [X])


def _compressions(data: bytes) -> dict[str, str]:
    info = jaxport.inspect(data)
    return {t.path: info.sections[t.section].compression for t in info.tensors}


def test_compress_stores_zstd_where_it_pays_and_reads_back(tmp_path: Path) -> None:
    model = _model()
    raw, packed = model.dumps(), model.dumps(compress=True)
    assert _compressions(raw) == dict.fromkeys(_compressions(raw), "none")
    assert _compressions(packed) == {
        "['noise']": "none",
        "['small']": "none",
        "['steps']": "zstd",
        "['zeros']": "zstd",
    }
    assert len(packed) < len(raw) - 400_000
    assert packed == model.dumps(compress=True)  # deterministic
    model.save(tmp_path / "m.jaxport", compress=True)
    assert (tmp_path / "m.jaxport").read_bytes() == packed
    x = np.ones(X.shape, np.float32)
    for loaded in (jaxport.loads_model(packed), jaxport.load_model(tmp_path / "m.jaxport")):
        np.testing.assert_array_equal(loaded.tensor("['steps']"), _params()["steps"])
        jax.tree.map(np.testing.assert_array_equal, loaded.params, _params())
        np.testing.assert_allclose(loaded.apply(x), model.apply(x), rtol=1e-6)
        assert [t.sha256 for t in loaded.tensors] == [t.sha256 for t in model.tensors]


def test_a_large_all_zero_tensor_stays_raw() -> None:
    """64 MiB of zeros compresses over 1000x: a default reader would refuse it, so the writer
    keeps it raw (``_limits.within_ratio``) and the archive reads without options."""
    params = {"big": np.zeros((4096, 4096), np.float32), "w": np.ones((256, 256), np.float32)}
    model = jaxport.Model(params, lambda p, x: x @ p["w"], [X])
    packed = model.dumps(compress=True)
    assert _compressions(packed) == {"['big']": "none", "['w']": "zstd"}
    np.testing.assert_array_equal(jaxport.loads_model(packed).tensor("['big']"), params["big"])


def test_the_registry_stores_and_pulls_compressed_tensors(registry: Registry) -> None:
    model = _model()
    packed = model.dumps(compress=True)
    first = registry.push(packed, "z")
    assert registry.pull_bytes("z") == packed
    assert first.variants[0].digest == hashlib.sha256(packed).hexdigest()
    pulled = registry.pull_model("z")
    jax.tree.map(np.testing.assert_array_equal, pulled.params, _params())
    report = registry.verify(deep=True)
    assert (report.missing, report.corrupt, report.problems) == ((), (), ())

    changed = {**_params(), "noise": _params(1)["noise"]}  # one raw tensor changes
    before = sum(1 for _ in registry.blobs.digests())
    registry.push(_model(changed).dumps(compress=True), "z")
    assert sum(1 for _ in registry.blobs.digests()) == before + 2  # the tensor and a skeleton
    jax.tree.map(np.testing.assert_array_equal, registry.pull_model("z").params, changed)


def test_inspect_says_how_tensors_are_stored(tmp_path: Path) -> None:
    from test_cli import base_env, fits, run

    env = base_env(tmp_path)
    _model().save(tmp_path / "z.jaxport", compress=True)
    _model().save(tmp_path / "raw.jaxport")
    text = fits(run(env, "inspect", str(tmp_path / "z.jaxport")).out)
    stored = r"^stored +2 tensor\(s\) zstd, 512\.0 KiB in [\d.]+ K?B; the rest raw$"
    assert re.search(stored, text, re.M), text
    assert re.search(
        r"^stored +all raw$", run(env, "inspect", str(tmp_path / "raw.jaxport")).out, re.M
    )
