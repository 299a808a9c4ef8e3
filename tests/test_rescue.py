"""``jaxport.rescue`` and ``jaxport rescue``: jax-native files converted under another jax.

The managed environment's interpreter is injectable (``python=``, ``--python``): these tests
use this interpreter (jax 0.10.2 and this jaxport) in its place, so they need no network. The
jax-native inputs are serialized here by the running jax, or are jax 0.4.30's files in
``tests/data/old_jax/`` (made by its ``make_artifacts.py``). The ``slow`` test uses a real
``$JAXPORT_HOME/envs/jax-0.10.2`` only where one is already made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxport
from jaxport._rescue import examples_path
from jaxport._rescue_child import RESCUED_KEY, WRITER_KEY, check_inputs, skip_reason
from jaxport.audit._envs import cached_environment
from jaxport.audit._examples import decode_examples

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
OLD_JAX = Path(__file__).parent / "data" / "old_jax"


def _native(tmp_path: Path, fn=jnp.sin, shape=(3, 4), vjp_order=0, name="f.jaxexport") -> Path:
    exp = export.export(jax.jit(fn))(jax.ShapeDtypeStruct(shape, jnp.float32))
    path = tmp_path / name
    path.write_bytes(exp.serialize(vjp_order=vjp_order))
    return path


# -- the child's pieces ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype",
    [
        "bool",
        "int8",
        "uint8",
        "int32",
        "float16",
        "bfloat16",
        "float8_e4m3fn",
        "float32",
        "complex64",
    ],
)
def test_check_inputs_are_deterministic_and_in_range(dtype):
    aval = jax.ShapeDtypeStruct((5, 7), jnp.dtype(dtype))
    first, again = check_inputs([aval]), check_inputs([aval])
    assert first[0].dtype == jnp.dtype(dtype) and first[0].shape == (5, 7)
    assert first[0].tobytes() == again[0].tobytes()
    values = first[0].astype(np.complex128)
    assert np.all(np.abs(values.real) <= 7) and np.all(np.isfinite(values))
    if dtype not in ("bool",):
        assert len(np.unique(first[0].astype(np.float64 if dtype != "complex64" else dtype))) > 1


def test_check_inputs_of_a_scalar_and_an_empty_array():
    scalar, empty = check_inputs(
        [jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((0, 3), jnp.int32)]
    )
    assert scalar.shape == () and scalar == -1.0
    assert empty.shape == (0, 3)


def test_skip_reason_names_what_cannot_run_here():
    concrete = export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float32))
    assert skip_reason(concrete, "cpu", 1) is None
    assert skip_reason(concrete, "cuda", 1) == "exported for cpu, this process has cuda"
    (b,) = export.symbolic_shape("b")
    symbolic = export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((b,), jnp.float32))
    assert "symbolic" in (skip_reason(symbolic, "cpu", 1) or "")
    many = SimpleNamespace(in_avals=concrete.in_avals, platforms=("cpu",), nr_devices=4)
    assert skip_reason(many, "cpu", 2) == "needs 4 cpu devices, this process has 2"


# -- rescue() with this interpreter standing in for the environment --------------------------


def test_rescue_a_file_of_the_running_jax_keeps_vjps_and_records_outputs(tmp_path):
    src = _native(tmp_path, vjp_order=1)
    dst = tmp_path / "out.jaxport"
    report = jaxport.rescue(src, dst, python=sys.executable)
    assert report.jax_version == jax.__version__ and report.python == sys.executable
    assert (report.check, report.reason, report.vjp_order) == ("recorded", None, 1)
    assert report.archive == str(dst) and report.examples == examples_path(dst)
    info = jaxport.inspect(dst)
    assert info.metadata[RESCUED_KEY] == f"jax {jax.__version__}"
    # its original writer (as far as jax-native bytes say) and its converter, both recorded
    assert info.metadata[WRITER_KEY] == report.original_writer
    assert f"calling convention version {info.calling_convention_version}" in (
        report.original_writer
    )
    assert "StableHLO" in report.original_writer and "unknown jax release" in report.original_writer
    assert report.converter.startswith(f"jax {jax.__version__} (jaxlib ")
    assert info.jax_version == jax.__version__  # the header names the converter
    [(ins, outs)] = decode_examples(Path(report.examples).read_bytes())
    np.testing.assert_allclose(outs[0], np.sin(ins[0]), rtol=1e-6)
    loaded = jaxport.load(dst)
    assert loaded.vjp().in_avals  # the VJP came along
    np.testing.assert_allclose(np.asarray(loaded.call(ins[0])), outs[0], rtol=1e-6)
    [example] = report.golden_examples()
    assert example.args[0].shape == (3, 4) and example.outputs[0].shape == (3, 4)


def _running_jax_reads_0_4_30(tmp_path: Path) -> None:
    """Skips where the running jax's own reader refuses jax 0.4.30's files (jax >= 0.11.1, its
    6-month window), after checking that the rescue says so: there, rescuing them needs an
    environment of an older jax (``jax=``, the slow test)."""
    if jaxport.jax_window("0.4.30", sharded=False).jax_deserialize != "refuses":
        return
    with pytest.raises(jaxport.CorruptArchiveError, match="backward-compatibility window"):
        jaxport.rescue(OLD_JAX / "sin_f32.jaxexport", tmp_path / "x", python=sys.executable)
    pytest.skip(f"jax {jax.__version__} refuses jax 0.4.30's files (its window): rescued as such")


@pytest.mark.parametrize("name", ["sin_f32", "bf16_ops"])
def test_rescue_jax_0_4_30_files(tmp_path, name):
    _running_jax_reads_0_4_30(tmp_path)
    report = jaxport.rescue(OLD_JAX / f"{name}.jaxexport", tmp_path / "a", python=sys.executable)
    assert report.check == "recorded", report.reason
    [(ins, outs)] = decode_examples(Path(report.examples or "").read_bytes())
    again = jax.tree.leaves(jaxport.load(tmp_path / "a").call(*ins))
    for want, got in zip(outs, again, strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float32), want.astype(np.float32), 1e-5)


def test_rescue_records_an_error_where_that_jax_cannot_run_it(tmp_path):
    """jax 0.4.30's QR calls ``lapack_sgeqrf``, a target jaxlib 0.10.2 no longer registers:
    the archive is written, and the check says what jax raised (a 0.4.x environment runs it)."""
    _running_jax_reads_0_4_30(tmp_path)
    report = jaxport.rescue(OLD_JAX / "qr_f32.jaxexport", tmp_path / "a", python=sys.executable)
    assert report.check == "error" and "lapack_sgeqrf" in (report.reason or "")
    assert report.examples is None and jaxport.inspect(tmp_path / "a").fun_name


def test_rescue_records_not_run_for_symbolic_shapes(tmp_path):
    (b,) = export.symbolic_shape("b")
    exp = export.export(jax.jit(jnp.cos))(jax.ShapeDtypeStruct((b, 2), jnp.float32))
    src = tmp_path / "sym.jaxexport"
    src.write_bytes(exp.serialize())
    stale = Path(examples_path(tmp_path / "out"))
    report = jaxport.rescue(src, tmp_path / "out", python=sys.executable)
    assert report.check == "not-run" and "symbolic" in (report.reason or "")
    assert report.examples is None and not stale.exists() and report.golden_examples() == []


def test_rescue_runs_a_sharded_export_on_its_devices(tmp_path):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    exp = export.export(jax.jit(lambda a: a * 2, in_shardings=spec, out_shardings=spec))(
        jax.ShapeDtypeStruct((4, 2), jnp.float32)
    )
    src = tmp_path / "sharded.jaxexport"
    src.write_bytes(exp.serialize())
    report = jaxport.rescue(src, tmp_path / "out", python=sys.executable)
    assert (report.check, report.nr_devices) == ("recorded", 2)
    [(ins, outs)] = decode_examples(Path(report.examples or "").read_bytes())
    np.testing.assert_array_equal(outs[0], ins[0] * 2)


def test_rescue_errors_are_typed(tmp_path):
    src = _native(tmp_path)
    archive = tmp_path / "a.jaxport"
    jaxport.rescue(src, archive, python=sys.executable)
    with pytest.raises(FileExistsError):
        jaxport.rescue(src, archive, python=sys.executable)
    with pytest.raises(jaxport.InvalidNameError, match="already a jaxport archive"):
        jaxport.rescue(archive, tmp_path / "b", python=sys.executable)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00not an export" * 10)
    with pytest.raises(jaxport.CorruptArchiveError):
        jaxport.rescue(garbage, tmp_path / "c", python=sys.executable)
    with pytest.raises(jaxport.UnsafeArchiveError, match="could not be started"):
        jaxport.rescue(src, tmp_path / "d", python=str(tmp_path / "no-python"))
    with pytest.raises(jaxport.InvalidNameError):
        jaxport.rescue(src, tmp_path / "e", jax="latest")
    with pytest.raises(jaxport.InvalidNameError, match="is the file to rescue"):
        jaxport.rescue(src, src, overwrite=True, python=sys.executable)  # never over its source
    assert jaxport.rescue(src, tmp_path / "f", python=sys.executable).check == "recorded"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(jaxport.CorruptArchiveError, match=r"regular file|FIFO"):
        jaxport.rescue(fifo, tmp_path / "g", python=sys.executable)  # refused, never blocks
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


# -- the command line -----------------------------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(
        JAX_PLATFORMS="cpu",
        JAXPORT_HOME=str(tmp_path / "home"),
        JAXPORT_REGISTRY=f"sqlite:///{tmp_path / 'reg.db'}",
        JAXPORT_BLOBS=str(tmp_path / "blobs"),
    )
    return env


def _cli(env, *args):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_cli_rescue_push_then_audit_compares_with_the_recorded_outputs(tmp_path):
    env = _env(tmp_path)
    src = _native(tmp_path, fn=lambda x: jnp.tanh(x) * 3, name="old.jaxexport")
    done = _cli(env, "rescue", str(src), "--python", sys.executable, "--push", "old", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["rescue"]["check"] == "recorded"
    assert out["rescue"]["archive"] == str(tmp_path / "old.jaxport")
    assert out["pushed"]["name"] == "old" and out["pushed"]["version"] == 1
    audited = _cli(env, "audit", "run", "old", "--json")
    assert audited.returncode == 0, audited.stderr
    assert "ok" in audited.stdout and "mismatch" not in audited.stdout
    text = _cli(env, "rescue", str(src), "--python", sys.executable, "-o", str(tmp_path / "t"))
    assert text.returncode == 0, text.stderr
    assert f"with jax {jax.__version__}" in text.stdout and "check: recorded" in text.stdout


def test_cli_rescue_errors_exit_1_with_the_type(tmp_path):
    env = _env(tmp_path)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not an export")
    done = _cli(env, "rescue", str(garbage), "--python", sys.executable)
    assert done.returncode == 1 and done.stderr.startswith("CorruptArchiveError:"), done.stderr
    src = _native(tmp_path)
    assert _cli(env, "rescue", str(src), "--python", sys.executable).returncode == 0
    again = _cli(env, "rescue", str(src), "--python", sys.executable, "--json")
    assert again.returncode == 1 and json.loads(again.stderr)["error"]["type"] == (
        "FileExistsError"
    )


# -- a real managed environment ---------------------------------------------------------------


@pytest.mark.slow
def test_rescue_in_a_made_jax_0_10_2_environment(tmp_path, monkeypatch):
    """Makes ``$JAXPORT_HOME/envs/jax-0.10.2`` (minutes; 0.10.2's wheels are on this machine),
    converts a jax 0.4.30 file there and records its outputs."""
    home = tmp_path / "home"
    monkeypatch.setenv("JAXPORT_HOME", str(home))
    report = jaxport.rescue(OLD_JAX / "sin_f32.jaxexport", tmp_path / "a", jax="0.10.2")
    assert report.jax_version == "0.10.2" and report.check == "recorded"
    assert report.python == cached_environment("0.10.2", home)
