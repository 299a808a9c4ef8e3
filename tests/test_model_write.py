"""Writing and verifying model archives fast: Model.save writes the tensors, then hashes them
while the disk writes them (the header, which holds the digests, goes last); a tensor read from
an archive is not hashed again; Model.params verifies tensors in threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport._io import atomic_write
from jaxport.export import _container


def params() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    return {
        "a": rng.normal(size=(3,)).astype(np.float32),
        "big": [rng.normal(size=(256, 64)).astype(np.float32) for _ in range(6)],
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.asarray(3, np.int32),
    }


def apply(p: Any, x: Any) -> Any:
    return x * p["a"] + p["big"][0][0, :3] + p["scalar"]


@pytest.fixture(scope="module")
def model() -> jaxport.Model:
    return jaxport.Model(params(), apply, [jax.ShapeDtypeStruct((3,), jnp.float32)])


def test_save_writes_the_bytes_of_dumps(model: jaxport.Model, tmp_path: Path) -> None:
    model.save(tmp_path / "m.jaxport")
    assert (tmp_path / "m.jaxport").read_bytes() == model.dumps()
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    loaded.save(tmp_path / "again.jaxport")  # a loaded model, tensors mapped from a file
    assert (tmp_path / "again.jaxport").read_bytes() == model.dumps()
    assert not list(tmp_path.glob(".tmp-*"))


def _corrupt(data: bytes, paths: list[str]) -> bytes:
    info = jaxport.inspect(data)
    start = _container.PREAMBLE_LENGTH + info.header_length
    out = bytearray(data)
    for t in info.tensors:
        if t.path in paths:
            out[start + info.sections[t.section].offset] ^= 0xFF
    return bytes(out)


def test_params_reports_the_first_bad_tensor(model: jaxport.Model) -> None:
    bad = _corrupt(model.dumps(), ["['big'][4]", "['big'][1]"])
    loaded = jaxport.loads_model(bad)
    with pytest.raises(jaxport.IntegrityError, match=r"\['big'\]\[1\]"):
        loaded.params  # noqa: B018
    np.testing.assert_array_equal(loaded.tensor("['big'][2]"), params()["big"][2])
    with pytest.raises(jaxport.IntegrityError, match=r"\['big'\]\[4\]"):
        loaded.tensor("['big'][4]")


def test_each_tensor_is_read_once_by_concurrent_callers(model: jaxport.Model) -> None:
    loaded = jaxport.loads_model(model.dumps())
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(loaded.params)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loaded.bytes_read == sum(t.nbytes for t in loaded.tensors)
    for r in results:
        jax.tree.map(np.testing.assert_array_equal, r, params())


def test_atomic_write_head_overwrites_the_start(tmp_path: Path) -> None:
    atomic_write(tmp_path / "f", [b"....", b"tail"], head=lambda: b"HE")
    assert (tmp_path / "f").read_bytes() == b"HE..tail"

    def failing() -> bytes:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(tmp_path / "g", [b"data"], head=failing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary file left


def test_update_params_keeps_the_digests_of_unchanged_verified_tensors(
    model: jaxport.Model, tmp_path: Path
) -> None:
    model.save(tmp_path / "m.jaxport")
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    new = loaded.params  # read-only views, each checked against its digest
    new["big"] = [*new["big"][:2], new["big"][2] + 1, *new["big"][3:]]
    updated = loaded.update_params(new)
    known = updated._store.known_digests()
    changed = [t.path for t, k in zip(loaded.tensors, known, strict=True) if k is None]
    assert changed == ["['big'][2]"]  # only the new array is hashed when saved
    fresh = model.update_params(jax.tree.map(np.array, new))  # copies: every tensor hashed
    updated.save(tmp_path / "u.jaxport")
    assert (tmp_path / "u.jaxport").read_bytes() == fresh.dumps()


def test_arrays_in_memory_are_hashed_at_every_save(tmp_path: Path) -> None:
    mine = params()
    m = jaxport.Model(mine, apply, [jax.ShapeDtypeStruct((3,), jnp.float32)])
    assert m._store.known_digests() == [None] * len(m.tensors)
    m.save(tmp_path / "1.jaxport")
    mine["big"][0][0, 0] += 1  # the caller's array, which the model may share
    m.save(tmp_path / "2.jaxport")
    saved = jaxport.load_model(tmp_path / "2.jaxport")
    jax.tree.map(np.testing.assert_array_equal, saved.params, m.params)  # digests hold


def test_tensors_read_from_a_writable_buffer_are_hashed_again(
    model: jaxport.Model, tmp_path: Path
) -> None:
    """A bytearray may change after a tensor was verified: its digest is not reused, and the
    array over it cannot be made writable."""
    buf = bytearray(model.dumps())
    loaded = jaxport.loads_model(buf)
    w = loaded.tensor("['big'][0]")
    with pytest.raises(ValueError, match="WRITEABLE"):
        w.flags.writeable = True
    assert loaded._store.known_digests() == [None] * len(loaded.tensors)
    start = bytes(buf).find(params()["big"][0].tobytes())
    buf[start] ^= 0xFF  # the caller reuses its buffer
    loaded.save(tmp_path / "m.jaxport")
    saved = jaxport.load_model(tmp_path / "m.jaxport").tensor("['big'][0]")
    np.testing.assert_array_equal(saved, w)  # the bytes as they are now, with their digest


def test_atomic_write_refuses_a_head_longer_than_the_chunks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="head of 10 bytes over 2 written"):
        atomic_write(tmp_path / "f", [b"xx"], head=lambda: b"HEADLONGER")
    assert list(tmp_path.iterdir()) == []
