"""Models in the registry: stored in parts (a skeleton and one blob per tensor), pulled back
lazily, byte-identical archives, dedup of tensors between versions, gc, verify, diff and
audits of model variants (each test on SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from _helpers import FaultyBlobStore
from jaxport import Registry

N_TENSORS, SIDE = 8, 512
TENSOR_BYTES = SIDE * SIDE * 4  # 1 MiB of float32
X = jax.ShapeDtypeStruct((4, SIDE), jnp.float32)
X3 = jax.ShapeDtypeStruct((2, 3), jnp.float32)


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        f"w{i}": (rng.normal(size=(SIDE, SIDE)) / SIDE).astype(np.float32) for i in range(N_TENSORS)
    }


def _full(p: Any, x: jax.Array) -> jax.Array:
    for i in range(N_TENSORS):
        x = jnp.tanh(x @ p[f"w{i}"])
    return x


def _first(p: Any, x: jax.Array) -> jax.Array:
    return x @ p["w0"]


def _first_scaled(p: Any, x: jax.Array) -> jax.Array:
    return 2.0 * (x @ p["w0"])


@pytest.fixture(scope="module")
def model() -> jaxport.Model:
    """8 tensors of 1 MiB; ``full`` uses them all, ``first`` only ``w0``."""
    return jaxport.Model(_params(), {"full": _full, "first": _first}, {"full": [X], "first": [X]})


def _x() -> np.ndarray:
    return np.random.default_rng(1).normal(size=X.shape).astype(np.float32)


def _store_bytes(reg: Registry) -> int:
    """Bytes on disk of the local blob store's blobs."""
    return sum(p.stat().st_size for p in Path(reg.blobs.url).rglob("*") if p.is_file())


def _blob_path(reg: Registry, digest: str) -> Path:
    return Path(reg.blobs.url) / "sha256" / digest[:2] / digest


def _tensor_digest(model: jaxport.Model, path: str) -> str:
    return next(t.sha256 for t in model.tensors if t.path == path)


def test_round_trip_of_a_two_method_model(registry, model):
    ref = registry.push(model, "m", aliases=["prod"], metadata={"run": "7"})
    variant = ref.variants[0]
    assert (variant.kind, variant.fun_name, ref.metadata) == ("model", "", {"run": "7"})
    back = registry.pull_model("m@prod")
    x = _x()
    for name in ("full", "first"):
        np.testing.assert_allclose(back.methods[name](x), model.methods[name](x), rtol=1e-6)
    jax.tree.map(np.testing.assert_array_equal, back.params, model.params)
    shown = registry.get("m:1").variants[0]
    assert [m.name for m in shown.methods] == ["first", "full"]
    assert [t.path for t in shown.tensors] == [t.path for t in model.tensors]
    assert shown.tensors[0].nbytes == TENSOR_BYTES
    assert registry.search(name="m")[0].kind == "model"


def test_a_kind_pulled_as_the_other_names_the_call_to_use(registry, model):
    registry.push(model, "m")
    registry.push(jax.export.export(jax.jit(jnp.sin))(X), "f")
    with pytest.raises(jaxport.WrongKindError, match=r"Registry\.pull_model or `jaxport run`") as e:
        registry.pull("m")
    assert e.value.found == "model" and "Registry.pull_bytes or `jaxport pull`" in str(e.value)
    with pytest.raises(
        jaxport.WrongKindError, match=r"use Registry\.pull \(its archive: .*`jaxport pull`\)"
    ):
        registry.pull_model("f")
    with pytest.raises(jaxport.InvalidNameError, match="name="):
        registry.push(model)
    with pytest.raises(jaxport.InvalidNameError, match="all functions or all models"):
        registry.push([model, jax.export.export(jax.jit(jnp.cos))(X)], "mixed")
    with pytest.raises(jaxport.InvalidNameError, match=r"\{method: \[Example"):
        registry.push(model, "ex", examples=[((_x(),), {})])
    with pytest.raises(jaxport.InvalidNameError, match="methods \\['nope'\\]"):
        registry.push(model, "ex", examples={"nope": [((_x(),), {})]})


def test_versions_and_variants_say_their_kind(registry, model):
    """``list`` rows (``Ref.kind``) and ``search`` rows say function or model."""
    registry.push(model, "m")
    sines = [jax.export.export(jax.jit(jnp.sin), platforms=(p,))(X) for p in ("cpu", "tpu")]
    registry.push(sines, "f")
    refs = registry.list()
    assert [(r.name, r.kind) for r in refs] == [("f", "function"), ("m", "model")]
    assert [v.kind for r in refs for v in r.variants] == ["function", "function", "model"]
    found = registry.search()
    assert [(v.name, v.kind) for v in found] == [
        ("m", "model"),
        ("f", "function"),
        ("f", "function"),
    ]
    assert [v.kind for v in registry.search(platform="tpu")] == ["function"]
    assert registry.get("m").kind == "model" and registry.push(model, "m").kind == "model"


def test_pull_bytes_gives_back_the_archive_byte_for_byte(registry, model, tmp_path):
    path = tmp_path / "m.jaxport"
    model.save(path)
    data = path.read_bytes()
    ref = registry.push(path, "m")
    assert ref.digests == (hashlib.sha256(data).hexdigest(),)
    assert registry.pull_bytes("m") == data
    assert registry.read_blob(ref.digests[0]) == data
    out = tmp_path / "out.jaxport"
    assert registry.pull_file("m", out).digest == ref.digests[0]
    assert out.read_bytes() == data
    again = registry.push(data, "m")
    assert (again.version, again.created) == (1, False)


def test_versions_changing_one_tensor_store_about_one_tensor_each(registry, model):
    registry.push(model, "m")
    params = _params()
    for version in range(2, 11):
        before = _store_bytes(registry)
        params = {**params, f"w{version % N_TENSORS}": _params(version)["w0"]}
        ref = registry.push(model.update_params(params), "m")
        grown = _store_bytes(registry) - before
        assert ref.version == version
        assert TENSOR_BYTES <= grown < TENSOR_BYTES + 256 * 1024, grown  # + its skeleton
    assert _store_bytes(registry) < (N_TENSORS + 10) * TENSOR_BYTES  # not 10 x 8 MiB
    back = registry.pull_model("m:10")
    np.testing.assert_array_equal(back.tensor("['w2']"), params["w2"])


def test_same_parameters_with_new_code_store_no_tensor_bytes(registry, model):
    registry.push(model, "m")
    before = _store_bytes(registry)
    other = jaxport.Model(_params(), {"first": _first_scaled}, {"first": [X]})
    registry.push(other, "m")
    assert _store_bytes(registry) - before < TENSOR_BYTES // 4  # its skeleton alone
    np.testing.assert_allclose(
        registry.pull_model("m:2").first(_x()), 2 * model.first(_x()), rtol=1e-6
    )


def test_gc_beside_a_model_push_keeps_every_part(db_url, tmp_path, model):
    store = FaultyBlobStore(tmp_path / "blobs")
    with Registry(db_url, blobs=store) as reg, Registry(db_url, blobs=store) as other:
        reports = []
        store.before_put = lambda digest: reports.append(other.gc(min_age=0))
        ref = reg.push(model, "m")
        store.before_put = None
        assert reports and not any(r.digests for r in reports)
        # the last gc ran before the last of the 9 parts (skeleton + 8 tensors) was written
        assert len(reports[-1].kept_pending) == N_TENSORS
        parts = {t.sha256 for t in model.tensors}
        assert reg.gc(min_age=0).digests == ()
        assert reg.verify().ok
        np.testing.assert_allclose(reg.pull_model("m").full(_x()), model.full(_x()), rtol=1e-6)
        reg.delete("m", ref.version)
        removed = set(reg.gc(min_age=0).digests)
        assert parts < removed and len(removed) == len(parts) + 1  # the tensors and skeleton
        report = reg.verify()
        assert report.ok and report.checked == 0 and report.unreferenced == ()


def test_verify_names_the_version_of_a_bad_tensor_and_a_repush_repairs_it(registry, model):
    registry.push(model, "m")
    registry.push(model.update_params({**_params(), "w7": _params(5)["w7"]}), "m")
    shared, own = _tensor_digest(model, "['w0']"), _tensor_digest(model, "['w7']")
    _blob_path(registry, shared).write_bytes(b"garbage")
    _blob_path(registry, own).unlink()
    report = registry.verify()
    problems = {p.digest: (p.state, p.used_by) for p in report.problems}
    assert problems == {shared: ("corrupt", ("m:1", "m:2")), own: ("missing", ("m:1",))}
    again = registry.push(model, "m")
    assert (again.version, again.created) == (1, False)
    assert set(again.repaired) == {shared, own}
    assert registry.verify().ok


def test_a_corrupt_tensor_raises_when_used_and_never_gives_numbers(registry, model):
    registry.push(model, "m")
    path = _blob_path(registry, _tensor_digest(model, "['w3']"))
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    back = registry.pull_model("m")
    np.testing.assert_allclose(back.first(_x()), model.first(_x()), rtol=1e-6)  # w0 is intact
    with pytest.raises(jaxport.IntegrityError):
        back.full(_x())
    with pytest.raises(jaxport.IntegrityError):
        back.tensor("['w3']")
    with pytest.raises(jaxport.IntegrityError):
        registry.pull_bytes("m")


def test_exported_methods_read_no_tensor(registry, model):
    registry.push(model, "m")
    for t in model.tensors:
        _blob_path(registry, t.sha256).unlink()
    back = registry.pull_model("m")
    exported = back.exported["first"]
    assert exported.in_avals[-1].shape == X.shape and back.bytes_read == 0
    with pytest.raises(jaxport.IntegrityError, match="missing"):
        back.first(_x())


def test_a_method_call_reads_only_its_tensors(registry, model):
    registry.push(model, "m")
    back = registry.pull_model("m")
    back.first(_x())
    assert back.bytes_read == TENSOR_BYTES
    back.full(_x())
    assert back.bytes_read == N_TENSORS * TENSOR_BYTES


def test_diff_of_two_model_versions(registry):
    small = {"w": np.ones((3, 3), np.float32), "b": np.zeros(3, np.float32)}
    one = jaxport.Model(small, {"f": lambda p, x: x @ p["w"] + p["b"]}, {"f": [X3]})
    registry.push(one, "d")
    registry.push(one.update_params({**small, "b": np.ones(3, np.float32)}), "d")
    changes = registry.diff("d:1", "d:2")
    assert [(c.what, c.after, c.breaking) for c in changes] == [
        ("parameter values", "1 of 2 tensors changed, 12 bytes", False)
    ]
    assert changes[0].before == "2 tensors, 48 bytes"
    bigger = {"w": np.ones((3, 4), np.float32), "s": np.ones((), np.float32)}
    two = jaxport.Model(
        bigger,
        {"f": lambda p, x: x @ p["w"], "g": lambda p, x: p["s"] * x},
        {"f": [X3], "g": [X3]},
    )
    registry.push(two, "d")
    found = {(c.what, c.where, c.breaking) for c in registry.diff("d:2", "d:3")}
    assert found == {
        ("method added", "[cpu x1] g", False),
        ("output shape", "[cpu x1] f .", True),
        ("parameter removed", "[cpu x1] ['b']", True),
        ("parameter added", "[cpu x1] ['s']", True),
        ("parameter shape", "[cpu x1] ['w']", True),
    }


def test_an_audit_of_a_model_loads_and_compiles_every_method(registry):
    small = jaxport.Model(
        {"w": np.ones(3, np.float32)},
        {"scale": lambda p, x: x * p["w"], "shift": lambda p, x: x + p["w"]},
        {"scale": [X3], "shift": [X3]},
        platforms=("cpu", "tpu"),
    )
    registry.push(small, "a")
    findings = {f.platform: f for f in registry.audit("a")}
    assert findings["cpu"].status == "ok"
    assert findings["cpu"].reason == "loads and compiles every method (scale, shift)"
    assert findings["cpu"].checks["compile (scale)"] == "ok"
    assert findings["cpu"].checks["tensors"] == "1 read, every sha256 checked"
    assert (findings["tpu"].status, findings["tpu"].reason) == ("not-run", "no tpu device here")
    assert sorted(f.status for f in registry.audit_results(name="a")) == ["not-run", "ok"]


def test_an_audit_of_a_model_re_runs_its_examples_per_method(registry, model):
    x = _x()
    registry.push(model, "ex", examples={"full": [((x,), {})], "first": [((x,),)]})
    (finding,) = registry.audit("ex")
    assert finding.status == "ok", finding.reason
    assert finding.reason.startswith(
        "loads, compiles every method (first, full) and matches 2 example(s): max abs error 0,"
    )  # then the max rel error and the tolerance used
    assert "within float32: atol" in finding.reason
    wrong = jaxport.Example((x,), {}, np.ones_like(np.asarray(model.full(x))))
    registry.push(model, "ex2", examples={"full": [wrong]})
    (finding,) = registry.audit("ex2")
    assert finding.status == "mismatch" and finding.reason.startswith("full: ")


def test_an_audit_of_a_model_with_a_corrupt_tensor_is_an_error(registry):
    small = jaxport.Model({"w": np.ones(3, np.float32)}, lambda p, x: x * p["w"], [X3])
    registry.push(small, "a")
    digest = small.tensors[0].sha256
    registry.blobs.put(digest, b"\0" * 12, replace=True)
    (finding,) = registry.audit("a")
    assert finding.status == "error" and "IntegrityError" in finding.reason


def test_a_model_in_an_fsspec_store_is_read_without_a_memory_map(db_url, model):
    pytest.importorskip("fsspec")
    url = f"memory://models-{os.getpid()}-{abs(hash(db_url))}"
    with Registry(db_url, blobs=url) as reg:
        reg.push(model, "m")
        back = reg.pull_model("m")
        np.testing.assert_allclose(back.first(_x()), model.first(_x()), rtol=1e-6)
        assert [m.name for m in reg.get("m").variants[0].methods] == ["first", "full"]
        assert reg.pull_bytes("m") == model.dumps()


def test_a_deep_verify_reads_a_model_in_full_in_the_worker(registry, model):
    registry.push(model, "lm")
    report = registry.verify(deep=True)
    assert report.ok and report.deep and report.problems == ()
    registry.blobs.put(model.tensors[0].sha256, bytes(model.tensors[0].nbytes), replace=True)
    report = registry.verify(deep=True)
    assert [(p.state, p.used_by) for p in report.problems] == [("corrupt", ("lm:1",))]


def test_pull_of_one_method(registry: Registry, model: jaxport.Model) -> None:
    registry.push(model, "m")
    first = registry.pull("m", method="first")  # the skeleton only: no tensor read
    x = _x()
    np.testing.assert_allclose(first.call(model.params, x), model.first(x), rtol=1e-6)
    with pytest.raises(jaxport.NotFoundError, match="has no method 'nope': it has first, full"):
        registry.pull("m", method="nope")
    with pytest.raises(jaxport.WrongKindError, match="pull one method with method="):
        registry.pull("m")
    registry.push(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3)), "sin")
    with pytest.raises(jaxport.WrongKindError, match="no method 'first'"):
        registry.pull("sin", method="first")


# jax 0.8 warns that make_mesh's default axis types will change: the test takes each release's own.
@pytest.mark.filterwarnings("ignore:The default axis_types will change:DeprecationWarning")
def test_push_computes_examples_of_sharded_variants_where_they_run(registry):
    """A model and a function exported for 8 devices run on the 8 faked CPU devices
    (``--xla_force_host_platform_device_count=8``, conftest): push computes their examples'
    outputs, and the audit re-runs them."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    mesh = jax.make_mesh((8,), ("x",))
    rows = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                          NamedSharding(mesh, P("x", None)))  # fmt: skip
    x = np.ones((2, 4), np.float32)
    model = jaxport.Model({"w": rows}, lambda p, x: x @ p["w"].T,
                          [jax.ShapeDtypeStruct((2, 4), jnp.float32)])  # fmt: skip
    assert model.exported["apply"].nr_devices == 8
    registry.push(model, "sharded", examples={"apply": [jaxport.Example((x,))]})
    fn = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh, P("x")))
    exp = jax.export.export(fn)(jax.ShapeDtypeStruct((8,), jnp.float32))
    registry.push(exp, "sharded-fn", examples=[((np.arange(8, dtype=np.float32),), {})])
    for name in ("sharded", "sharded-fn"):
        (finding,) = registry.audit(name)
        assert finding.status == "ok" and "matches 1 example" in finding.reason, finding
