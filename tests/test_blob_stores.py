"""One conformance suite that every blob store runs: local directory and fsspec."""

from __future__ import annotations

import hashlib
import uuid

import pytest

import jaxport
from jaxport.registry import FsspecBlobStore, LocalBlobStore, open_blob_store
from jaxport.registry._blobs import verify


@pytest.fixture(params=["local", "fsspec-memory", "fsspec-file"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    if request.param == "fsspec-memory":
        return FsspecBlobStore(f"memory://jaxport-tests/{uuid.uuid4().hex}")
    return FsspecBlobStore(f"local://{tmp_path / 'fs-blobs'}")


def _blob(text: bytes) -> tuple[str, bytes]:
    return hashlib.sha256(text).hexdigest(), text


def test_put_get_exists_size(store):
    digest, data = _blob(b"hello")
    assert not store.exists(digest)
    store.put(digest, data)
    assert store.exists(digest) and store.get(digest) == data and store.size(digest) == 5
    store.put(digest, data)  # idempotent
    assert list(store.digests()) == [digest]


def test_missing_blob_is_file_not_found(store):
    with pytest.raises(FileNotFoundError):
        store.get("a" * 64)


def test_delete_and_listing(store):
    blobs = [_blob(bytes([i]) * 10) for i in range(5)]
    for d, b in blobs:
        store.put(d, b)
    store.delete(blobs[0][0])
    store.delete(blobs[0][0])  # no-op
    assert sorted(store.digests()) == sorted(d for d, _ in blobs[1:])


def test_age_is_non_negative(store):
    digest, data = _blob(b"x")
    store.put(digest, data)
    assert store.age(digest) >= 0.0


def test_rejects_non_digest_keys(store):
    with pytest.raises(ValueError):
        store.put("../../etc/passwd", b"")


def test_verify():
    digest, data = _blob(b"abc")
    assert verify(digest, data) == data
    with pytest.raises(jaxport.IntegrityError):
        verify(digest, b"abd")


def test_open_blob_store(tmp_path):
    assert isinstance(open_blob_store(tmp_path), LocalBlobStore)
    assert isinstance(open_blob_store(f"file://{tmp_path}"), LocalBlobStore)
    assert isinstance(open_blob_store("memory://x"), FsspecBlobStore)


def test_registry_on_an_fsspec_store(tmp_path):
    import jax
    import jax.numpy as jnp

    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3))
    with jaxport.Registry(
        f"sqlite:///{tmp_path / 'r.db'}", blobs=f"memory://{uuid.uuid4().hex}"
    ) as reg:
        reg.push(exp, "s")
        assert reg.pull("s").fun_name == "sin"
