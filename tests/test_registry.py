"""The registry, on SQLite and PostgreSQL (the ``registry`` fixture runs each test on both)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport
from _helpers import FaultyBlobStore
from jaxport import Registry


def _exp(fun=jnp.sin, shape=(4,), platforms=None):
    return jax.export.export(jax.jit(fun), platforms=platforms)(
        jax.ShapeDtypeStruct(shape, jnp.float32)
    )


def _sharded():
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
    fun = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x")))
    return jax.export.export(fun)(jax.ShapeDtypeStruct((8, 2), jnp.float32))


def test_push_pull_round_trip(registry):
    exp = _exp()
    ref = registry.push(exp, "mlp", metadata={"owner": "a"})
    assert (ref.name, ref.version) == ("mlp", 1) and len(ref.digests[0]) == 64
    assert ref.variants[0].platforms == ("cpu",) and ref.metadata == {"owner": "a"}
    assert ref.variants[0].metadata == {}  # push-time metadata never rewrites an archive
    assert ref.created and ref.created_at > 0 and isinstance(ref, jaxport.PushResult)
    back = registry.pull("mlp")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(back.call(x), np.sin(x), rtol=1e-6)


def test_versions_are_allocated_in_order_and_identical_push_is_a_no_op(registry):
    a, b = _exp(jnp.sin), _exp(jnp.cos)
    assert registry.push(a, "f").version == 1
    assert registry.push(b, "f").version == 2
    again = registry.push(b, "f")
    assert again.version == 2 and again.digests == registry.push(b, "f").digests
    assert [r.version for r in registry.list("f")] == [1, 2]


def test_name_defaults_to_fun_name_and_is_validated(registry):
    assert registry.push(_exp(jnp.tanh)).name == "tanh"
    for bad in ["", "a/b", "a\nb", "x" * 201, "../up", "a@b", "a:b"]:
        with pytest.raises(jaxport.InvalidNameError):
            registry.push(_exp(), bad)
    with pytest.raises(jaxport.InvalidNameError, match="pass name="):
        registry.push(_exp(lambda x: x + 1))  # fun_name "<lambda>"


def test_several_variants_resolve_by_platform_and_devices(registry):
    cpu = _exp(platforms=("cpu",))
    tpu = _exp(platforms=("tpu", "cuda"))
    eight = _sharded()
    ref = registry.push([cpu, tpu, eight], "m")
    assert len(ref.variants) == 3
    assert registry.resolve("m", platform="tpu").chosen.digest == ref.digests[1]
    assert registry.resolve("m", platform="cpu", nr_devices=8).chosen.digest == ref.digests[2]
    # A 1-device unsharded export runs on any device count, after an exact match.
    assert registry.resolve("m", platform="cpu", nr_devices=4).chosen.digest == ref.digests[0]
    res = registry.resolve("m", platform="cuda", nr_devices=8)
    assert res.chosen.digest == ref.digests[1]
    reasons = {r.variant.digest: r.reason for r in res.rejected}
    assert "not cuda" in reasons[ref.digests[0]]
    exp = registry.pull("m", platform="cpu", nr_devices=8)
    assert exp.nr_devices == 8


def test_pull_newest_matching_version(registry):
    registry.push(_exp(platforms=("cpu",)), "n")
    registry.push(_exp(platforms=("tpu",)), "n")
    assert registry.resolve("n", platform="cpu").chosen.version == 1
    assert registry.resolve("n", platform="tpu").chosen.version == 2
    assert registry.resolve("n:1", platform=None).chosen.version == 1


def test_nothing_matches_lists_what_exists(registry):
    registry.push(_exp(platforms=("cpu",)), "n")
    with pytest.raises(
        jaxport.NotFoundError, match=r"versions 1, platforms cpu, device counts 1"
    ) as e:
        registry.pull("n", platform="tpu")
    assert isinstance(e.value, LookupError)
    with pytest.raises(jaxport.NotFoundError, match="no artifact named 'zz'; names: n"):
        registry.pull("zz")
    with pytest.raises(jaxport.NotFoundError, match="no version 7; versions: 1"):
        registry.pull("n:7")
    with pytest.raises(jaxport.InvalidNameError):
        registry.pull("n:x")


def test_aliases_move_with_history(registry):
    registry.push(_exp(jnp.sin), "a", aliases=["prod"])
    registry.push(_exp(jnp.cos), "a")
    assert registry.resolve("a@prod").chosen.version == 1
    registry.alias("a", "prod", 2)
    assert registry.resolve("a@prod").chosen.version == 2
    assert registry.aliases("a") == {"prod": 2}
    history = registry.alias_history("a", "prod")
    assert [(h.from_version, h.to_version) for h in history] == [(None, 1), (1, 2)]
    with pytest.raises(jaxport.NotFoundError, match="no alias 'staging'; aliases: prod"):
        registry.pull("a@staging")
    with pytest.raises(jaxport.NotFoundError):
        registry.alias("a", "prod", 9)


def test_delete_refuses_aliased_version_unless_forced(registry):
    registry.push(_exp(jnp.sin), "d", aliases=["prod"])
    registry.push(_exp(jnp.cos), "d")
    with pytest.raises(jaxport.ConflictError, match="@prod -> 1"):
        registry.delete("d", 1)
    registry.delete("d", 2)
    registry.delete("d", 1, force=True)
    # A name without versions is gone: not found, and listed nowhere.
    for read in (registry.list, registry.aliases, registry.get):
        with pytest.raises(jaxport.NotFoundError, match="no artifact named 'd'; names: none"):
            read("d")
    assert "d" not in registry.names()
    # Version numbers are never reused.
    assert registry.push(_exp(jnp.exp), "d").version == 3


def test_gc_removes_unreferenced_blobs(registry):
    keep = registry.push(_exp(jnp.sin), "g")
    gone = registry.push(_exp(jnp.cos), "g")
    registry.delete("g", gone.version)
    report = registry.gc(dry_run=True, min_age=0)
    assert report.digests == gone.digests and report.bytes > 0 and report.dry_run
    assert registry.blobs.exists(gone.digests[0])
    registry.gc(min_age=0)
    assert not registry.blobs.exists(gone.digests[0]) and registry.blobs.exists(keep.digests[0])
    assert registry.gc(min_age=0).digests == ()


def test_gc_keeps_young_orphans(registry):
    registry.blobs.put("0" * 64, b"orphan")
    assert registry.gc(dry_run=True).digests == ()  # younger than an hour: maybe a push in flight
    assert registry.gc(dry_run=True, min_age=0).digests == ("0" * 64,)


def test_corrupt_or_missing_blob_is_never_returned(registry):
    ref = registry.push(_exp(), "c")
    path = registry.blobs.root / "sha256" / ref.digests[0][:2] / ref.digests[0]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(jaxport.IntegrityError, match="corrupt"):
        registry.pull("c")
    path.unlink()
    with pytest.raises(jaxport.IntegrityError, match="missing"):
        registry.pull("c")


def test_failed_push_leaves_the_registry_as_it_was(db_url, tmp_path):
    store = FaultyBlobStore(tmp_path / "blobs")
    with Registry(db_url, blobs=store) as registry:
        registry.push(_exp(jnp.sin), "p")
        store.fail_puts = 1
        with pytest.raises(OSError, match="injected"):
            registry.push([_exp(jnp.sin, (3,)), _exp(jnp.cos, platforms=("tpu",))], "p")
        assert [r.version for r in registry.list("p")] == [1]
        # The failed push consumed no version number and left no pending rows behind.
        assert registry.push(_exp(jnp.cos), "p").version == 2
        assert registry.gc(min_age=0).kept_pending == ()


def test_list_and_search_are_paged(registry):
    for i, f in enumerate([jnp.sin, jnp.cos, jnp.tan, jnp.exp]):
        registry.push(_exp(f, platforms=("cpu", "tpu") if i % 2 else ("cpu",)), f"n{i % 2}")
    page1 = registry.list(limit=3)
    page2 = registry.list(limit=3, after=(page1[-1].name, page1[-1].version))
    assert [(r.name, r.version) for r in page1 + page2] == [
        ("n0", 1),
        ("n0", 2),
        ("n1", 1),
        ("n1", 2),
    ]
    tpu = registry.search(platform="tpu")
    assert {v.name for v in tpu} == {"n1"} and len(tpu) == 2
    first = registry.search(limit=1)
    rest = registry.search(after=first[0].variant_id)
    assert len(first) + len(rest) == 4
    assert registry.search(nr_devices=8, platform="cpu")  # 1-device unsharded runs anywhere
    assert registry.search(jax_version=jax.__version__, limit=10)
    assert registry.names() == ["n0", "n1"]


def test_registry_reopens_and_newer_schema_is_read_only(db_url, tmp_path):
    reg = Registry(db_url, blobs=tmp_path / "b")
    reg.push(_exp(), "r")
    reg.close()
    import sqlalchemy as sa

    from jaxport.registry._db import create_registry_engine

    engine = create_registry_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
        conn.execute(sa.text("UPDATE registry_info SET value = '7.1.0'"))
    engine.dispose()
    reg = Registry(db_url, blobs=tmp_path / "b")
    assert reg.pull("r") is not None  # reads still work
    with pytest.raises(jaxport.SchemaVersionError, match=r"use jaxport 7\.1\.0 or newer"):
        reg.push(_exp(jnp.cos), "r")
    reg.close()


def test_default_location_is_overridable(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXPORT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JAXPORT_REGISTRY", raising=False)
    with Registry() as reg:
        reg.push(_exp(), "x")
    assert (tmp_path / "home" / "registry.db").exists()
    assert list((tmp_path / "home" / "blobs" / "sha256").glob("*/*"))
