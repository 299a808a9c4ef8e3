"""Fleet rescue (issue 26 §3): ``Registry.rescue`` / ``jaxport rescue --expiring-before``.

Archives "written by jax 0.8.0" are made here with the writer's ``_compat.jax_versions``
patched while it writes (as tests/test_newer_format.py does): their window ended 2026-04-15,
so they expire before any date after it. The re-export runs in a child of an injected
environment: this interpreter (its jax, 0.10.2 in CI, is the "managed" release). The ``slow``
``test_the_managed_environment_is_made_and_used`` makes a real managed environment of the
installed release from the wheels on this machine (no network); other releases' environments
need their wheels from an index, so no test makes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport._rescue import DEFAULT_RESCUE_JAX
from jaxport.export import _compat

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
PYTHON = sys.executable
POSTGRES_URL_ENV = "JAXPORT_TEST_POSTGRES_URL"
#: After the window of a jax 0.8.0 export (2026-04-15), before that of one by the installed
#: jax (0.10.2: 2026-12-17).
DATE = "2026-12-01"
_SPEC = jax.ShapeDtypeStruct((3,), jnp.float32)
_RUNNING = jaxport.jax_window(jax.__version__, sharded=False).window_ends or "9999-12-31"

pytestmark = pytest.mark.skipif(
    _RUNNING <= DATE, reason=f"the installed jax {jax.__version__}'s window ends before {DATE}"
)


def _export(fn=jnp.sin, platforms=("cpu",)):
    return jax.export.export(jax.jit(fn), platforms=platforms)(_SPEC)


def _written_by(exp, writer="0.8.0") -> bytes:
    """``exp`` as a jaxport archive whose header says jax ``writer`` wrote it."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_compat, "jax_versions", lambda: (writer, writer))
        return jaxport.dumps(exp)


def _golden(exp, scale=1.0):
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    return [jaxport.Example((x,), {}, [np.asarray(exp.call(x)) * scale])]


def _hlo_only(exp):
    """``exp`` with its shardings in the HloSharding form only, as jax < 0.9 wrote them."""
    hlo = [
        tuple(_compat.named_to_hlo_sharding(n, a) for n, a in zip(named, avals, strict=True))
        for named, avals in ((exp._in_named_shardings, exp.in_avals),
                             (exp._out_named_shardings, exp.out_avals))
    ]  # fmt: skip
    none_in, none_out = (None,) * len(exp.in_avals), (None,) * len(exp.out_avals)
    return dataclasses.replace(
        exp, _in_named_shardings=none_in, _out_named_shardings=none_out,
        _has_named_shardings=False, in_shardings_hlo=hlo[0], out_shardings_hlo=hlo[1],
    )  # fmt: skip


def _sharded():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    s = NamedSharding(mesh, PartitionSpec("x"))
    f = jax.jit(lambda x: jnp.sin(x) * 2, in_shardings=s, out_shardings=s)
    return jax.export.export(f)(jax.ShapeDtypeStruct((4, 3), jnp.float32))


def _model(params=None, **methods):
    """A model of two methods (``apply``, ``grad``) on ``params`` (a float32 ``w`` of 3 and a
    zero ``b`` of 4096, zstd-compressible), or of ``methods``."""
    if params is None:
        params = {"w": np.arange(1, 4, dtype=np.float32), "b": np.zeros((4096,), np.float32)}
    fns = methods or {
        "apply": lambda p, x: jnp.sin(x) * p["w"] + p["b"][:3],
        "grad": lambda p, x: jnp.cos(x * p["w"]),
    }
    return jaxport.Model(params, fns, {name: [_SPEC] for name in fns})


def _model_archive(model=None, compress=True, writer="0.8.0") -> bytes:
    """``model`` (default ``_model()``) as an archive whose header says jax ``writer`` wrote
    it, its ``b`` compressed (a version-3 archive, tensor sections raw and zstd)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_compat, "jax_versions", lambda: (writer, writer))
        return (model or _model()).dumps(compress=compress)


def _model_golden(model, scale=1.0):
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    return {
        name: [jaxport.Example((x,), {}, np.asarray(method(x)) * scale)]
        for name, method in model.methods.items()
    }


def _parts(reg, digest):
    """``(position, digest)`` of the variant ``digest``'s parts, as the database holds them."""
    import sqlalchemy as sa

    from jaxport.registry._models import VariantPartRow, VariantRow

    query = (
        sa.select(VariantPartRow.position, VariantPartRow.digest)
        .join(VariantRow, VariantRow.id == VariantPartRow.variant_id)
        .where(VariantRow.digest == digest)
        .order_by(VariantPartRow.position)
    )
    with reg._backend.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(query)]


def _blob_files(tmp_path):
    return {p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()}


def _kinds(reg, name):
    return [e.kind for e in reg.events(name=name)]


# -- selection and dry run ---------------------------------------------------------------------


def test_constants_shared_with_the_child():
    from jaxport import _reexport_child
    from jaxport.registry import _fleet_rescue, _reexport

    assert (_reexport.NOT_READ, _reexport.NOT_WRITTEN) == (
        _reexport_child.NOT_READ, _reexport_child.NOT_WRITTEN,
    )  # fmt: skip
    assert _fleet_rescue.RESCUE_JAX == DEFAULT_RESCUE_JAX


def test_both_children_share_one_rewrite_and_one_check():
    """The function's and the model's re-export children take what they share from one module
    (``jaxport/_reexport_common.py``): the named form of HloSharding-only shardings, the check's
    facts from an audit of the re-export, the constants the parent reads."""
    from jaxport import _reexport_child, _reexport_model_child
    from jaxport import _reexport_common as common
    from jaxport.audit import encode_examples

    assert _reexport_child.SOURCE_KEY == common.SOURCE_KEY == "jaxport.rescued_from"
    assert (_reexport_child.NOT_READ, _reexport_model_child.NOT_WRITTEN) == (3, 4)
    named, said = common.named_shardings(_hlo_only(_sharded()))
    assert said.startswith("named form derived") and None not in named._in_named_shardings
    one_device = _export()
    assert common.named_shardings(one_device) == (one_device, "as stored")
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    archive = jaxport.dumps(one_device)
    right = encode_examples([([x], [np.sin(x)])])
    assert common.audited(archive, right, "own", 1) == {"check": "own", "reason": None,
                                                        "compared": 1}  # fmt: skip
    wrong = common.audited(archive, encode_examples([([x], [np.cos(x)])]), "golden", 1)
    assert wrong["check"] == "mismatch" and wrong["reason"].startswith("mismatch: ")
    failed = common.source_failed(RuntimeError("x" * 500))
    assert failed["check"] == "error" and failed["reason"].startswith("the source: RuntimeError")
    assert len(failed["reason"]) == 400 and failed["compared"] == 0
    assert common.said(ValueError("y" * 400)) == "ValueError: " + "y" * 300


def test_selection_dry_run_and_prefix(registry):
    old = _written_by(_export())
    registry.push(_written_by(_export(jnp.cos)), "team-enc", aliases=["prod"])  # v1, aliased
    registry.push(_written_by(_export(jnp.tan)), "team-enc")  # v2: history, unaliased
    registry.push(old, "team-enc")  # v3: the newest
    registry.push(_export(), "team-fresh")  # written by the installed jax: not expiring
    registry.push(old, "other-enc")

    report = registry.rescue(DATE, prefix="team-", dry_run=True)
    assert report.dry_run and report.expiring_before == DATE and report.prefix == "team-"
    assert sorted((c.name, c.version) for c in report.candidates) == [
        ("team-enc", 1), ("team-enc", 3),
    ]  # fmt: skip
    assert {c.why for c in report.candidates} == {"expires 2026-04-15"}
    assert {c.release for c in report.candidates} == {DEFAULT_RESCUE_JAX}
    assert report.rescued == () and report.refusals == () and report.queued == ()
    assert "would rescue 2 variant(s) in 2 version(s)" in report.summary()
    # nothing was written
    assert [r.version for r in registry.list("team-enc")] == [1, 2, 3]
    assert "rescue" not in _kinds(registry, "team-enc")

    everything = registry.rescue(DATE, dry_run=True)
    assert {c.name for c in everything.candidates} == {"team-enc", "other-enc"}
    assert registry.rescue("2026-04-01", dry_run=True).candidates == ()  # before any expiry


def test_refused_before_anything_runs(registry):
    registry.push(_written_by(_export()), "enc")
    late = registry.rescue("2027-01-01", dry_run=True)
    (refusal,) = late.refusals
    assert "would expire 2026-12-17, before 2027-01-01" in refusal.reason
    newer = registry.rescue(DATE, jax="0.7.0", dry_run=True)
    assert "newer than the rescue's jax 0.7.0" in newer.refusals[0].reason
    sharded = _written_by(_hlo_only(_sharded()))
    registry.push(sharded, "mesh")
    (c,) = [c for c in registry.rescue("2026-01-01", dry_run=True).candidates if c.name == "mesh"]
    assert c.why == "HloSharding-only"
    ignored = registry.rescue("2026-01-01", prefix="mesh", jax="0.11.2", dry_run=True)
    assert "jax 0.11.2 ignores that form" in ignored.refusals[0].reason
    registry.push(_model_archive(), "mdl")  # a model is a candidate like a function
    model_run = registry.rescue(DATE, prefix="mdl", dry_run=True)
    assert [(c.name, c.why) for c in model_run.candidates] == [("mdl", "expires 2026-04-15")]
    assert model_run.refusals == ()
    with pytest.raises(jaxport.InvalidNameError):
        registry.rescue("next week")
    with pytest.raises(jaxport.InvalidNameError):
        registry.rescue(DATE, jax="latest")


# -- rescue: push, lineage, goldens, aliases, gates, events ----------------------------------


def test_rescue_pushes_a_derived_version_and_moves_aliases_where_gates_pass(registry):
    exp = _export()
    carried = _export(jnp.sin, ("tpu",))  # written by the installed jax: carried over
    source = registry.push(
        [_written_by(exp), carried], "enc", aliases=["prod", "staging", "canary"],
        examples=_golden(exp),
    )  # fmt: skip
    registry.protect("enc", "prod", require_audit="ok", platforms="cpu")  # never audited
    registry.protect("enc", "canary", require_goldens=True)

    report = registry.rescue(DATE, python=PYTHON)
    (done,) = report.rescued
    assert (done.name, done.source, done.created) == ("enc", 1, True)
    (variant,) = done.variants
    assert variant.source == source.variants[0].digest
    assert (variant.check, variant.compared, variant.jax_version) == ("golden", 1, jax.__version__)
    rescued = registry.get(f"enc:{done.rescued}")
    assert rescued.variants[0].jax_version == jax.__version__
    assert rescued.variants[0].metadata["jaxport.rescued_from"] == variant.source
    assert rescued.variants[1].digest == source.variants[1].digest  # unchanged, byte for byte
    assert rescued.metadata == source.metadata
    lineage = registry.lineage(f"enc:{done.rescued}")
    assert (str(lineage.derived_from), lineage.derivation) == ("enc:1", "rescue")

    # the rescued version holds the source's goldens: it reproduces them under this jax
    (finding,) = registry.audit(f"enc:{done.rescued}", platform="cpu")
    assert finding.status == "ok" and "matches 1 example" in finding.reason

    assert sorted(done.aliases_moved) == ["canary", "staging"]
    (gate,) = report.refusals
    assert gate.alias == "prod" and gate.reason.startswith("GateError: ")
    assert registry.aliases("enc") == {"prod": 1, "staging": 2, "canary": 2}
    rescue_events = [e for e in registry.events(name="enc") if e.kind == "rescue"]
    assert len(rescue_events) == 1 and rescue_events[0].id == done.event_id
    detail = rescue_events[0].detail
    assert detail["source"] == "enc:1" and detail["aliases_moved"] == ["canary", "staging"]
    assert "GateError" in detail["aliases_refused"]["prod"]
    assert detail["variants"][0]["check"] == "golden"

    # prod still points at the source: run again, the same re-export is the same version
    again = registry.rescue(DATE, python=PYTHON)
    assert [(r.rescued, r.created) for r in again.rescued] == [(2, False)]
    assert [r.version for r in registry.list("enc")] == [1, 2]


def test_without_goldens_the_own_check_records_examples(registry):
    registry.push(_written_by(_export(jnp.tanh)), "enc")
    (done,) = registry.rescue(DATE, python=PYTHON).rescued
    assert done.variants[0].check == "own"
    (finding,) = registry.audit(f"enc:{done.rescued}", platform="cpu")
    assert finding.status == "ok" and "matches 1 example" in finding.reason


def test_a_failed_check_refuses_the_version(registry):
    exp = _export()
    registry.push(_written_by(exp), "enc", aliases=["prod"], examples=_golden(exp, scale=3.0))
    report = registry.rescue(DATE, python=PYTHON)
    assert report.rescued == ()
    (refusal,) = report.refusals
    assert refusal.version == 1 and refusal.reason.startswith("check mismatch: ")
    assert [r.version for r in registry.list("enc")] == [1]
    assert registry.aliases("enc") == {"prod": 1} and "rescue" not in _kinds(registry, "enc")


def test_hlo_sharding_only_variants_get_named_shardings(registry):
    registry.push(_written_by(_hlo_only(_sharded())), "mesh")
    (done,) = registry.rescue("2026-01-01", python=PYTHON).rescued
    (variant,) = done.variants
    assert variant.shardings.startswith("named form derived")
    assert variant.check == "own"
    exp = registry.pull(f"mesh:{done.rescued}", nr_devices=2)
    assert all(s is not None for s in (*exp._in_named_shardings, *exp._out_named_shardings))
    (finding,) = registry.audit(f"mesh:{done.rescued}", platform="cpu")  # placed on 2 devices
    assert finding.status == "ok" and "matches 1 example" in finding.reason


def test_a_corrupt_blob_refuses_its_version_and_the_run_goes_on(registry, tmp_path):
    broken = registry.push(_written_by(_export()), "a-broken")
    registry.push(_written_by(_export(jnp.cos)), "b-fine")
    (path,) = [p for p in (tmp_path / "blobs").rglob("*") if p.name == broken.digests[0]]
    path.write_bytes(b"not the archive")
    report = registry.rescue(DATE, python=PYTHON)
    assert [r.name for r in report.rescued] == ["b-fine"]
    (refusal,) = report.refusals
    assert refusal.name == "a-broken" and refusal.reason.startswith("IntegrityError: ")


def test_a_child_that_cannot_read_is_a_refusal(registry, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'no jax here' >&2\nexit 9\n")
    fake.chmod(0o755)
    registry.push(_written_by(_export()), "enc")
    (refusal,) = registry.rescue(DATE, python=str(fake)).refusals
    assert refusal.reason.startswith("UnsafeArchiveError: ") and "no jax here" in refusal.reason


@pytest.mark.slow
def test_the_managed_environment_is_made_and_used(tmp_path):
    """No ``--python``: ``$JAXPORT_HOME/envs/jax-RELEASE`` is made for the installed release
    (its wheels are on this machine, as for tests/test_audit_scale.py's ``audit --jax``: no
    network) and the re-export runs there."""
    release = jax.__version__
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(
        JAXPORT_HOME=str(tmp_path / "home"),
        JAXPORT_REGISTRY=f"sqlite:///{tmp_path / 'reg.db'}",
        JAXPORT_BLOBS=str(tmp_path / "blobs"),
    )
    with jaxport.Registry(env["JAXPORT_REGISTRY"], blobs=env["JAXPORT_BLOBS"]) as reg:
        reg.push(_written_by(_export()), "enc")
    out = _run(env, "rescue", "--expiring-before", DATE, "--jax", release, "--json")
    (done,) = json.loads(out.stdout)["rescue"]["rescued"]
    assert done["variants"][0]["jax_version"] == release
    assert (tmp_path / "home" / "envs" / f"jax-{release}" / "bin" / "python").exists()


# -- models: methods written again, tensors' parts shared ---------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_a_model_written_again_unchanged_is_the_same_bytes(tmp_path, compress):
    """The rewrite reads the skeleton alone and copies each stored tensor section: with the
    same methods and metadata it gives back the archive this jax wrote, byte for byte."""
    from jaxport.export._internal import read_skeleton, rewritten_chunks

    data = _model().dumps(compress=compress)
    path = tmp_path / "m.jaxport"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        header = read_skeleton(fd, len(data), allow_custom_calls=[])
        again = b"".join(rewritten_chunks(fd, header, header.exported, header.metadata))
    finally:
        os.close(fd)
    assert again == data


def test_a_model_is_rescued_with_its_tensor_parts_shared(registry, tmp_path):
    model = _model()
    model = jaxport.Model.from_exported(
        {"w": np.arange(1, 4, dtype=np.float32), "b": np.zeros((4096,), np.float32)},
        model.exported, vjp_order={"apply": 1, "grad": 0},
    )  # fmt: skip
    source = registry.push(_model_archive(model), "mdl", aliases=["prod"],
                           examples=_model_golden(model))  # fmt: skip
    before = _blob_files(tmp_path)

    report = registry.rescue(DATE, python=PYTHON)
    assert report.refusals == ()
    (done,) = report.rescued
    (variant,) = done.variants
    assert (variant.check, variant.compared, variant.jax_version) == ("golden", 2, jax.__version__)
    rescued = registry.get(f"mdl:{done.rescued}")
    (v,) = rescued.variants
    assert (v.kind, v.jax_version, v.digest) == ("model", jax.__version__, variant.digest)
    assert v.metadata["jaxport.rescued_from"] == source.digests[0]
    # every tensor's part is the source's blob (its stored bytes, the compressed one too):
    # the rescue stored one new blob, the skeleton; the goldens are the same blob
    old_parts, new_parts = _parts(registry, source.digests[0]), _parts(registry, v.digest)
    assert len(new_parts) == 3 and new_parts[1:] == old_parts[1:]
    assert new_parts[0] != old_parts[0]
    assert _blob_files(tmp_path) - before == {new_parts[0][1]}
    assert jaxport.inspect(registry.pull_bytes(f"mdl:{done.rescued}")).format_version == 3

    lineage = registry.lineage(f"mdl:{done.rescued}")
    assert (str(lineage.derived_from), lineage.derivation) == ("mdl:1", "rescue")
    assert registry.aliases("mdl") == {"prod": done.rescued} and done.aliases_moved == ("prod",)
    pulled = registry.pull_model(f"mdl:{done.rescued}")
    assert dict(pulled.vjp_orders) == {"apply": 1, "grad": 0}
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    for name in ("apply", "grad"):
        np.testing.assert_array_equal(pulled.methods[name](x), model.methods[name](x))
    assert pulled.exported["apply"].vjp() is not None
    (finding,) = registry.audit(f"mdl:{done.rescued}", platform="cpu")
    assert finding.status == "ok" and "matches 2 example" in finding.reason
    assert registry.rescue(DATE, python=PYTHON).candidates == ()  # the source is history now


def test_a_model_without_goldens_is_checked_against_the_source(registry):
    registry.push(_model_archive(compress=False), "mdl")
    (done,) = registry.rescue(DATE, python=PYTHON).rescued
    assert [(v.check, v.compared) for v in done.variants] == [("own", 2)]  # one per method
    (finding,) = registry.audit(f"mdl:{done.rescued}", platform="cpu")
    assert finding.status == "ok" and "matches 2 example" in finding.reason


def test_a_model_failing_its_goldens_is_refused(registry):
    model = _model()
    registry.push(_model_archive(model), "mdl", aliases=["prod"],
                  examples=_model_golden(model, scale=3.0))  # fmt: skip
    report = registry.rescue(DATE, python=PYTHON)
    assert report.rescued == ()
    (refusal,) = report.refusals
    assert refusal.reason.startswith("check mismatch: ")
    assert [r.version for r in registry.list("mdl")] == [1] and registry.aliases("mdl") == {
        "prod": 1
    }


def test_a_polymorphic_model_is_checked_by_its_goldens_only(registry):
    (b,) = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 3), jnp.float32)
    model = jaxport.Model({"w": np.ones((3,), np.float32)}, lambda p, x: x * p["w"], [spec])
    registry.push(_model_archive(model), "poly")
    report = registry.rescue(DATE, python=PYTHON)
    (refusal,) = report.refusals
    assert refusal.reason.startswith("check not-run: method apply: symbolic input shapes")
    assert report.rescued == () and [r.version for r in registry.list("poly")] == [1]
    # with goldens, their shapes check it
    x = np.ones((2, 3), np.float32)
    golden = {"apply": [jaxport.Example((x,), {}, np.asarray(model.apply(x)))]}
    registry.push(_model_archive(model), "poly", examples=golden)
    (done,) = registry.rescue(DATE, python=PYTHON).rescued
    assert [(v.check, v.compared) for v in done.variants] == [("golden", 1)]


def test_a_hlo_sharding_only_model_gets_named_shardings(registry):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    s = NamedSharding(Mesh(np.array(jax.devices()[:2]), ("x",)), PartitionSpec("x"))
    w = np.arange(8, dtype=np.float32).reshape(4, 2)
    spec = jax.ShapeDtypeStruct((4, 2), jnp.float32, sharding=s)
    sharded = jaxport.Model({"w": jax.device_put(w, s)}, lambda p, x: jnp.sin(x) * p["w"], [spec])
    hlo = {name: _hlo_only(exp) for name, exp in sharded.exported.items()}
    registry.push(_model_archive(jaxport.Model.from_exported({"w": w}, hlo)), "mesh")
    (done,) = registry.rescue("2026-01-01", python=PYTHON).rescued
    (variant,) = done.variants
    assert variant.shardings.startswith("named form derived") and variant.check == "own"
    (exp,) = registry.pull_model(f"mesh:{done.rescued}").exported.values()
    assert all(n is not None for n in exp._in_named_shardings)
    (finding,) = registry.audit(f"mesh:{done.rescued}", platform="cpu")  # on 2 devices
    assert finding.status == "ok" and "matches 1 example" in finding.reason


def test_a_model_through_a_server_sends_only_its_skeleton(db_url, tmp_path):
    from _server import admin_token, serving

    blobs = str(tmp_path / "blobs")
    model = _model()
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
        source = reg.push(_model_archive(model), "mdl", aliases=["prod"],
                          examples=_model_golden(model))  # fmt: skip
    before = _blob_files(tmp_path)
    writer = admin_token(db_url, blobs, "team", scope="write")
    with (
        serving(db_url, blobs, tmp_path / "serve.log") as server,
        jaxport.Registry(server.url, token=writer) as remote,
    ):
        (done,) = remote.rescue(DATE, python=PYTHON).rescued
        assert done.variants[0].check == "golden" and done.aliases_moved == ("prod",)
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        (v,) = reg.get(f"mdl:{done.rescued}").variants
        old_parts, new_parts = _parts(reg, source.digests[0]), _parts(reg, v.digest)
        assert new_parts[1:] == old_parts[1:]
        assert _blob_files(tmp_path) - before == {new_parts[0][1]}
        assert reg.lineage(f"mdl:{done.rescued}").derivation == "rescue"


# -- through a registry server -------------------------------------------------------------


def test_rescue_through_a_server(db_url, tmp_path):
    from _server import admin_token, serving

    blobs = str(tmp_path / "blobs")
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
        exp = _export()
        reg.push(_written_by(exp), "a-enc", aliases=["prod", "gated"], examples=_golden(exp))
        reg.push(_written_by(exp), "b-enc", aliases=["prod"])
        reg.protect("a-enc", "gated", require_audit="ok")
    writer = admin_token(db_url, blobs, "team-a", scope="write", prefixes=["a-"])
    with serving(db_url, blobs, tmp_path / "serve.log") as server:
        with jaxport.Registry(server.url, token=writer) as remote:
            report = remote.rescue(DATE, python=PYTHON)
            (done,) = report.rescued
            assert (done.name, done.rescued, done.aliases_moved) == ("a-enc", 2, ("prod",))
            assert done.variants[0].check == "golden"
            (gate,) = report.refusals  # the server checked the gates: 409, a GateError here
            assert gate.alias == "gated" and gate.reason.startswith("GateError: ")
            assert remote.aliases("a-enc") == {"prod": 2, "gated": 1}
            (event,) = [e for e in remote.events(name="a-enc") if e.kind == "rescue"]
            assert event.actor == "team-a" and event.detail["source"] == "a-enc:1"
            with pytest.raises(jaxport.UnsupportedFeatureError, match="the audit queue"):
                remote.rescue(DATE, enqueue=True)
        headers = {"Authorization": f"Bearer {writer}"}
        body = {"name": "b-enc", "version": 1, "detail": {}}
        outside = httpx.post(f"{server.url}/api/v1/rescue/events", json=body, headers=headers)
        assert outside.status_code == 403
        peek = httpx.get(f"{server.url}/api/v1/rescue/examples/b-enc/1", headers=headers)
        assert peek.status_code in (403, 404)
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        assert [r.version for r in reg.list("b-enc")] == [1]  # another team's: untouched


# -- the command line ----------------------------------------------------------------------


def _run(env, *args, code=0):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_cli(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    env = {**os.environ, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": blobs, "COLUMNS": "80"}
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
        reg.push(_written_by(_export()), "enc", aliases=["prod"])
        reg.push(_written_by(_export(jnp.cos)), "late")
        reg.protect("enc", "prod", require_audit="ok")
    dry = _run(env, "rescue", "--expiring-before", DATE, "--prefix", "enc", "--dry-run").stdout
    assert "would rescue enc:1 " in dry and "would rescue 1 variant(s) in 1 version(s)" in dry
    out = _run(env, "rescue", "--expiring-before", DATE, "--python", PYTHON, "--json", code=1)
    data = json.loads(out.stdout)
    assert [(r["name"], r["rescued"]) for r in data["rescue"]["rescued"]] == [
        ("enc", 2), ("late", 2),
    ]  # fmt: skip
    (refusal,) = data["rescue"]["refusals"]
    assert refusal["alias"] == "prod" and "GateError" in refusal["reason"]
    assert "1 refusal(s)" in data["summary"]
    text = _run(env, "rescue", "--expiring-before", DATE, "--python", PYTHON, code=1).stdout
    assert "rescued enc:1 as enc:2 (already stored)" in text and "refused enc:1 alias prod" in text
    assert "2 refusal(s)" not in text
    usage = _run(env, "rescue", code=2).stderr
    assert "give FILE (a jax-native file) or --expiring-before DATE" in usage
    assert "are for --expiring-before" in _run(env, "rescue", __file__, "--dry-run", code=2).stderr
    bad = _run(env, "rescue", "--expiring-before", "soon", "--json", code=1)
    assert bad.stdout == "" and json.loads(bad.stderr)["error"]["type"] == "InvalidNameError"
    if db_url.startswith("sqlite"):
        err = _run(env, "rescue", "--expiring-before", DATE, "--enqueue", code=1).stderr
        assert err.startswith("UnsupportedFeatureError: the audit queue needs a PostgreSQL")


# -- the audit queue: real worker processes on PostgreSQL ----------------------------------


@contextlib.contextmanager
def _pg_schema():
    import sqlalchemy as sa

    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set: the audit queue needs PostgreSQL")
    base = os.environ[POSTGRES_URL_ENV]
    schema = f"r_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def test_enqueue_and_workers(tmp_path):
    with _pg_schema() as url:
        blobs = str(tmp_path / "blobs")
        env = {**os.environ, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": blobs}
        _run(env, "db", "upgrade")
        with jaxport.Registry(url, blobs=blobs) as reg:
            two = [_written_by(_export()), _written_by(_sharded())]  # 1 and 2 CPU devices
            reg.push(two, "enc", aliases=["prod"])
        out = _run(env, "rescue", "--expiring-before", DATE, "--enqueue", "--python", PYTHON,
                   "--json")  # fmt: skip
        queued = json.loads(out.stdout)["rescue"]["queued"]
        assert [(q["name"], q["platform"]) for q in queued] == [("enc", "cpu"), ("enc", "cpu")]
        assert all(q["job_id"] is not None for q in queued)
        again = json.loads(_run(env, "rescue", "--expiring-before", DATE, "--enqueue",
                                "--python", PYTHON, "--json").stdout)  # fmt: skip
        assert [q["job_id"] for q in again["rescue"]["queued"]] == [None, None]  # waiting

        workers = [
            subprocess.Popen(
                [
                    JAXPORT,
                    "audit-worker",
                    "--platform",
                    "cpu",
                    "--until-idle",
                    "--stalled-after",
                    "2",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            for _ in range(2)
        ]
        for w in workers:
            out_b, err_b = w.communicate(timeout=600)
            assert w.returncode == 0 and b"Traceback" not in out_b + err_b, err_b.decode()
        with jaxport.Registry(url, blobs=blobs) as reg:
            newest = reg.list("enc")[-1]
            assert newest.version == 3  # one version per job, the second on the first's
            assert {v.jax_version for v in newest.variants} == {jax.__version__}
            assert reg.aliases("enc") == {"prod": 3}
            events = [e for e in reg.events(name="enc") if e.kind == "rescue"]
            assert [e.detail["source"] for e in events] == ["enc:1", "enc:1"]
            lineage = reg.lineage("enc:3")
            assert (str(lineage.derived_from), lineage.derivation) == ("enc:1", "rescue")


def test_a_model_through_the_queue(tmp_path):
    with _pg_schema() as url:
        blobs = str(tmp_path / "blobs")
        env = {**os.environ, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": blobs}
        _run(env, "db", "upgrade")
        with jaxport.Registry(url, blobs=blobs) as reg:
            source = reg.push(_model_archive(), "mdl", aliases=["prod"])
        out = _run(env, "rescue", "--expiring-before", DATE, "--enqueue", "--python", PYTHON,
                   "--json")  # fmt: skip
        queued = json.loads(out.stdout)["rescue"]["queued"]
        assert [(q["name"], q["platform"]) for q in queued] == [("mdl", "cpu")]
        worker = subprocess.run(
            [JAXPORT, "audit-worker", "--platform", "cpu", "--until-idle", "--stalled-after", "2"],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert worker.returncode == 0 and "Traceback" not in worker.stderr, worker.stderr
        with jaxport.Registry(url, blobs=blobs) as reg:
            (v,) = reg.get("mdl:2").variants
            assert (v.kind, v.jax_version) == ("model", jax.__version__)
            assert _parts(reg, v.digest)[1:] == _parts(reg, source.digests[0])[1:]
            assert reg.aliases("mdl") == {"prod": 2}
            assert reg.lineage("mdl:2").derivation == "rescue"
