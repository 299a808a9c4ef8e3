"""Accept what jax accepts, refuse only at use (issue 16, part a).

Modules from jax's own back-compat data (``jax/_src/internal_test_util/
export_back_compat_test_data``, shipped with jax): calling convention versions 6 and 7 on CPU
(``stablehlo_dynamic_top_k``, ``stablehlo_dynamic_rng_bit_generator``), version 4 on TPU
(``tpu_Eigh``), a Shardy module (``annotate_data_placement``, ``xla.sdy.FuncResultSharding``),
ROCm eigh (``hipsolver_syevj``) and a Pallas Triton kernel (``__gpu$xla.gpu.triton``). Each is put
in an Exported as jax's ``export_back_compat_test_util.run_serialized`` does. The jax 0.4.30 QR
artifact (tests/data/old_jax) calls ``lapack_sgeqrf``, stable then and gone from jaxlib now.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax import export
from jax._src.internal_test_util.export_back_compat_test_data import (
    annotate_data_placement,
    rocm_eigh_hipsolver_syev,
    stablehlo_dynamic_rng_bit_generator,
    stablehlo_dynamic_top_k,
    tpu_Eigh,
)
from jax._src.internal_test_util.export_back_compat_test_data.pallas import triton_add_one

import jaxport
from _helpers import from_compat_data
from jaxport.export import _calls, _compat, _jax_targets, stable_custom_call_targets

OLD_JAX = Path(__file__).parent / "data" / "old_jax"


TOP_K_V6 = stablehlo_dynamic_top_k.data_2023_07_16
TOP_K_V7 = stablehlo_dynamic_top_k.data_2023_08_11
RBG_V6 = stablehlo_dynamic_rng_bit_generator.data_2023_06_17


@pytest.mark.parametrize(
    ("data", "shapes", "version"),
    [(TOP_K_V6, ("_, b",), 6), (TOP_K_V7, ("_, b",), 7), (RBG_V6, (None, "b0, b1"), 6)],
)
def test_old_calling_conventions_dump_load_and_run(data, shapes, version):
    exp = from_compat_data(data, shapes)
    archive = jaxport.dumps(exp)
    back = jaxport.loads(archive)
    assert back.calling_convention_version == version
    with jax.default_prng_impl("unsafe_rbg") if data is RBG_V6 else _nothing():
        got = back.call(*data["inputs"])
    want = data["expected_outputs"]
    if data is RBG_V6:
        np.testing.assert_array_equal(got[0], want[0])
    else:  # top_k: the same values (the order of ties may differ)
        np.testing.assert_allclose(np.sort(got[0]), np.sort(want[0]))


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def test_calling_convention_4_on_tpu_reads_and_writes():
    exp = from_compat_data(tpu_Eigh.data)
    assert exp.calling_convention_version == 4
    back = jaxport.loads(jaxport.dumps(exp))
    assert back.calling_convention_version == 4 and back.platforms == ("tpu",)


@pytest.mark.parametrize("version", [3, 99])
def test_a_version_jax_cannot_run_loads_and_is_refused_at_call(version):
    exp = _with(from_compat_data(TOP_K_V7, ("_, b",)), calling_convention_version=version)
    back = jaxport.loads(jaxport.dumps(exp))
    assert back.calling_convention_version == version
    with pytest.raises(jaxport.UnsupportedVersionError) as e:
        back.call(*TOP_K_V7["inputs"])
    assert e.value.found_version == version
    assert e.value.supported == _calls.runnable_calling_conventions()
    assert ("newer jax" if version == 99 else "no jax release since 0.4.30") in str(e.value)


def test_releases_exporting_names_them():
    assert _calls.releases_exporting(10) == f"jax 0.7.0 to {_jax_targets.RELEASES[-1]} export it"
    assert "before 0.4.30" in _calls.releases_exporting(7)


def test_shardy_target_is_accepted_by_default():
    exp = from_compat_data(annotate_data_placement.data_2025_04_07_cuda["shardy"])
    back = jaxport.loads(jaxport.dumps(exp))
    assert back.mlir_module_serialized == exp.mlir_module_serialized


@pytest.mark.parametrize(
    "data",
    [rocm_eigh_hipsolver_syev.data_2024_08_05["f32_syevj"], triton_add_one.data_2024_05_02],
    ids=["rocm-eigh", "pallas-triton"],
)
def test_targets_of_older_jax_stable_lists_load_by_default(data):
    exp = from_compat_data(data)
    assert jaxport.loads(jaxport.dumps(exp)).platforms == (data["platform"],)


def test_the_table_is_a_superset_of_the_running_jax():
    from jax._src.export import _export

    running = set(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)
    assert running <= stable_custom_call_targets()  # on any jax, the table's or newer
    assert "xla.sdy.FuncResultSharding" in stable_custom_call_targets()
    assert jaxport.export.target_releases("lapack_sgeqrf") == ("0.4.30..0.4.34",)
    if jax.__version__ not in _jax_targets.RELEASES:
        pytest.skip(f"jax {jax.__version__} is newer than the table: regenerate it")
    assert running <= set(_jax_targets.STABLE_TARGETS)
    for t in running:
        assert jax.__version__ in _releases(t), t
    assert _jax_targets.CALLING_CONVENTIONS[jax.__version__] == _compat.calling_convention_range()


def _releases(target: str) -> set[str]:
    names = list(_jax_targets.RELEASES)
    out: set[str] = set()
    for span in _jax_targets.STABLE_TARGETS[target]:
        first, last = span.split("..")
        out.update(names[names.index(first) : names.index(last) + 1])
    return out


def test_the_table_is_what_the_script_makes():
    """Set JAXPORT_JAX_CLONE to a git clone of github.com/jax-ml/jax (with its tags) to run."""
    import os
    import sys

    repo = os.environ.get("JAXPORT_JAX_CLONE")
    if not repo:
        pytest.skip("JAXPORT_JAX_CLONE is not set (scripts/jax_custom_call_table.py needs a clone)")
    script = Path(__file__).parents[1] / "scripts" / "jax_custom_call_table.py"
    made = subprocess.run(
        [sys.executable, script, repo], capture_output=True, text=True, check=True, timeout=600
    )
    table = Path(__file__).parents[1] / "export" / "_jax_targets.py"
    assert made.stdout == table.read_text()


def test_a_target_jaxlib_lacks_loads_and_fails_at_call():
    # jax 0.4.30's QR as a jaxport archive (jax >= 0.11.1 refuses its jax-native bytes)
    back = jaxport.load(OLD_JAX / "qr_f32.jaxport")  # lapack_sgeqrf: stable in 0.4.30..0.4.34
    with pytest.raises(jaxport.MissingCustomCallError) as e:
        back.call(np.eye(4, dtype=np.float32))
    assert e.value.targets == ("lapack_sgeqrf",)
    assert "0.4.30..0.4.34" in str(e.value)
    assert isinstance(e.value, jaxport.UnsupportedFeatureError)


def _with(exp: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(exp, **changes)


def _foo() -> Any:
    """An Exported whose module calls ``foo``, a target no jax release lists as stable."""
    dc = export.DisabledSafetyCheck.custom_call("foo")

    def f(x: Any) -> Any:
        return jax.ffi.ffi_call("foo", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return export.export(jax.jit(f), disabled_checks=[dc])(jax.ShapeDtypeStruct((3,), np.float32))


def test_push_and_pull_take_allow_custom_calls(registry):
    foo = _foo()
    data = jaxport.dumps(foo)
    with pytest.raises(jaxport.UnsafeArchiveError, match="--allow-custom-call foo"):
        registry.push(data, "foo")
    with pytest.raises(TypeError, match="not one string"):
        registry.push(data, "foo", allow_custom_calls="foo")
    ref = registry.push(data, "foo", allow_custom_calls=("foo",))
    with pytest.raises(jaxport.UnsafeArchiveError):
        registry.pull(f"foo:{ref.version}")
    back = registry.pull(f"foo:{ref.version}", allow_custom_calls=("foo",))
    assert back.mlir_module_serialized == foo.mlir_module_serialized
    with pytest.raises(jaxport.MissingCustomCallError, match="'foo'"):
        back.call(np.zeros(3, np.float32))


def test_push_accepts_shardy_and_old_calling_conventions_by_default(registry):
    shardy = from_compat_data(annotate_data_placement.data_2025_04_07_cuda["shardy"])
    old = from_compat_data(TOP_K_V6, ("_, b",))
    registry.push(jaxport.dumps(shardy), "shardy")
    registry.push(jaxport.dumps(old), "topk")
    registry.push(old, "topk-exported")
    assert registry.pull("topk").calling_convention_version == 6


def test_an_audit_reports_a_missing_target():
    from jaxport.audit._checks import audit_archive

    result = audit_archive((OLD_JAX / "qr_f32.jaxport").read_bytes(), platform="cpu")
    assert result.status == "compile-error"
    assert "MissingCustomCallError" in result.reason and "lapack_sgeqrf" in result.reason


def test_cli_allow_custom_call(tmp_path, db_url):
    import os
    import sys

    archive = tmp_path / "foo.jaxport"
    archive.write_bytes(jaxport.dumps(_foo()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(
        JAX_PLATFORMS="cpu",
        JAXPORT_HOME=str(tmp_path / "home"),
        JAXPORT_REGISTRY=db_url,
        JAXPORT_BLOBS=str(tmp_path / "blobs"),
    )
    cli = str(Path(sys.executable).with_name("jaxport"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=300)

    refused = run("push", str(archive), "--name", "foo")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "UnsafeArchiveError" in refused.stderr and "--allow-custom-call foo" in refused.stderr
    pushed = run("push", str(archive), "--name", "foo", "--allow-custom-call", "foo")
    assert pushed.returncode == 0, pushed.stderr
    out = tmp_path / "foo.jaxexport"
    refused = run("pull", "foo", "--format", "jax", "-o", str(out))
    assert refused.returncode == 1 and "UnsafeArchiveError" in refused.stderr
    pulled = run("pull", "foo", "--format", "jax", "-o", str(out), "--allow-custom-call", "foo")
    assert pulled.returncode == 0, pulled.stderr
    assert export.deserialize(bytearray(out.read_bytes())).fun_name == _foo().fun_name


def _foo_model() -> jaxport.Model:
    """A model whose method ``f(params, x)`` calls ``foo`` (no handler anywhere)."""
    dc = export.DisabledSafetyCheck.custom_call("foo")

    def f(p: Any, x: Any) -> Any:
        return jax.ffi.ffi_call("foo", jax.ShapeDtypeStruct(x.shape, x.dtype))(x * p["w"])

    params = {"w": np.ones(3, np.float32)}
    spec = jax.ShapeDtypeStruct((3,), np.float32)
    exp = export.export(jax.jit(f), disabled_checks=[dc])(params, spec)
    return jaxport.Model.from_exported(params, {"f": exp})


def test_load_model_and_pull_model_take_allow_custom_calls(registry, tmp_path):
    path = tmp_path / "foo-model.jaxport"
    _foo_model().save(path)
    with pytest.raises(jaxport.UnsafeArchiveError, match="--allow-custom-call foo"):
        jaxport.load_model(path)
    model = jaxport.load_model(path, allow_custom_calls=("foo",))
    with pytest.raises(jaxport.MissingCustomCallError, match="'foo'"):
        model.exported["f"].call(model.params, np.zeros(3, np.float32))
    registry.push(path, "foo-model", allow_custom_calls=("foo",))
    with pytest.raises(jaxport.UnsafeArchiveError):
        registry.pull_model("foo-model")
    assert "f" in registry.pull_model("foo-model", allow_custom_calls=("foo",)).exported


def test_cli_run_allow_custom_call(tmp_path):
    import os
    import sys

    path = tmp_path / "foo-model.jaxport"
    _foo_model().save(path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, np.zeros(3, np.float32))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(JAX_PLATFORMS="cpu", JAXPORT_HOME=str(tmp_path / "home"))
    cli = str(Path(sys.executable).with_name("jaxport"))
    argv = [cli, "run", str(path), "f", "-i", str(inputs), "-o", str(tmp_path / "out.npz")]
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "UnsafeArchiveError" in refused.stderr and "--allow-custom-call foo" in refused.stderr
    argv += ["--allow-custom-call", "foo"]
    missing = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "MissingCustomCallError" in missing.stderr and "'foo'" in missing.stderr


def test_a_vjp_calling_a_missing_target_fails_at_its_call():
    dc = export.DisabledSafetyCheck.custom_call("bar")

    @jax.custom_vjp
    def f(x: Any) -> Any:
        return jax.numpy.sin(x)

    def bwd(x: Any, g: Any) -> Any:
        return (jax.ffi.ffi_call("bar", jax.ShapeDtypeStruct(g.shape, g.dtype))(g),)

    f.defvjp(lambda x: (jax.numpy.sin(x), x), bwd)
    spec = jax.ShapeDtypeStruct((3,), np.float32)
    exp = export.export(jax.jit(f), disabled_checks=[dc])(spec)
    back = jaxport.loads(jaxport.dumps(exp, vjp_order=1), allow_custom_calls=("bar",))
    x = np.zeros(3, np.float32)
    np.testing.assert_allclose(back.call(x), np.sin(x))  # the primal runs
    with pytest.raises(jaxport.MissingCustomCallError, match="'bar'") as e:
        back.vjp().call(x, np.ones(3, np.float32))
    assert e.value.targets == ("bar",)


def test_an_audit_reports_a_calling_convention_jax_cannot_run():
    from jaxport.audit._checks import audit_archive

    exp = _with(from_compat_data(TOP_K_V7, ("_, b",)), calling_convention_version=99)
    result = audit_archive(jaxport.dumps(exp), platform="cpu")
    assert result.status == "incompatible"
    assert "calling convention version 99" in result.reason and "newer jax" in result.reason
