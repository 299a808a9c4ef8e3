"""One conformance suite that every blob store runs: a local directory, and fsspec on memory,
on the local file system and on S3 (moto's server, ``tests/_s3.py``; each test a fresh prefix).
Then what is particular to S3 (one object per write, folder markers, missing buckets,
credentials from options, the environment or nowhere, all of them masked), storage options and
``JAXPORT_BLOBS_OPTIONS``, and the masking of secrets."""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import sys
import time
import types
import uuid

import pytest

import jaxport
from _s3 import S3Server
from jaxport.registry import FsspecBlobStore, LocalBlobStore, Stray, _blobs, open_blob_store
from jaxport.registry._blobs import verify
from jaxport.registry._internal import RegistryConfig
from jaxport.registry._masking import masked, masked_options, secret_values

BACKENDS = ["local", "fsspec-memory", "fsspec-file", "fsspec-s3"]
SECRET = "wJalrXUtnFEMI-s3cret-K7MDENG"  # a fake secret access key, never to be shown
KEY = "AKIAJAXPORTTESTKEY01"  # a fake access key id, masked too


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    if request.param == "fsspec-memory":
        return FsspecBlobStore(f"memory://jaxport-tests/{uuid.uuid4().hex}")
    if request.param == "fsspec-file":
        return FsspecBlobStore(f"local://{tmp_path / 'fs-blobs'}")
    s3 = request.getfixturevalue("s3")
    return FsspecBlobStore(s3.url(), **s3.storage_options())


def _blob(text: bytes) -> tuple[str, bytes]:
    return hashlib.sha256(text).hexdigest(), text


def _plant(store, relative: str, data: bytes) -> None:
    """Writes ``data`` at ``relative`` under the store's root, behind the store's back."""
    if isinstance(store, LocalBlobStore):
        path = store.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return
    path = f"{store._root}/{relative}"
    if not store._s3:  # S3 has no directories
        store._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    store._fs.pipe_file(path, data)


def _frozen_clock(monkeypatch, ahead: float) -> None:
    """The blob stores' clock (only theirs: botocore signs with the real one) runs ``ahead``."""
    now = time.time() + ahead
    monkeypatch.setattr(_blobs, "time", types.SimpleNamespace(time=lambda: now))


# -- the conformance suite ------------------------------------------------------------------


def test_put_get_exists_size(store):
    digest, data = _blob(b"hello")
    assert not store.exists(digest)
    store.put(digest, data)
    assert store.exists(digest) and store.get(digest) == data and store.size(digest) == 5
    store.put(digest, data)  # idempotent
    assert list(store.digests()) == [digest]


def test_a_new_store_is_empty(store):
    assert list(store.digests()) == [] and list(store.strays()) == []


def test_a_missing_blob_is_file_not_found(store):
    for read in (store.get, store.size, store.age):
        with pytest.raises(FileNotFoundError):
            read("a" * 64)
    if isinstance(store, FsspecBlobStore):
        with pytest.raises(FileNotFoundError):
            store.open("a" * 64)


def test_delete_and_listing(store):
    blobs = [_blob(bytes([i]) * 10) for i in range(5)]
    for d, b in blobs:
        store.put(d, b)
    store.delete(blobs[0][0])
    store.delete(blobs[0][0])  # no-op
    assert sorted(store.digests()) == sorted(d for d, _ in blobs[1:])
    assert not store.exists(blobs[0][0])


def test_age_counts_from_the_write(store, monkeypatch):
    """Each filesystem names the modification time its own way (S3: ``LastModified``)."""
    digest, data = _blob(b"x")
    store.put(digest, data)
    _plant(store, f"tmp/{digest}.killed", b"partial")
    assert 0.0 <= store.age(digest) < 600
    _frozen_clock(monkeypatch, ahead=1000.0)
    assert 990 < store.age(digest) < 1010
    (stray,) = store.strays()
    assert stray.kind == "temp" and 990 < stray.age < 1010


def test_replace_rewrites_a_corrupt_blob(store):
    digest, data = _blob(b"the real bytes")
    _plant(store, f"sha256/{digest[:2]}/{digest}", b"rotten")
    store.put(digest, data)  # there already: left alone
    assert store.get(digest) == b"rotten"
    store.put(digest, memoryview(data), replace=True)
    assert store.get(digest) == data and store.size(digest) == len(data)


def test_writes_leave_no_temporary_file(store):
    for i in range(3):
        digest, data = _blob(b"blob %d" % i)
        store.put(digest, data)
        store.put(digest, data, replace=True)
    assert list(store.strays()) == [] and len(list(store.digests())) == 3


def test_strays_and_remove_stray(store):
    digest, data = _blob(b"kept")
    store.put(digest, data)
    temps = [f"tmp/{digest}.dead", f"sha256/{digest[:2]}/.tmp-{digest}.dead", "tmp/odd"]
    for relative in [*temps, "notes.txt", f"sha256/{digest[:2]}/not-a-digest"]:
        _plant(store, relative, b"?")
    found = {s.path: s for s in store.strays()}
    assert sorted(found) == sorted([*temps, "notes.txt", f"sha256/{digest[:2]}/not-a-digest"])
    assert found[temps[0]].digest == found[temps[1]].digest == digest
    assert found["tmp/odd"].digest is None and found["notes.txt"].kind == "foreign"
    for hostile in ("../notes.txt", "tmp/../notes.txt", "tmp//x", "/notes.txt", "notes.txt"):
        store.remove_stray(Stray(hostile, "temp", 1e9))  # no listing makes these: no-ops
    store.remove_stray(found["notes.txt"])  # foreign: never removed
    for relative in temps:
        store.remove_stray(found[relative])
        store.remove_stray(found[relative])  # gone already: a no-op
    assert sorted(s.path for s in store.strays()) == [
        "notes.txt",
        f"sha256/{digest[:2]}/not-a-digest",
    ]
    assert list(store.digests()) == [digest] and store.get(digest) == data


def test_listing_stays_under_the_root(store):
    """A sibling whose name starts with the root's (``<root>2``) is not under it."""
    digest, data = _blob(b"next door")
    if isinstance(store, LocalBlobStore):
        sibling = store.root.parent / (store.root.name + "2") / "sha256" / digest[:2]
        sibling.mkdir(parents=True)
        (sibling / digest).write_bytes(data)
    else:
        path = f"{store._root}2/sha256/{digest[:2]}/{digest}"
        if not store._s3:
            store._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        store._fs.pipe_file(path, data)
    try:
        assert list(store.digests()) == [] and list(store.strays()) == []
        assert not store.exists(digest)
    finally:
        if isinstance(store, FsspecBlobStore):
            store._fs.rm_file(path)


def test_rejects_non_digest_keys(store):
    with pytest.raises(ValueError):
        store.put("../../etc/passwd", b"")
    with pytest.raises(jaxport.InvalidNameError):
        store.get("A" * 64)


def test_open_reads_ranges(store):
    if not isinstance(store, FsspecBlobStore):
        pytest.skip("open() is FsspecBlobStore's (LocalBlobStore has path())")
    digest, data = _blob(bytes(range(256)) * 64)
    store.put(digest, data)
    with store.open(digest) as f:
        f.seek(1000)
        assert f.read(16) == data[1000:1016]


def test_a_local_blob_and_every_directory_made_for_it_are_fsynced(tmp_path, monkeypatch):
    """POSIX makes a new directory entry durable only by an fsync of its parent: the first blob
    of a prefix fsyncs the file, its prefix directory and each directory made for it into its
    parent (``_io.make_durable_dirs``); a second blob of that prefix only the file and the
    prefix directory."""
    import os
    import stat

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if stat.S_ISDIR(st.st_mode) else "file")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = LocalBlobStore(tmp_path / "blobs")
    digest, data = _blob(b"first of its prefix")
    store.put(digest, data)
    prefix = str(tmp_path / "blobs" / "sha256" / digest[:2])
    made = [str(tmp_path), str(tmp_path / "blobs"), str(tmp_path / "blobs" / "sha256")]
    assert synced[:3] == made and synced[3:] == ["file", prefix]
    synced.clear()
    other = next(_blob(b"%d" % i) for i in range(999) if _blob(b"%d" % i)[0][:2] == digest[:2])
    store.put(*other)
    assert synced == ["file", prefix]


def test_verify():
    digest, data = _blob(b"abc")
    assert verify(digest, data) == data
    with pytest.raises(jaxport.IntegrityError):
        verify(digest, b"abd")


@pytest.mark.parametrize(
    ("info", "seconds_ago"),
    [
        ({"LastModified": datetime.datetime.fromtimestamp(1000.0, datetime.UTC)}, 1000.0),
        ({"mtime": 1500.0}, 500.0),
        ({"last_modified": datetime.datetime.fromtimestamp(1800.0, datetime.UTC)}, 200.0),
        ({"updated": "1970-01-01T00:30:00Z"}, 200.0),
        ({"created": 1900}, 100.0),
        ({"size": 3, "updated": "not a time"}, 0.0),
        ({"mtime": 3000.0}, 0.0),  # a clock behind the store's: never negative
    ],
)
def test_age_reads_each_filesystems_time(monkeypatch, info, seconds_ago):
    monkeypatch.setattr(_blobs, "time", types.SimpleNamespace(time=lambda: 2000.0))
    assert _blobs.age_of(info) == pytest.approx(seconds_ago)


def test_open_blob_store(tmp_path):
    assert isinstance(open_blob_store(tmp_path), LocalBlobStore)
    assert isinstance(open_blob_store(f"file://{tmp_path}"), LocalBlobStore)
    assert isinstance(open_blob_store("memory://x"), FsspecBlobStore)
    store = open_blob_store("memory://x", {"skip_instance_cache": True})
    assert isinstance(store, FsspecBlobStore) and open_blob_store(store) is store


def test_registry_on_an_fsspec_store(tmp_path):
    import jax
    import jax.numpy as jnp

    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3))
    with jaxport.Registry(
        f"sqlite:///{tmp_path / 'r.db'}", blobs=f"memory://{uuid.uuid4().hex}"
    ) as reg:
        reg.push(exp, "s")
        assert reg.pull("s").fun_name == "sin"


# -- S3 -------------------------------------------------------------------------------------


def test_s3_a_write_is_one_object(s3: S3Server):
    """S3 has no rename: a blob is one PUT to its key, no temporary object, no "directory"."""
    url = s3.url()
    store = FsspecBlobStore(url, **s3.storage_options())
    digest, data = _blob(b"one object")
    store.put(digest, data)
    store.put(digest, data, replace=True)
    assert s3.keys(url) == [f"sha256/{digest[:2]}/{digest}"]


@pytest.mark.parametrize("cached", [False, True])
def test_s3_sees_what_others_change(s3: S3Server, cached):
    """Other processes add and remove blobs: after a listing, ``exists`` and ``put`` still ask
    S3 (s3fs's listings cache is off unless ``use_listings_cache`` is given)."""
    url = s3.url()
    options = s3.storage_options(**({"use_listings_cache": True} if cached else {}))
    store = FsspecBlobStore(url, **options)
    (d1, b1), (d2, b2) = _blob(b"one"), _blob(b"two")
    store.put(d1, b1)
    assert list(store.digests()) == [d1]
    client, prefix = s3.client(), url.removeprefix(f"s3://{s3.bucket}/")
    client.delete_object(Bucket=s3.bucket, Key=f"{prefix}/sha256/{d1[:2]}/{d1}")
    client.put_object(Bucket=s3.bucket, Key=f"{prefix}/sha256/{d2[:2]}/{d2}", Body=b2)
    if cached:  # what s3fs's cache does: the old listing is taken for the truth
        assert store.exists(d1)
        return
    assert not store.exists(d1) and store.exists(d2)
    store.put(d1, b1)  # really written again
    assert s3.keys(url) == sorted(f"sha256/{d[:2]}/{d}" for d in (d1, d2))


def test_s3_folder_markers_and_odd_keys(s3: S3Server):
    """Zero-byte "folder" keys (``sha256/``, as S3 consoles make them) are not files; keys a
    local path could not have (``..``, ``//``) are foreign, reported and never removed."""
    url = s3.url()
    store = FsspecBlobStore(url, **s3.storage_options())
    digest, data = _blob(b"a blob")
    store.put(digest, data)
    prefix = url.removeprefix(f"s3://{s3.bucket}/")
    client = s3.client()
    for key in ("sha256/", f"sha256/{digest[:2]}/", "../escape", "a//b", "tmp/../x"):
        client.put_object(
            Bucket=s3.bucket, Key=f"{prefix}/{key}", Body=b"" if key[-1] == "/" else b"?"
        )
    strays = list(store.strays())
    assert sorted(s.path for s in strays) == ["../escape", "a//b", "tmp/../x"]
    assert {s.kind for s in strays} == {"foreign"}
    for stray in [*strays, *(Stray(s.path, "temp", 1e9) for s in strays)]:
        store.remove_stray(stray)
    assert len(s3.keys(url)) == 6 and list(store.digests()) == [digest]


def test_s3_a_missing_bucket_is_a_registry_error_and_is_not_created(s3: S3Server):
    store = FsspecBlobStore("s3://no-such-bucket-jaxport/p", **s3.storage_options())
    digest, data = _blob(b"x")
    with pytest.raises(jaxport.RegistryError, match="bucket does not exist"):
        store.put(digest, data)
    with pytest.raises(jaxport.RegistryError, match="listing failed"):
        list(store.digests())
    buckets = [b["Name"] for b in s3.client().list_buckets()["Buckets"]]
    assert buckets == [s3.bucket]


def test_s3_credentials_from_the_environment(s3: S3Server, monkeypatch):
    """No options: s3fs (botocore) reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_ENDPOINT_URL and AWS_DEFAULT_REGION; the server refuses anything else."""
    url = s3.url()
    digest, data = _blob(b"from the environment")
    with pytest.raises(jaxport.RegistryError, match=r"NoCredentialsError|credentials"):
        FsspecBlobStore(url, endpoint_url=s3.endpoint_url).put(digest, data)
    for name, value in s3.environ().items():
        monkeypatch.setenv(name, value)
    store = open_blob_store(url)
    store.put(digest, data)
    assert store.get(digest) == data and list(store.digests()) == [digest]
    assert s3.keys(url) == [f"sha256/{digest[:2]}/{digest}"]


def test_s3_wrong_credentials_are_registry_errors_that_do_not_show_them(s3: S3Server):
    url = s3.url()
    good = FsspecBlobStore(url, **s3.storage_options())
    digest, data = _blob(b"guarded")
    good.put(digest, data)
    for options in (
        s3.storage_options(secret=SECRET),
        s3.storage_options(key=KEY, secret=SECRET),
        s3.storage_options(key=None, secret=None, client_kwargs={
            "region_name": s3.region, "aws_access_key_id": KEY, "aws_secret_access_key": SECRET,
        }),
    ):  # fmt: skip
        store = FsspecBlobStore(url, **options)
        calls = [
            lambda store=store: store.put(_blob(b"other")[0], b"other"),
            lambda store=store: store.get(digest),
            lambda store=store: store.exists(digest),
            lambda store=store: store.size(digest),
            lambda store=store: list(store.digests()),
            lambda store=store: store.delete(digest),
        ]
        for call in calls:
            with pytest.raises(jaxport.RegistryError) as e:
                call()
            assert "PermissionError" in str(e.value)
            for shown in (str(e.value), repr(e.value), repr(store), store.url):
                assert SECRET not in shown and KEY not in shown and s3.secret not in shown
    assert good.get(digest) == data


def test_s3_credentials_in_the_url_are_masked(s3: S3Server):
    """s3fs takes no credentials in a URL: botocore refuses ``KEY:SECRET@bucket`` as a bucket
    name, in a message that repeats it; the store masks it."""
    store = FsspecBlobStore(f"s3://{KEY}:{SECRET}@{s3.bucket}/p", **s3.storage_options())
    assert store.url == f"s3://{KEY}:***@{s3.bucket}/p"
    with pytest.raises(jaxport.RegistryError) as e:
        store.put(*_blob(b"x"))
    assert "bucket" in str(e.value) and SECRET not in str(e.value) and SECRET not in repr(store)


def test_s3_repr_shows_options_with_their_secrets_masked(s3: S3Server):
    store = FsspecBlobStore(
        f"s3://{s3.bucket}/p", **s3.storage_options(key=KEY, secret=SECRET, token=SECRET)
    )
    shown = repr(store)
    assert shown == (
        f"FsspecBlobStore('s3://{s3.bucket}/p', **{{'endpoint_url': '{s3.endpoint_url}', "
        "'key': '***', 'secret': '***', 'client_kwargs': {'region_name': 'us-east-1'}, "
        "'token': '***'})"
    )
    with jaxport.Registry(
        "sqlite:///:memory:", blobs=f"s3://{s3.bucket}/p", storage_options={"secret": SECRET}
    ) as registry:
        assert SECRET not in repr(registry) and SECRET not in registry.blobs.url


def test_a_missing_s3fs_names_the_extra_to_install():
    code = (
        "import sys; sys.modules['s3fs'] = None\n"
        "from jaxport.registry import open_blob_store\n"
        "open_blob_store('s3://bucket/prefix', {'secret': 'never-shown'})\n"
    )
    result = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=False
    )
    assert "RegistryError: the blob store s3:// needs s3fs: pip install 'jaxport[s3]'" in (
        result.stderr
    )
    assert "never-shown" not in result.stderr


# -- storage options ------------------------------------------------------------------------


def test_storage_options_are_for_urls_only(tmp_path):
    for location in (tmp_path, str(tmp_path), f"file://{tmp_path}", LocalBlobStore(tmp_path)):
        with pytest.raises(jaxport.RegistryError, match="storage_options are for"):
            open_blob_store(location, {"key": KEY})
    with pytest.raises(jaxport.RegistryError, match="storage_options are for"):
        jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", storage_options={"anon": True})
    assert isinstance(open_blob_store(tmp_path, {}), LocalBlobStore)


def test_jaxport_blobs_options(tmp_path, monkeypatch):
    """Read for a blob store at a URL, left alone for a local directory, never shown."""
    text = json.dumps({"key": KEY, "secret": SECRET, "client_kwargs": {"region_name": "x"}})
    config = RegistryConfig.from_env({"JAXPORT_BLOBS_OPTIONS": text})
    assert config.storage_options("s3://b/p") == json.loads(text)
    assert config.storage_options(str(tmp_path)) is None
    assert config.storage_options("file:///tmp/b") is None
    assert RegistryConfig.from_env({}).storage_options("s3://b/p") is None
    assert SECRET not in repr(config)
    for bad, why in (
        (text[:-1], "not valid JSON"),
        (json.dumps([SECRET]), "must be a JSON object"),
    ):
        with pytest.raises(jaxport.RegistryError, match=why) as e:
            RegistryConfig.from_env({"JAXPORT_BLOBS_OPTIONS": bad}).storage_options("s3://b/p")
        assert SECRET not in str(e.value) and KEY not in str(e.value)
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", text)
    with jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}") as reg:  # local blobs: not used
        assert isinstance(reg.blobs, LocalBlobStore)
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", json.dumps({"listings_expiry_time": 7}))
    with jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs="memory://opts") as reg:
        assert reg.blobs._fs.storage_options == {"listings_expiry_time": 7}


# -- masking --------------------------------------------------------------------------------


def test_secret_values_of_urls_and_options():
    options = {
        "endpoint_url": "https://user:pa%2Fss@minio:9000",
        "key": KEY,
        "secret": SECRET,
        "anon": False,
        "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": "tok-123"},
        "config_kwargs": {"signature_version": "s3v4"},
        "token": "",
    }
    found = secret_values("ftp://bob:hunter2@host/p", options)
    assert found == {"hunter2", KEY, SECRET, "tok-123", "pa%2Fss", "pa/ss"}
    text = f"failed for {KEY} with {SECRET} at https://user:pa%2Fss@minio:9000 (hunter2)"
    assert masked(text, found) == "failed for *** with *** at https://user:***@minio:9000 (***)"
    assert masked_options(options) == {
        "endpoint_url": "https://user:***@minio:9000",
        "key": "***",
        "secret": "***",
        "anon": False,
        "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": "***"},
        "config_kwargs": {"signature_version": "s3v4"},
        "token": "***",
    }
