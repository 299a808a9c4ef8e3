"""What you push is what you pull: verbatim archives, jax-native conversion, repairs, verify,
gc beside a push, and the API's input checks (each test on SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from _helpers import FaultyBlobStore
from jaxport import Registry


def _exp(fun=jnp.sin, shape=(4,), platforms=None):
    return jax.export.export(jax.jit(fun), platforms=platforms)(
        jax.ShapeDtypeStruct(shape, jnp.float32)
    )


def _poly():
    (b,) = jax.export.symbolic_shape("b", constraints=["b >= 2"])
    return jax.export.export(jax.jit(jnp.cos))(jax.ShapeDtypeStruct((b, 3), jnp.float32))


def test_archive_is_stored_verbatim_with_its_own_vjp_order_and_metadata(registry, tmp_path):
    path = tmp_path / "sin.jaxport"
    jaxport.save(_exp(), path, vjp_order=1, metadata={"author": "a"})
    native = _exp(jnp.cos, platforms=("tpu",)).serialize(vjp_order=2)
    ref = registry.push(
        [path, native, _exp(jnp.tan, platforms=("cuda",))], "v", metadata={"k": "v"}
    )
    data = path.read_bytes()
    assert ref.digests[0] == hashlib.sha256(data).hexdigest()
    assert registry.pull_bytes("v", platform="cpu") == data
    assert [v.vjp_order for v in ref.variants] == [1, 2, 0]
    assert ref.variants[0].metadata == {"author": "a"} and ref.metadata == {"k": "v"}
    grad = jax.grad(lambda x: registry.pull("v", platform="cpu").call(x).sum())(jnp.ones(4))
    np.testing.assert_allclose(grad, np.cos(np.ones(4)), rtol=1e-6)


def test_same_archive_with_other_metadata_is_the_same_version(registry, tmp_path):
    path = tmp_path / "a.jaxport"
    jaxport.save(_exp(), path)
    first = registry.push(path, "m", metadata={"build": "1"})
    again = registry.push(path.read_bytes(), "m", metadata={"build": "2"})
    assert (again.version, again.created) == (first.version, False)
    assert again.metadata == {"build": "1"} and "metadata is kept" in again.notes[0]


def test_jax_native_bytes_record_unknown_producer_and_lost_constraints(registry):
    ref = registry.push(_poly().serialize(), "poly")
    v = ref.variants[0]
    assert (v.jax_version, v.jaxlib_version) == ("unknown", "unknown")
    assert any("producer's jax version" in n for n in ref.notes)
    assert any("symbolic-shape constraints" in n for n in ref.notes)
    assert registry.push(_poly(), "poly2").notes == ()  # an Exported keeps its constraints


def _native_with_long_dimension(terms):
    """jax-native bytes whose one symbolic dimension has ``terms`` terms (written by jax's own
    serializer with the dimension's text replaced): 20,000 terms make a 508 KB file that jax's
    reader parsed for over two minutes."""
    import flatbuffers

    (b,) = jax.export.symbolic_shape("b")
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((b,), jnp.float32))
    text = " + ".join(f"a{i}" for i in range(terms))
    original = flatbuffers.Builder.CreateString

    def create(self, s, *args, **kwargs):
        return original(self, text if s == "b" else s, *args, **kwargs)

    flatbuffers.Builder.CreateString = create
    try:
        return bytes(exp.serialize())
    finally:
        flatbuffers.Builder.CreateString = original


def test_a_native_dimension_of_20000_terms_is_refused_before_jax_parses_it(registry, tmp_path):
    data = _native_with_long_dimension(20_000)
    assert len(data) > 300_000  # 508 KB under jax 0.10.2, 340 KB under 0.7.0's writer
    with pytest.raises(jaxport.UnsupportedFeatureError) as refused:
        registry.push(data, "long")
    assert "longer than 256 characters; refused before jax parsed them" in str(refused.value)
    assert registry.names() == []
    (tmp_path / "long.jaxexport").write_bytes(data)  # rescue applies the same limit first
    with pytest.raises(jaxport.UnsupportedFeatureError, match="refused before jax parsed it"):
        jaxport.rescue(tmp_path / "long.jaxexport", tmp_path / "out.jaxport", python="/nowhere")


def test_bad_sources_are_refused(registry, tmp_path):
    with pytest.raises(jaxport.CorruptArchiveError, match="neither a jaxport archive"):
        registry.push(b"not an archive", "x")
    with pytest.raises(jaxport.NotFoundError, match="no such file"):
        registry.push(tmp_path / "missing.jaxport", "x")
    with pytest.raises(jaxport.InvalidNameError, match="push takes"):
        registry.push(3.5, "x")
    truncated = jaxport.dumps(_exp())[:-10]
    with pytest.raises(jaxport.CorruptArchiveError):
        registry.push(truncated, "x")
    assert registry.names() == []


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_repush_repairs_a_missing_or_corrupt_blob(registry, damage):
    ref = registry.push(_exp(), "r")
    digest = ref.digests[0]
    path = registry.blobs.root / "sha256" / digest[:2] / digest
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(b"garbage")
    report = registry.verify()
    assert not report.ok and report.problems[0].used_by == ("r:1",)
    assert report.problems[0].state == ("missing" if damage == "delete" else "corrupt")
    again = registry.push(_exp(), "r")
    assert (again.version, again.created, again.repaired) == (1, False, (digest,))
    assert registry.verify().ok and registry.pull("r") is not None


def test_gc_beside_a_push_keeps_what_the_push_needs(db_url, tmp_path):
    store = FaultyBlobStore(tmp_path / "blobs")
    with Registry(db_url, blobs=store) as reg, Registry(db_url, blobs=store) as other:
        old = reg.push(_exp(), "g")
        reg.delete("g", old.version)  # its blob is unreferenced now, and old
        reports = []
        store.before_put = lambda digest: reports.append(other.gc(min_age=0))
        again = reg.push(_exp(), "g")  # the same content: the push reuses the blob
        store.before_put = None
        assert reports and reports[0].kept_pending == again.digests
        assert reg.verify().ok and reg.pull("g:2") is not None
        reg.delete("g", again.version)
        assert reg.gc(min_age=0).digests == again.digests


def test_gc_collects_stale_temp_files_and_reports_foreign_files(registry):
    root = registry.blobs.root
    (root / "sha256" / "ab").mkdir(parents=True)
    temp = root / "sha256" / "ab" / ".tmp-abc.123"
    temp.write_bytes(b"half a blob")
    (root / "README.txt").write_text("not ours")
    young = registry.gc(min_age=0)
    assert young.temp_files == () and young.foreign == ("README.txt",)
    report = registry.gc(min_age=0, temp_age=0)
    assert report.temp_files == ("sha256/ab/.tmp-abc.123",) and not temp.exists()
    assert (root / "README.txt").exists() and registry.verify().ok


def test_gc_dry_run_agrees_with_verify_about_unreferenced_blobs(registry):
    registry.push(_exp(), "a")
    gone = registry.push(_exp(jnp.cos), "a")
    registry.delete("a", gone.version)
    registry.blobs.put("0" * 64, b"young orphan")
    dry = registry.gc(dry_run=True)
    assert set(dry.digests + dry.kept_young) == set(registry.verify().unreferenced)
    assert dry.kept_young  # within --min-age


def test_digest_prefix_references(registry):
    ref = registry.push(_exp(), "d")
    short = ref.variants[0].short_digest
    assert short == "sha256:" + ref.digests[0][:12]
    assert registry.get(short).version == 1
    assert registry.resolve(short).chosen.digest == ref.digests[0]
    assert registry.pull_bytes(short) == registry.pull_bytes("d")
    with pytest.raises(jaxport.InvalidNameError):
        registry.get("sha256:abc")  # too short
    with pytest.raises(jaxport.NotFoundError):
        registry.get("sha256:" + "f" * 12 if not ref.digests[0].startswith("f") else "0" * 12)


def test_delete_a_whole_name(registry):
    registry.push(_exp(), "w", aliases=["prod"])
    registry.push(_exp(jnp.cos), "w")
    with pytest.raises(jaxport.ConflictError, match="force=True"):
        registry.delete("w")
    registry.delete("w", force=True)
    for read in (registry.list, registry.aliases):  # a deleted name is not found
        with pytest.raises(jaxport.NotFoundError, match="no artifact named 'w'"):
            read("w")
    assert registry.push(_exp(jnp.tan), "w").version == 3  # numbers are never reused


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.get("mlp:²"),
        lambda r: r.get("mlp:\u0661"),  # ARABIC-INDIC DIGIT ONE
        lambda r: r.get(f"mlp:{2**63}"),
        lambda r: r.get("mlp:0"),
        lambda r: r.get("mlp@"),
        lambda r: r.get("mlpé"),
        lambda r: r.resolve("mlp", version=2**63),
        lambda r: r.delete("mlp", True),
        lambda r: r.alias("mlp", "prod", True),
        lambda r: r.alias("mlp", "prod", 2**40),
        lambda r: r.read_blob("ABC"),
        lambda r: r.read_blob("../../etc/passwd"),
        lambda r: r.push(_exp(), "m", metadata={"k": 1}),
        lambda r: r.push(_exp(), "m", aliases="prod"),
        lambda r: r.search(platform="vulkan"),
        lambda r: r.search(nr_devices=0),
        lambda r: r.list(limit=0),
    ],
)
def test_inputs_are_checked_at_the_api_boundary(registry, call):
    registry.push(_exp(), "mlp")
    with pytest.raises(jaxport.InvalidNameError):
        call(registry)


def test_lone_surrogate_metadata_is_refused(registry):
    with pytest.raises(jaxport.InvalidNameError, match="UTF-8"):
        registry.push(_exp(), "m", metadata={"k": "\ud800"})


def test_platform_names_are_case_insensitive(registry):
    registry.push(_exp(platforms=("cpu", "tpu")), "p")
    assert registry.resolve("p", platform="TPU").chosen is not None
    assert len(registry.search(platform="Cpu")) == 1
    with pytest.raises(jaxport.InvalidNameError, match="no GPU here"):
        registry.resolve("p", platform="gpu")  # this machine has none


def test_search_matches_a_jax_release_prefix_and_list_knows_names(registry):
    registry.push(_exp(), "s")
    major_minor = ".".join(jax.__version__.split(".")[:2])
    assert len(registry.search(jax_version=major_minor)) == 1
    assert registry.search(jax_version=major_minor + "9") == []
    with pytest.raises(jaxport.NotFoundError):
        registry.list("nope")


def test_no_password_in_any_message(tmp_path):
    for url in ["nosuchdriver://user:s3cret@host/db", "postgresql+nodriver://u:s3cret@h/db"]:
        with pytest.raises(jaxport.RegistryError) as e:
            Registry(url, blobs=tmp_path)
        assert "s3cret" not in str(e.value)
    reg_repr = repr(Registry(f"sqlite:///{tmp_path / 'r.db'}"))
    assert "sqlite" in reg_repr


def test_server_database_without_blobs_is_a_registry_error(monkeypatch):
    monkeypatch.delenv("JAXPORT_BLOBS", raising=False)
    with pytest.raises(jaxport.RegistryError, match="blobs="):
        Registry("postgresql+psycopg://u:pw@127.0.0.1:1/db")


def test_missing_fsspec_package_is_named(tmp_path, monkeypatch):
    """(s3fs, in the dev extra, is tested missing in tests/test_blob_stores.py.)"""
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if it were not installed
    with pytest.raises(jaxport.RegistryError, match=r"gcs:// needs a package: .*gcsfs"):
        Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs="gcs://bucket/prefix")


def test_deep_verify_reads_every_archive_in_a_worker(registry):
    ref = registry.push(_exp(), "deep")
    report = registry.verify(deep=True)
    assert report.ok and report.deep and report.invalid == ()
    # An archive whose digest is right but whose contents do not read: stored behind the
    # registry's back under its own (correct) digest.
    from jaxport.registry._models import BlobRow

    bad = jaxport.dumps(_exp(jnp.cos))[:-5]  # truncated
    digest = hashlib.sha256(bad).hexdigest()
    registry.blobs.put(digest, bad)
    import sqlalchemy as sa

    with registry._backend.engine.begin() as conn:
        conn.execute(sa.insert(BlobRow).values(digest=digest, size=len(bad), created_at=0.0))
        conn.execute(
            sa.text("UPDATE variants SET digest = :d WHERE digest = :old"),
            {"d": digest, "old": ref.digests[0]},
        )
    report = registry.verify(deep=True)
    assert report.invalid == (digest,) and not report.ok
    problem = report.problems[0]
    assert problem.used_by == ("deep:1",) and "CorruptArchiveError" in problem.reason
    assert registry.verify().ok  # the shallow check only rehashes


def test_pending_rows_of_a_dead_process_do_not_keep_blobs(registry):
    import os
    import subprocess
    import sys

    import sqlalchemy as sa

    from jaxport.registry._models import PendingBlobRow
    from jaxport.registry._publish import pid_scope

    code = "import os; print(os.getpid())"
    gone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    registry.blobs.put("1" * 64, b"a killed push's blob")
    registry.blobs.put("2" * 64, b"a live push's blob")
    rows = [("1" * 64, "dead", int(gone)), ("2" * 64, "live", os.getpid())]
    with registry._backend.engine.begin() as conn:
        for digest, token, pid in rows:
            row = {"digest": digest, "token": token, "pid": pid, "created_at": 1e10}
            conn.execute(sa.insert(PendingBlobRow).values(host=pid_scope(), **row))
    report = registry.gc(min_age=0)
    assert report.digests == ("1" * 64,) and report.kept_pending == ("2" * 64,)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda r: r.alias("mlp", "ghost", None), jaxport.NotFoundError),
        (lambda r: r.search(name="nosuch"), jaxport.NotFoundError),
        (lambda r: r.search(calling_convention_version=10**20), jaxport.InvalidNameError),
        (lambda r: r.search(fun_name="\udcff"), jaxport.InvalidNameError),
        (lambda r: r.search(after=2**64), jaxport.InvalidNameError),
        (lambda r: r.audit_results(limit=2**63), jaxport.InvalidNameError),
        (lambda r: r.audit_results(jax_version="\udcff"), jaxport.InvalidNameError),
        (lambda r: r.gc(min_age="x"), jaxport.InvalidNameError),
        (lambda r: r.gc(min_age=float("nan")), jaxport.InvalidNameError),
        (lambda r: r.push(_exp(), "m", vjp_order=-1), jaxport.InvalidNameError),
        (lambda r: r.list(after=("mlp", "x")), jaxport.InvalidNameError),
        (lambda r: r.upgrade_report(5), jaxport.InvalidNameError),
        (lambda r: r.upgrade_report("no-such-python3"), jaxport.NotFoundError),
        (lambda r: r.audit("mlp", platform="tpu"), jaxport.NotFoundError),
        (
            lambda r: r.pull("sha256:" + r.get("mlp").digests[0][:8], platform="tpu"),
            jaxport.NotFoundError,
        ),
    ],
)
def test_more_inputs_fail_with_jaxport_errors(registry, call, error):
    registry.push(_exp(), "mlp")
    with pytest.raises(error):
        call(registry)


def test_one_bad_blob_is_one_error_finding(registry):
    good = registry.push(_exp(), "good")
    bad = registry.push(_exp(jnp.cos), "bad")
    digest = bad.digests[0]
    (registry.blobs.root / "sha256" / digest[:2] / digest).write_bytes(b"garbage")
    findings = {f.name: f for f in registry.audit()}
    assert findings["good"].status == "ok" and findings["good"].digest == good.digests[0]
    assert findings["bad"].status == "error" and "IntegrityError" in findings["bad"].reason


def test_db_upgrade_refuses_a_newer_database(db_url, tmp_path):
    import sqlalchemy as sa

    from jaxport.registry._db import create_registry_engine
    from jaxport.registry._internal import upgrade_database

    Registry(db_url, blobs=tmp_path / "b").close()
    engine = create_registry_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(jaxport.SchemaVersionError, match="newer than this"):
        upgrade_database(db_url)
