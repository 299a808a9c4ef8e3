"""Audits (load, compile) with the running jax, and diffs between versions; both backends."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport
from jaxport.audit import audit_archive


def _exp(fun=jnp.sin, *shapes, platforms=None, **kwargs):
    specs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in (shapes or [(4,)])]
    return jax.export.export(jax.jit(fun), platforms=platforms, **kwargs)(*specs)


def _missing_custom_call():
    target = "jaxport_no_such_target"

    def fun(x):
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return _exp(fun, disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)])


def test_audit_statuses(registry):
    registry.push(_exp(jnp.sin), "ok")
    registry.push(_exp(jnp.sin, platforms=("tpu",)), "tpu-only")
    registry.push(_missing_custom_call(), "missing-target")
    (b,) = jax.export.symbolic_shape("b", constraints=["b >= 5"])
    poly = jax.export.export(jax.jit(jnp.cos))(jax.ShapeDtypeStruct((b, 2), jnp.float32))
    registry.push(poly, "poly")
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    sharded = jax.export.export(
        jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x", "y")))
    )(jax.ShapeDtypeStruct((8, 4), jnp.float32))
    registry.push(sharded, "sharded")

    findings = {f.name: f for f in registry.audit()}
    assert findings["ok"].status == "ok"
    # Nothing was compiled for TPU here: not measured, so neither ok nor incompatible.
    assert findings["tpu-only"].status == "not-run" and findings["tpu-only"].platform == "tpu"
    assert "no tpu device here" in findings["tpu-only"].reason
    assert findings["missing-target"].status == "compile-error"
    assert "jaxport_no_such_target" in findings["missing-target"].reason
    assert "not guaranteed stable" in findings["missing-target"].checks["custom calls"]
    assert (
        findings["poly"].status == "ok"
        and "symbolic dims = 8" in findings["poly"].checks["compile"]
    )
    assert findings["sharded"].status == "ok", findings["sharded"].reason

    stored = registry.audit_results(jax_version=jax.__version__)
    assert {f.name for f in stored} == set(findings)
    assert {f.platform for f in stored} == {"cpu", "tpu"} and all(f.seconds >= 0 for f in stored)
    assert registry.audit_results(name="ok")[0].status == "ok"


def test_audit_calling_convention_out_of_range(monkeypatch):
    data = jaxport.dumps(_exp())
    from jaxport.audit import _checks

    monkeypatch.setattr(_checks, "runnable_calling_conventions", lambda: (99, 100))
    result = audit_archive(data, platform="cpu")
    assert result.status == "incompatible" and "calling convention version" in result.reason


def test_audit_of_too_few_devices_is_not_run_with_the_hint(registry, monkeypatch):
    mesh = Mesh(np.array(jax.devices()), ("x",))
    exp = jax.export.export(jax.jit(lambda x: x + 1, in_shardings=NamedSharding(mesh, P("x"))))(
        jax.ShapeDtypeStruct((8,), jnp.float32)
    )
    registry.push(exp, "eight")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    (finding,) = registry.audit("eight")
    assert finding.status == "not-run"
    assert "8 cpu devices needed, 2 available" in finding.reason
    assert "xla_force_host_platform_device_count=8" in finding.reason


def test_an_export_over_two_meshes_audits_ok_and_reruns_its_examples(registry):
    """Inputs over a 1x2 mesh, weights over a 2x1 one (jax's export_with_multiple_meshes):
    each input is placed on a mesh of its own sharding's shape, not one mesh for all."""
    devices = np.array(jax.devices()[:2])
    mesh_in = Mesh(devices.reshape(1, 2), ("x1", "x2"))
    mesh_w = Mesh(devices.reshape(2, 1), ("y2", "y1"))
    f = jax.jit(
        lambda x, w: x @ w,
        in_shardings=(NamedSharding(mesh_in, P(None, "x2")), NamedSharding(mesh_w, P("y2", None))),
        out_shardings=NamedSharding(mesh_in, P(None, "x1")),
    )
    x = np.arange(32.0, dtype=np.float32).reshape(4, 8)
    w = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    try:
        exp = jax.export.export(f)(
            jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype)
        )
    except ValueError as e:  # jax 0.7: "Mesh for all inputs/outputs should be equal"
        if "should be equal" not in str(e):
            raise
        pytest.skip(f"jax {jax.__version__} cannot export over two meshes (it has no such export)")
    registry.push(exp, "two-meshes", examples=[jaxport.Example((x, w), {}, x @ w)])
    (finding,) = registry.audit("two-meshes")
    assert finding.status == "ok", finding.reason
    assert "1 example(s)" in finding.checks["golden"]


def test_symbolic_inputs_with_concrete_outputs_compile_at_the_size_they_pin():
    """jax's back-compat Exporteds take out_avals from one run: approx_max_k(a, k=b) of
    f32[b + 4] declares f32[20] outputs, so only b = 20 refines; the audit tries it."""
    (n,) = jax.export.symbolic_shape("b + 4")
    poly = jax.export.export(jax.jit(lambda a: jax.lax.approx_max_k(a, k=a.shape[0] - 4)))(
        jax.ShapeDtypeStruct((n,), jnp.float32)
    )
    outs = (jax.core.ShapedArray((20,), jnp.float32), jax.core.ShapedArray((20,), jnp.int32))
    pinned = dataclasses.replace(poly, out_avals=outs)
    result = audit_archive(jaxport.dumps(pinned), platform="cpu")
    assert result.status == "ok", result.reason
    assert result.checks["compile"] == "ok (symbolic dims = 20)"
    # The unpinned export still compiles at the first small size.
    assert audit_archive(jaxport.dumps(poly), platform="cpu").checks["compile"] == (
        "ok (symbolic dims = 2)"
    )


def test_symbolic_inputs_compile_at_the_shapes_of_the_first_golden_example(registry):
    """f32[b0, b1] -> f32[6] (jax's rng_bit_generator data: b0 * b1 pinned): no single size
    for both variables refines; the stored example's (2, 3) does."""
    b0, b1 = jax.export.symbolic_shape("b0, b1")
    poly = jax.export.export(jax.jit(lambda a: a.reshape(-1)))(
        jax.ShapeDtypeStruct((b0, b1), jnp.float32)
    )
    pinned = dataclasses.replace(poly, out_avals=(jax.core.ShapedArray((6,), jnp.float32),))
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    registry.push(pinned, "pinned", examples=[jaxport.Example((a,), {}, a.reshape(-1))])
    (finding,) = registry.audit("pinned")
    assert finding.status == "ok", finding.reason
    assert finding.checks["compile"] == "ok (symbolic dims = the first example's shapes)"
    assert audit_archive(jaxport.dumps(pinned), platform="cpu").status == "compile-error"


def test_audit_of_garbage_is_an_error_finding():
    assert audit_archive(b"garbage", platform="cpu").status == "error"


def test_audit_inputs(registry):
    registry.push(_exp(jnp.sin), "a")
    with pytest.raises(jaxport.NotFoundError):
        registry.audit("no-such-name")
    with pytest.raises(jaxport.NotFoundError):
        registry.audit("a:7")
    with pytest.raises(jaxport.InvalidNameError, match="unknown platform"):
        registry.audit("a", platform="vulkan")
    with pytest.raises(jaxport.NotFoundError, match="no Python interpreter"):
        registry.audit("a", python="/missing/python")
    with pytest.raises(jaxport.NotFoundError, match="no Python interpreter"):
        registry.upgrade_report("/missing/python")
    with pytest.raises(jaxport.AuditError, match="did not start"):
        registry.audit("a", python="/bin/true")


def test_matrix_and_upgrade_rows_are_keyed_by_platform(registry):
    registry.push(_exp(jnp.sin, platforms=("cpu", "rocm")), "k")
    findings = registry.audit("k")
    assert {(f.platform, f.status) for f in findings} == {("cpu", "ok"), ("rocm", "not-run")}
    rows = registry.upgrade_report(jax.__version__, "k")
    assert {(r.platform, r.now, r.breaks) for r in rows} == {
        ("cpu", "ok", False),
        ("rocm", "not-run", False),
    }
    rows = registry.upgrade_report("0.0.1", "k")
    assert {r.after for r in rows} == {"not audited"} and len(rows) == 2


def test_diff_classifies_changes(registry):
    registry.push(_exp(lambda x: x * 2, (4,)), "d")
    registry.push(_exp(lambda x: x * 2, (5,)), "d")  # input shape changed: breaking
    (b,) = jax.export.symbolic_shape("b")
    poly = jax.export.export(jax.jit(lambda x: x * 2))(jax.ShapeDtypeStruct((b,), jnp.float32))
    registry.push(poly, "d")
    registry.push(_exp(lambda x: (x * 2, x), (4,)), "d")  # outputs changed

    shape = registry.diff("d:1", "d:2")
    assert [(c.what, c.breaking) for c in shape if c.what == "input shape"] == [
        ("input shape", True)
    ]
    general = registry.diff("d:1", "d:3")
    inputs = [c for c in general if c.what == "input shape"]
    assert inputs and not inputs[0].breaking  # static -> symbolic is compatible
    outputs = registry.diff("d:1", "d:4")
    assert any(c.what == "output added" and c.breaking for c in outputs)
    assert registry.diff("d:1", "d:1") == []

    registry.push(_exp(lambda x: x * 2, (4,), platforms=("cpu", "tpu")), "e")
    registry.push(_exp(lambda x: x * 2, (4,), platforms=("cpu",)), "e")
    removed = [c for c in registry.diff("e:1", "e:2") if c.what == "platforms"]
    assert removed and removed[0].breaking
    added = [c for c in registry.diff("e:2", "e:1") if c.what == "platforms"]
    assert added and not added[0].breaking


def test_golden_examples_ok_and_mismatch(registry):
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    registry.push(_exp(jnp.sin), "g", examples=[((x,), {})])
    ok = registry.audit("g:1", platform="cpu")[0]
    assert ok.status == "ok" and "matches 1 example(s)" in ok.reason
    assert "max abs error 0" in ok.checks["golden"]

    wrong = np.sin(x) + np.float32(0.01)  # what a producer with other numerics computed
    registry.push(_exp(jnp.sin), "g", examples=[jaxport.Example((x,), {}, wrong)])
    bad = registry.audit("g:2", platform="cpu")[0]
    assert bad.status == "mismatch" and "float32" in bad.reason
    assert "max abs error 0.01" in bad.checks["golden"]


def test_golden_tolerance_is_dtype_aware(registry):
    x = np.linspace(-1, 1, 8).astype(jnp.bfloat16)
    exp = jax.export.export(jax.jit(lambda v: v * 3))(jax.ShapeDtypeStruct((8,), jnp.bfloat16))
    near = (np.asarray(x, np.float32) * 3 * 1.004).astype(jnp.bfloat16)  # within bf16 precision
    registry.push(exp, "b", examples=[jaxport.Example((x,), {}, near)])
    assert registry.audit("b", platform="cpu")[0].status == "ok"


def test_examples_need_outputs_when_nothing_runs_here(registry):
    import pytest

    with pytest.raises(jaxport.UnsupportedFeatureError, match="Example"):
        registry.push(
            _exp(jnp.sin, platforms=("tpu",)), "t", examples=[((np.zeros(4, np.float32),), {})]
        )


def test_gc_and_verify_keep_example_blobs(registry):
    registry.push(_exp(jnp.sin), "k", examples=[((np.ones(4, np.float32),), {})])
    assert registry.gc(dry_run=True, min_age=0).digests == ()
    report = registry.verify()
    assert report.checked == 2 and report.ok


def test_a_worker_that_dies_is_a_crash_finding_and_the_next_job_still_runs(tmp_path):
    import stat
    import sys

    from jaxport.audit import AuditJob, run_audits

    fake = tmp_path / "python"  # speaks the worker protocol, then dies like a segfault
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, signal, sys\n"
        "print(json.dumps({'jax_version': '9.9', 'jaxlib_version': '9.9'}), flush=True)\n"
        "sys.stdin.readline()\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    jobs = [AuditJob(b"x", "cpu"), AuditJob(b"y", "cpu")]
    env, results = run_audits(jobs, python=fake)
    assert env.jax_version == "9.9"
    assert [r.status for r in results] == ["crash", "crash"]
    assert "SIGSEGV" in results[0].reason


def test_a_job_over_its_time_limit_is_killed_and_reported():
    from jaxport.audit import AuditJob, run_audits

    data = jaxport.dumps(_exp())
    _, (result,) = run_audits([AuditJob(data, "cpu")], timeout=0.001)
    assert result.status == "crash" and "time limit" in result.reason
