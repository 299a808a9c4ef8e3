"""The registry with its blobs on S3 (moto's server, ``tests/_s3.py``), on SQLite and
PostgreSQL: pushes and pulls byte for byte (a function and a model), gc, verify finding
corrupt and missing blobs, and credentials given as storage options, as ``AWS_*`` variables
and as ``JAXPORT_BLOBS_OPTIONS``, none of them ever shown."""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from _s3 import S3Server
from jaxport import Registry

SECRET = "wJalrXUtnFEMI-s3cret-K7MDENG"  # a wrong secret, never to be shown


def _archive(scale: float = 2.0) -> bytes:
    exp = jax.export.export(jax.jit(lambda x: x * scale))(jax.ShapeDtypeStruct((3,), jnp.float32))
    return jaxport.dumps(exp)


def _model() -> jaxport.Model:
    rng = np.random.default_rng(0)
    params = {f"w{i}": rng.normal(size=(64, 64)).astype(np.float32) for i in range(3)}
    x = jax.ShapeDtypeStruct((2, 64), jnp.float32)

    def apply(p, x):
        return jnp.tanh(x @ p["w0"]) @ p["w1"] + p["w2"][0]

    return jaxport.Model(params, {"apply": apply}, {"apply": [x]})


def _key(digest: str) -> str:
    return f"sha256/{digest[:2]}/{digest}"


@pytest.fixture
def s3_registry(db_url, s3: S3Server):
    """A Registry on each database backend, its blobs at a fresh S3 prefix (``.blobs.url``),
    credentials given as storage options."""
    with Registry(db_url, blobs=s3.url(), storage_options=s3.storage_options()) as reg:
        yield reg


def test_a_function_is_pulled_back_byte_for_byte(s3_registry, s3):
    archive = _archive()
    ref = s3_registry.push(archive, "f", aliases=["prod"])
    assert ref.digests == (hashlib.sha256(archive).hexdigest(),)
    assert s3.keys(s3_registry.blobs.url) == [_key(ref.digests[0])]
    assert s3_registry.pull_bytes("f@prod") == archive
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(s3_registry.pull("f").call(x), 2 * x)
    assert not s3_registry.push(archive, "f").created
    assert s3_registry.verify().ok


def test_a_model_is_stored_in_parts_and_pulled_back_byte_for_byte(s3_registry, s3):
    model = _model()
    ref = s3_registry.push(model, "m")
    assert len(s3.keys(s3_registry.blobs.url)) == 4  # three tensors and the skeleton
    assert s3_registry.pull_bytes("m") == model.dumps()
    assert hashlib.sha256(model.dumps()).hexdigest() == ref.digests[0]
    x = np.random.default_rng(1).normal(size=(2, 64)).astype(np.float32)
    back = s3_registry.pull_model("m")  # the skeleton through open(), tensors fetched lazily
    np.testing.assert_allclose(back.apply(x), model.apply(x), rtol=1e-6)
    assert s3_registry.verify(deep=True).ok


def test_gc(s3_registry, s3):
    url = s3_registry.blobs.url
    old, new = _archive(2.0), _archive(3.0)
    s3_registry.push(old, "g")
    s3_registry.push(new, "g")
    s3_registry.delete("g", 1)
    gone = hashlib.sha256(old).hexdigest()
    prefix, client = url.removeprefix(f"s3://{s3.bucket}/"), s3.client()
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/tmp/{gone}.killed", Body=b"half")
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/notes.txt", Body=b"not jaxport's")
    young = s3_registry.gc()  # min_age and temp_age: an hour
    assert young.digests == () and young.kept_young == (gone,)
    assert young.kept_temp == (f"tmp/{gone}.killed",) and young.foreign == ("notes.txt",)
    dry = s3_registry.gc(dry_run=True, min_age=0, temp_age=0)
    assert dry.digests == (gone,) and dry.bytes == len(old) and _key(gone) in s3.keys(url)
    report = s3_registry.gc(min_age=0, temp_age=0)
    assert report.digests == (gone,) and report.temp_files == (f"tmp/{gone}.killed",)
    assert s3.keys(url) == sorted(["notes.txt", _key(hashlib.sha256(new).hexdigest())])
    assert s3_registry.pull_bytes("g:2") == new and s3_registry.verify().ok


def test_verify_finds_corrupt_and_missing_blobs(s3_registry, s3):
    a, b = _archive(2.0), _archive(3.0)
    da, db = (s3_registry.push(data, name).digests[0] for data, name in ((a, "a"), (b, "b")))
    prefix, client = s3_registry.blobs.url.removeprefix(f"s3://{s3.bucket}/"), s3.client()
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{_key(da)}", Body=a[:-1] + b"!")
    client.delete_object(Bucket=s3.bucket, Key=f"{prefix}/{_key(db)}")
    report = s3_registry.verify()
    assert not report.ok and report.corrupt == (da,) and report.missing == (db,)
    assert {p.digest: p.used_by for p in report.problems} == {da: ("a:1",), db: ("b:1",)}
    with pytest.raises(jaxport.IntegrityError, match="corrupt"):
        s3_registry.pull_bytes("a")
    with pytest.raises(jaxport.IntegrityError, match=f"missing from {s3_registry.blobs.url}"):
        s3_registry.pull_bytes("b")
    assert s3_registry.push(a, "a").repaired == (da,)
    assert s3_registry.push(b, "b").repaired == (db,)
    assert s3_registry.verify().ok and s3_registry.pull_bytes("b") == b


def test_credentials_from_aws_environment_variables(db_url, s3, monkeypatch):
    for name, value in s3.environ().items():
        monkeypatch.setenv(name, value)
    url, archive = s3.url(), _archive()
    with Registry(db_url, blobs=url) as reg:
        ref = reg.push(archive, "env")
        assert reg.pull_bytes("env") == archive
    assert s3.keys(url) == [_key(ref.digests[0])]


def test_credentials_from_jaxport_blobs_options(db_url, s3, monkeypatch):
    url, archive = s3.url(), _archive()
    monkeypatch.setenv("JAXPORT_BLOBS", url)
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", json.dumps(s3.storage_options()))
    with Registry(db_url) as reg:
        assert reg.blobs.url == url and s3.secret not in repr(reg.blobs)
        reg.push(archive, "opts")
        assert reg.pull_bytes("opts") == archive
    assert len(s3.keys(url)) == 1


def test_no_credential_is_shown(db_url, s3):
    url = s3.url()
    with Registry(db_url, blobs=url, storage_options=s3.storage_options()) as reg:
        reg.push(_archive(), "f")
    with Registry(db_url, blobs=url, storage_options=s3.storage_options(secret=SECRET)) as reg:
        texts = [repr(reg), reg.blobs.url, repr(reg.blobs)]
        for attempt in (
            lambda: reg.push(_archive(5.0), "g"),
            lambda: reg.pull_bytes("f"),
            lambda: reg.verify(),
            lambda: reg.gc(dry_run=True),
        ):
            with pytest.raises(jaxport.RegistryError) as e:
                attempt()
            assert "PermissionError" in str(e.value)
            texts += [str(e.value), repr(e.value)]
    assert all(SECRET not in t and s3.secret not in t for t in texts), texts
