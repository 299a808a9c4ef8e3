"""Audit verdicts equal reality (issue 24, section 3): golden tolerances, static verdicts that
never claim more than a full audit, the matrix, the window's "last ok", identical re-pushes.

The real model here is a transformers Flax GPT-2 built in place (nothing is downloaded), small
but with weights large enough (``initializer_range=1.0``) that float32 rounding moves logits
near zero by more than jax's elementwise float32 atol (1e-6): its golden outputs are the same
network computed in float64 and rounded to float32, so they differ from the float32 run by
rounding only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.audit._examples import Tolerance, check_tolerance, compare, tolerance
from jaxport.registry._golden import examples_from_blob, golden_blob

# -- golden tolerances ----------------------------------------------------------------------


def _gpt2(**changes: float) -> tuple[jaxport.Model, np.ndarray, np.ndarray]:
    """``(model, input ids, logits computed in float64 and rounded to float32)``, the float64
    network's config with ``changes`` (a real break: another layer-norm epsilon, say)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("flax")
    kwargs = {"vocab_size": 256, "n_positions": 16, "n_embd": 64, "n_layer": 2, "n_head": 2,
              "initializer_range": 1.0}  # fmt: skip
    lm = transformers.FlaxGPT2LMHeadModel(transformers.GPT2Config(**kwargs), seed=0)
    ids = (np.arange(8, dtype=np.int32) * 7 % 256).reshape(1, 8)

    def logits(params, ids):
        return lm(ids, params=params).logits

    model = jaxport.Model(lm.params, logits, [jax.ShapeDtypeStruct((1, 8), jnp.int32)])
    config64 = transformers.GPT2Config(**(kwargs | changes))
    with jax.enable_x64(True):
        lm64 = transformers.FlaxGPT2LMHeadModel(config64, seed=0, dtype=jnp.float64)
        params64 = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), lm.params)
        exact = np.asarray(jax.jit(lambda p, i: lm64(i, params=p).logits)(params64, ids))
    return model, ids, exact.astype(np.float32)


def test_a_real_model_whose_outputs_differ_by_rounding_is_ok(registry):
    model, ids, rounded = _gpt2()
    got = np.asarray(model.apply(ids))
    noise = np.abs(got - rounded)
    assert noise.max() > 0 and np.any(noise > 1e-6 + 1e-5 * np.abs(rounded))  # old rule fails
    registry.push(model, "gpt2", examples={"apply": [jaxport.Example((ids,), {}, rounded)]})
    (finding,) = registry.audit("gpt2", platform="cpu")
    assert finding.status == "ok", finding.reason
    for says in ("max abs error", "max rel error", "atol", "rtol", "dtype rule"):
        assert says in finding.reason and says in finding.checks["golden"], finding


def test_a_real_numerical_break_is_a_mismatch_stating_errors_and_tolerance(registry):
    model, ids, other = _gpt2(layer_norm_epsilon=1e-3)  # instead of 1e-5
    registry.push(model, "gpt2", examples={"apply": [jaxport.Example((ids,), {}, other)]})
    (finding,) = registry.audit("gpt2", platform="cpu")
    assert finding.status == "mismatch", finding.reason
    for says in ("max abs error", "max rel error", "float32", "atol", "rtol", "beyond"):
        assert says in finding.reason, finding.reason
    assert "tolerance float32: atol" in finding.checks["golden"]


def test_a_push_tolerance_overrides_the_dtype_rule(registry):
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((8,), jnp.float32))
    off = np.sin(x) + np.float32(1e-3)  # a mismatch under the dtype rule
    registry.push(exp, "s", examples=[jaxport.Example((x,), {}, off)])
    registry.push(exp, "s", examples=[jaxport.Example((x,), {}, off)], tolerance={"atol": 2e-3})
    registry.push(exp, "s", examples=[jaxport.Example((x,), {}, np.sin(x))], tolerance=0.0)
    one, two, three = (registry.audit(f"s:{v}", platform="cpu")[0] for v in (1, 2, 3))
    assert one.status == "mismatch" and "dtype rule" in one.reason
    assert two.status == "ok" and "atol 0.002 + rtol 0 x |expected| (override)" in two.reason
    assert three.status in ("ok", "mismatch") and "(override)" in three.checks["golden"]
    with pytest.raises(jaxport.InvalidNameError, match="examples"):
        registry.push(exp, "s", tolerance=1e-3)
    for bad in (-1.0, float("nan"), "x", {"rel": 1}, (1, 2, 3), True):
        with pytest.raises(jaxport.InvalidNameError):
            registry.push(exp, "s", examples=[((x,), {})], tolerance=bad)


def test_a_tolerance_survives_the_blob_a_server_reads_back():
    x = np.ones(4, np.float32)
    examples = [jaxport.Example((x,), {}, x)]
    digest, data = golden_blob("function", examples, lambda: None, (1e-4, 1e-3))
    again = examples_from_blob("function", data)
    assert again.tolerance == Tolerance(1e-4, 1e-3, "override")
    assert golden_blob("function", again, lambda: None) == (digest, data)
    plain_digest, plain = golden_blob("function", examples, lambda: None)
    assert plain_digest != digest and examples_from_blob("function", plain).tolerance is None


@pytest.mark.parametrize(
    ("text", "want"),
    [("1e-4", (1e-4, 1e-4)), ("rtol=1e-5,atol=1e-3", (1e-5, 1e-3)), ("atol=2", (0.0, 2.0))],
)
def test_the_cli_tolerance_text(text, want):
    found = check_tolerance(text)
    assert found is not None and (found.rtol, found.atol) == want


def test_the_dtype_rule():
    assert tolerance(np.dtype(np.int32), 100.0) == Tolerance(0.0, 0.0)
    f32 = tolerance(np.dtype(np.float32), 10.0)
    assert f32.rtol == 1e-6 and f32.atol == pytest.approx(512 * 2**-23 * 10)
    assert tolerance(np.dtype(np.float32), 0.0).atol == 1e-6  # jax's default is the floor
    assert tolerance(np.dtype(jnp.bfloat16), 1.0).atol == pytest.approx(2 * 2**-7)
    nan = np.array([np.nan, np.inf, 1.0], np.float32)
    assert compare([nan], [nan]).ok
    assert not compare([np.array([np.nan, np.inf, 1.0], np.float32)], [nan[::-1].copy()]).ok
    assert not compare([np.array([1, 2], np.int32)], [np.array([1, 3], np.int32)]).ok


# -- what a finding speaks for: the matrix, upgrade rows, the window's "last ok" ---------------


def _finding(status, jax_version="0.12.0.1", *, level="full", created_at=1.0, platform="cpu"):
    from jaxport.audit import Finding

    return Finding("m", 1, "ab" * 32, jax_version, jax_version, platform, status, status, {},
                   0.1, created_at, level=level)  # fmt: skip


def test_the_matrix_shows_the_measured_finding_over_a_later_not_run():
    from jaxport.audit import matrix_cells

    newest_first = [_finding("not-run", created_at=3.0), _finding("mismatch", created_at=2.0),
                    _finding("unknown", level="static", created_at=4.0)]  # fmt: skip
    (cell,) = matrix_cells(newest_first)
    assert cell.status == "mismatch"
    (only,) = matrix_cells([_finding("not-run")])
    assert only.status == "not-run"


def test_an_upgrade_row_is_measured_and_unknown_is_no_break():
    from jaxport.audit import compare_findings

    rows = compare_findings(
        [_finding("not-run", "0.12", created_at=3.0), _finding("error", "0.12", created_at=2.0),
         _finding("ok", "0.10.2")], "0.10.2", "0.12",
    )  # fmt: skip
    assert [(r.now, r.after, r.breaks) for r in rows] == [("ok", "error", True)]
    (row,) = compare_findings(
        [_finding("unknown", "0.12", level="static"), _finding("ok", "0.10.2")], "0.10.2", "0.12"
    )
    assert (row.after, row.breaks) == ("unknown", False)


def _last_ok(findings):
    from jaxport.registry._types import Ref, VariantInfo
    from jaxport.registry._windows import variant_windows

    variant = VariantInfo.__new__(VariantInfo)
    for field, value in {"digest": "ab" * 32, "jax_version": "0.10.2", "sharded": False,
                         "platforms": ("cpu",)}.items():  # fmt: skip
        object.__setattr__(variant, field, value)
    ref = Ref("m", 1, (variant,), {}, 0.0)
    (row,) = variant_windows([ref], findings, running="0.12.0.1")
    return row.window.last_known_release


def test_last_ok_never_names_a_jax_whose_full_audits_say_error():
    static_ok = _finding("ok", level="static", created_at=3.0)  # stored by an earlier jaxport
    error_then_ok = [static_ok, _finding("error", created_at=2.0), _finding("ok", "0.10.2")]
    assert _last_ok(error_then_ok) == "0.10.2"  # not 0.12.0.1: its full audit says error
    assert _last_ok([_finding("error", created_at=2.0), _finding("ok", created_at=1.0)]) is None
    assert _last_ok([_finding("ok", level="static", created_at=2.0)]) is None
    assert _last_ok([_finding("not-run", created_at=2.0), _finding("ok")]) == "0.12.0.1"
    mixed = [_finding("ok"), _finding("compile-error", platform="cuda")]
    assert _last_ok(mixed) is None


def test_a_static_audit_gives_no_last_ok(registry):
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((4,), jnp.float32))
    registry.push(exp, "s")
    (static,) = registry.audit("s", level="static")
    assert static.status == "unknown" and "only a full audit" in static.reason
    (window,) = registry.windows("s")
    assert window.window.last_known_release is None
    registry.audit("s")
    (window,) = registry.windows("s")
    assert window.window.last_known_release == jax.__version__


def test_an_audit_tolerance_overrides_the_stored_one_and_is_kept_apart(registry):
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((8,), jnp.float32))
    registry.push(exp, "s", examples=[jaxport.Example((x,), {}, np.sin(x) + np.float32(1e-3))])
    (strict,) = registry.audit("s", platform="cpu")
    (loose,) = registry.audit("s", platform="cpu", tolerance="rtol=0,atol=2e-3")
    assert strict.status == "mismatch" and loose.status == "ok" and not loose.reused
    assert "atol 0.002 + rtol 0 x |expected| (override)" in loose.reason
    (again,) = registry.audit("s", platform="cpu")  # the stored tolerance's finding, reused
    assert again.status == "mismatch" and again.reused
    with pytest.raises(jaxport.InvalidNameError):
        registry.audit("s", tolerance="loose")


def test_the_cli_audit_tolerance(tmp_path):
    from test_cli import base_env, run

    env = {**base_env(tmp_path), "JAXPORT_REGISTRY": f"sqlite:///{tmp_path / 'r.db'}",
           "JAXPORT_BLOBS": str(tmp_path / "blobs")}  # fmt: skip
    reg = jaxport.Registry(env["JAXPORT_REGISTRY"], blobs=env["JAXPORT_BLOBS"])
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((8,), jnp.float32))
    reg.push(exp, "s", examples=[jaxport.Example((x,), {}, np.sin(x) + np.float32(1e-3))])
    reg.close()
    run(env, "audit", "run", "s", "--platform", "cpu", code=1)  # mismatch
    ok = run(env, "audit", "run", "s", "--platform", "cpu", "--tolerance", "atol=2e-3")
    assert "ok" in ok.out
    bad = run(env, "audit", "run", "s", "--tolerance", "loose", code=1)
    assert bad.err.startswith("InvalidNameError: ")
    run(env, "audit", "--matrix", "--tolerance", "1e-3", code=2)


# -- pushing the same archives and examples again ----------------------------------------------


def test_a_repush_with_outputs_computed_again_changes_nothing(registry, monkeypatch):
    """Outputs left for the push to compute come from the same archive: a backend whose
    numerics vary between runs (GPU autotuning) must not make the same content a new version."""
    from jaxport.registry import _golden

    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((4,), jnp.float32))
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    first = registry.push(exp, "r", examples=[((x,), {})])
    real = _golden._call_placed
    monkeypatch.setattr(_golden, "_call_placed",
                        lambda e, leaves: real(e, leaves) + np.float32(1e-7))  # fmt: skip
    again = registry.push(exp, "r", examples=[((x,), {})])
    assert (again.version, again.created) == (first.version, False)
    given = registry.push(exp, "r", examples=[jaxport.Example((x,), {}, np.sin(x) + 1)])
    assert given.created  # other outputs, given: other examples
    other = registry.push(exp, "r", examples=[((x + 1,), {})])
    assert other.created  # other inputs
    tolerant = registry.push(exp, "r", examples=[((x,), {})], tolerance=1e-3)
    assert tolerant.created  # another tolerance
    assert registry.push(exp, "r", examples=[((x,), {})], tolerance=1e-3).created is False


def test_a_push_never_calls_archive_bytes_to_compute_outputs(registry, tmp_path):
    """Issue 24, F13: outputs left out were computed by calling the pushed archive's modules in
    the caller's process, without a time limit (a sandbox-accepted module may loop). Only an
    Exported or Model the caller passes is called; bytes and files need their outputs."""
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((4,), jnp.float32))
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    path = tmp_path / "sin.jaxport"
    jaxport.save(exp, path)
    for source in (jaxport.dumps(exp), path):
        with pytest.raises(jaxport.UnsupportedFeatureError, match="never by archive bytes"):
            registry.push(source, "f13", examples=[jaxport.Example((x,), {})])
    assert "f13" not in registry.names()  # a failed push leaves the registry as it was
    ref = registry.push(path, "f13", examples=[jaxport.Example((x,), {}, np.sin(x))])
    assert ref.version == 1
    again = registry.push(exp, "f13", examples=[jaxport.Example((x,), {})])  # outputs: sin(x)
    assert (again.version, again.created) == (1, False)  # the same bytes and examples
