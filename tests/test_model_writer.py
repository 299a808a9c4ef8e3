"""Model.save's writer (export/_model_writer.py): threads hash each tensor a chunk at a time
and hand each chunk to the caller's thread, which writes it at its own offset (and hashes a
tensor itself while every hashing thread is busy); runs of small tensors go as one write; the
disk is asked to write as they go, and the header goes last. The file is the bytes of
``dumps`` whatever the order of the writes; a failed write leaves no file and the old one as
it was."""

from __future__ import annotations

import hashlib
import os
import threading
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.export import _model_archive, _model_writer

KIB = 1024


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks, groups and flushes of a few KiB, so that small tensors take every path."""
    monkeypatch.setattr(_model_writer, "CHUNK", 4 * KIB)
    monkeypatch.setattr(_model_writer, "GROUP_BYTES", 16 * KIB)
    monkeypatch.setattr(_model_writer, "FLUSH_BYTES", 32 * KIB)


def params(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.normal(size=(3,)).astype(np.float32),
        "big": [rng.normal(size=(64, 64 + i)).astype(np.float32) for i in range(5)],  # ~16 KiB
        "huge": rng.normal(size=(256, 257)).astype(np.float32),  # ~257 KiB: 65 chunks
        "small": [rng.integers(0, 9, size=(i + 1, 7)).astype(np.int8) for i in range(40)],
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.asarray(3, np.int32),
    }


def apply(p: Any, x: Any) -> Any:
    return x * p["a"] + p["huge"][0, :3] + p["scalar"]


def model_of(p: Any) -> jaxport.Model:
    return jaxport.Model(p, apply, [jax.ShapeDtypeStruct((3,), jnp.float32)])


def test_the_file_is_the_bytes_of_dumps(tmp_path: Path) -> None:
    model = model_of(params())
    model.save(tmp_path / "m.jaxport")
    assert (tmp_path / "m.jaxport").read_bytes() == model.dumps()
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    jax.tree.map(np.testing.assert_array_equal, loaded.params, params())
    assert not list(tmp_path.glob(".tmp-*"))


def test_jobs_join_small_tensors_and_keep_large_ones_whole() -> None:
    layout = _model_archive.model_layout(model_of(params())._contents(False))
    jobs = _model_writer._jobs(layout)
    covered = sorted(i for j in jobs for i in j.indices)
    assert covered == list(range(len(layout.tensors)))  # each tensor in one job
    for job in jobs:
        if len(job.indices) > 1:
            assert len(job.data) <= _model_writer.GROUP_BYTES
            assert all(len(layout.tensors[i][1]) < _model_writer.CHUNK for i in job.indices)
        for i, start in zip(job.indices, job.starts, strict=True):
            offset, data = layout.tensors[i]
            assert job.offset + start == offset
            assert bytes(memoryview(job.data)[start : start + len(data)]) == bytes(data)
    assert [len(j.data) for j in jobs] == sorted(len(j.data) for j in jobs)  # largest last


def test_one_large_tensor_is_hashed_by_one_thread_and_written_by_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hashing thread hands its chunks to the caller's thread, the only one that writes."""
    big = np.random.default_rng(2).normal(size=(512, 512)).astype(np.float32)  # 1 MiB
    model = jaxport.Model(
        {"w": big}, lambda p, x: x + p["w"][0, :3], [jax.ShapeDtypeStruct((3,), jnp.float32)]
    )
    writers: set[str] = set()
    hashers: set[str] = set()
    pwrite, sha256 = os.pwrite, hashlib.sha256

    def recording_pwrite(fd: int, data: Any, offset: int) -> int:
        writers.add(threading.current_thread().name)
        return pwrite(fd, data, offset)

    class Recording:
        def __init__(self, data: Any = b"") -> None:
            self._hash = sha256(data)

        def update(self, data: Any) -> None:
            hashers.add(threading.current_thread().name)
            self._hash.update(data)

        def digest(self) -> bytes:
            return self._hash.digest()

    monkeypatch.setattr(_model_writer.os, "pwrite", recording_pwrite)
    monkeypatch.setattr(_model_writer, "hashlib", types.SimpleNamespace(sha256=Recording))
    model.save(tmp_path / "m.jaxport")
    monkeypatch.undo()
    assert writers == {threading.current_thread().name}
    assert hashers == {"jaxport-model-hash"}
    assert (tmp_path / "m.jaxport").read_bytes() == model.dumps()


def test_verified_tensors_are_written_not_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(params())
    model.save(tmp_path / "m.jaxport")
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    loaded.params  # noqa: B018  every tensor verified: its digest is known
    hashed: list[int] = []
    sha256 = hashlib.sha256

    def counting(data: Any = b"") -> Any:
        hashed.append(len(memoryview(data)))
        return sha256(data)

    monkeypatch.setattr(_model_writer.hashlib, "sha256", counting)
    loaded.save(tmp_path / "again.jaxport")
    monkeypatch.undo()
    assert (tmp_path / "again.jaxport").read_bytes() == model.dumps()
    sizes = {t.nbytes for t in jax.tree.leaves(params()) if t.nbytes}
    assert not sizes & set(hashed)  # no tensor hashed again (the modules' section is)


def test_a_failed_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "m.jaxport"
    target.write_bytes(b"old")
    calls = 0
    pwrite = os.pwrite

    def failing(fd: int, data: Any, offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 7:
            raise OSError(28, "No space left on device")
        return pwrite(fd, data, offset)

    monkeypatch.setattr(_model_writer.os, "pwrite", failing)
    with pytest.raises(OSError, match="No space left"):
        model_of(params()).save(target)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jaxport"]  # no temporary file


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pwrite = os.pwrite

    def short(fd: int, data: Any, offset: int) -> int:
        return pwrite(fd, memoryview(data)[:1000], offset)  # at most 1000 bytes a call

    monkeypatch.setattr(_model_writer.os, "pwrite", short)
    model = model_of(params(1))
    model.save(tmp_path / "m.jaxport")
    assert (tmp_path / "m.jaxport").read_bytes() == model.dumps()


def test_a_model_updated_from_a_file_saves_the_new_tensor_with_its_digest(tmp_path: Path) -> None:
    model = model_of(params())
    model.save(tmp_path / "m.jaxport")
    loaded = jaxport.load_model(tmp_path / "m.jaxport")
    new = loaded.params
    new["huge"] = new["huge"] + np.float32(1)
    updated = loaded.update_params(new)
    updated.save(tmp_path / "u.jaxport")
    expected = model.update_params(jax.tree.map(np.array, new)).dumps()
    assert (tmp_path / "u.jaxport").read_bytes() == expected
    np.testing.assert_array_equal(
        jaxport.load_model(tmp_path / "u.jaxport").tensor("['huge']"), new["huge"]
    )


def test_model_layout_refuses_compressed_contents() -> None:
    contents = model_of(params())._contents(True)
    with pytest.raises(ValueError, match="raw tensors"):
        _model_archive.model_layout(contents)


def test_chunks_are_cut_at_multiples_of_chunk_in_the_file() -> None:
    chunk = _model_writer.CHUNK
    assert _model_writer._chunks(0, 2 * chunk + 5) == [
        (0, chunk),
        (chunk, 2 * chunk),
        (2 * chunk, 2 * chunk + 5),
    ]
    assert _model_writer._chunks(chunk - 64, chunk + 10) == [(0, 64), (64, chunk + 10)]
    assert _model_writer._chunks(64, 10) == [(0, 10)]
    assert _model_writer._chunks(64, 0) == []
