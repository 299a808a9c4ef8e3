"""Archives written by a newer jax than the one installed (``NewerFormatError``).

A jax newer than the installed one (0.11.2 over 0.10.2, say) may write its modules in a
StableHLO version the installed jaxlib cannot deserialize. Such an archive is not corrupt, and
the refusal must say so, naming the writer's jax and StableHLO versions and the installed
ones, with nothing of MLIR's printed on stderr. Faked here: the header's jax version (the
writer's ``_compat.jax_versions`` patched while it writes) and a module whose producer string
declares a StableHLO version newer than any jaxlib's, on bytes MLIR cannot read.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_cli import base_env, run

import jaxport
from jaxport.export import _compat

INSTALLED_JAX = jax.__version__
INSTALLED_SHLO = _compat.stablehlo_range()[1]


def _module(producer: str, *, readable: bool) -> bytes:
    """A real module with its producer string replaced (same length), or bytes that start as
    MLIR bytecode with that producer and then are not a module."""
    real = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4)).mlir_module_serialized
    start = real.index(b"StableHLO_v")
    end = real.index(b"\0", start)
    if readable:
        assert len(producer) == end - start - len("StableHLO_v")
        return real[:start] + b"StableHLO_v" + producer.encode() + real[end:]
    return b"ML\xefR\x0b" + b"StableHLO_v" + producer.encode() + b"\0" + b"\x07" * 64


def _archive(monkeypatch, module: bytes, writer_jax: str) -> bytes:
    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4))
    fake = dataclasses.replace(exp, mlir_module_serialized=module)
    with monkeypatch.context() as m:
        m.setattr(_compat, "jax_versions", lambda: (writer_jax, writer_jax))
        return jaxport.dumps(fake)


@pytest.mark.parametrize("trusted", [False, True], ids=["sandboxed", "trusted"])
@pytest.mark.parametrize(
    "producer, writer, says",
    [
        ("9.99.0", INSTALLED_JAX, "StableHLO 9.99.0"),
        ("1.0.0", "99.11.2", "jax 99.11.2"),
        ("9.99.0", "99.11.2", "jax 99.11.2 in StableHLO 9.99.0"),
    ],
    ids=["newer-module", "newer-writer", "both"],
)
def test_a_newer_archive_is_a_newer_format_error(monkeypatch, capfd, producer, writer, says,
                                                 trusted):  # fmt: skip
    data = _archive(monkeypatch, _module(producer, readable=False), writer)
    capfd.readouterr()
    with pytest.raises(jaxport.NewerFormatError) as e:
        jaxport.loads(data, trusted=trusted)
    assert isinstance(e.value, jaxport.UnsupportedVersionError)
    assert not isinstance(e.value, jaxport.CorruptArchiveError)
    assert says in str(e.value) and f"installed jax {INSTALLED_JAX}" in str(e.value)
    assert f"StableHLO up to {INSTALLED_SHLO}" in str(e.value)
    assert (e.value.writer_jax, e.value.installed_jax) == (writer, INSTALLED_JAX)
    assert (e.value.module_stablehlo, e.value.installed_stablehlo) == (producer, INSTALLED_SHLO)
    assert capfd.readouterr().err == ""


def test_an_unreadable_module_of_this_jax_is_still_corrupt(monkeypatch):
    data = _archive(monkeypatch, _module("1.0.0", readable=False), INSTALLED_JAX)
    with pytest.raises(jaxport.CorruptArchiveError) as e:
        jaxport.loads(data)
    assert not isinstance(e.value, jaxport.NewerFormatError)


def test_a_newer_module_that_parses_is_read(monkeypatch):
    """Only what was measured: a newer declared version that this jaxlib reads is no error."""
    newer = ".".join(str(int(p) + 1) for p in INSTALLED_SHLO.split("."))
    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4))
    producer = jaxport.export._modules.stablehlo_version(exp.mlir_module_serialized)
    bumped = newer[: len(producer)].ljust(len(producer), "0")
    data = _archive(monkeypatch, _module(bumped, readable=True), "99.0.0")
    assert jaxport.loads(data).call(jnp.zeros(4)).shape == (4,)


def test_the_cli_names_both_versions_and_prints_no_mlir(monkeypatch, tmp_path):
    path = tmp_path / "newer.jaxport"
    path.write_bytes(_archive(monkeypatch, _module("9.99.0", readable=False), "99.11.2"))
    np.savez(tmp_path / "x.npz", np.ones(4, np.float32))
    result = run(base_env(tmp_path), "run", str(path), "-i", str(tmp_path / "x.npz"), code=1)
    assert result.out == ""
    assert result.err.startswith("NewerFormatError: ") and "jax 99.11.2" in result.err
    assert f"installed jax {INSTALLED_JAX}" in result.err and result.err.count("\n") == 1


# -- a registry serves many jax releases: a newer archive is stored and said to be newer -------


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_push_stores_a_newer_archive_that_load_run_and_audit_still_refuse(monkeypatch, registry):
    data = _archive(monkeypatch, _module("9.99.0", readable=False), "99.11.2")
    result = registry.push(data, "newer")
    assert result.created and any("newer than this jax" in n for n in result.notes), result
    assert registry.pull_bytes("newer") == data
    with pytest.raises(jaxport.NewerFormatError):
        registry.pull("newer")
    (finding,) = registry.audit("newer", platform="cpu")
    assert finding.status == "incompatible" and "jax 99.11.2" in finding.reason, finding
    report = registry.verify(deep=True)
    assert report.ok and report.newer == (result.variants[0].digest,)
    (problem,) = [p for p in report.problems if p.state == "newer"]
    assert "newer than this jax" in problem.reason
    with pytest.raises(jaxport.UnsupportedFeatureError, match="no variant runs here"):
        registry.push(data, "newer", examples=[((np.ones(4, np.float32),), {})])
    x = np.ones(4, np.float32)
    with_outputs = registry.push(data, "newer", examples=[jaxport.Example((x,), {}, np.sin(x))])
    assert with_outputs.created


def test_a_newer_model_is_stored_too(monkeypatch, registry):
    model = jaxport.Model({"w": np.ones(4, np.float32)}, lambda p, x: x * p["w"],
                          [jax.ShapeDtypeStruct((4,), jnp.float32)])  # fmt: skip
    junk = _module("9.99.0", readable=False)
    fake = dataclasses.replace(model.exported["apply"], mlir_module_serialized=junk)
    newer = jaxport.Model.from_exported({"w": np.ones(4, np.float32)}, {"apply": fake})
    with monkeypatch.context() as m:
        m.setattr(_compat, "jax_versions", lambda: ("99.11.2", "99.11.2"))
        data = newer.dumps()
    result = registry.push(data, "newer-model")
    assert result.created and any("newer than this jax" in n for n in result.notes)
    with pytest.raises(jaxport.NewerFormatError):
        registry.pull_model("newer-model")


def test_the_cli_pushes_verifies_inspects_and_shows_a_newer_archive(monkeypatch, tmp_path):
    path = tmp_path / "newer.jaxport"
    path.write_bytes(_archive(monkeypatch, _module("9.99.0", readable=False), "99.11.2"))
    env = base_env(tmp_path)
    pushed = run(env, "push", str(path), "--name", "newer")
    assert "newer than this jax" in _flat(pushed.out)
    verified = run(env, "verify", str(path))
    assert verified.out.startswith("ok ") and "newer than this jax" in _flat(verified.out)
    assert "newer than this jax" in _flat(run(env, "verify", "--deep").out)
    inspected = _flat(run(env, "inspect", str(path)).out)
    assert f"the installed jax {INSTALLED_JAX} cannot load it" in inspected
    assert "StableHLO 9.99.0" in inspected
    shown = _flat(run(env, "show", "newer").out)
    assert f"the installed jax {INSTALLED_JAX} cannot load it" in shown
    run(env, "pull", "newer", "-o", str(tmp_path / "back.jaxport"))
    assert (tmp_path / "back.jaxport").read_bytes() == path.read_bytes()


def test_a_newer_model_is_a_newer_format_error_in_python_and_the_cli(monkeypatch, tmp_path):
    model = jaxport.Model({"w": np.ones(4, np.float32)}, lambda p, x: x * p["w"],
                          [jax.ShapeDtypeStruct((4,), jnp.float32)])  # fmt: skip
    junk = _module("9.99.0", readable=False)
    fake = dataclasses.replace(model.exported["apply"], mlir_module_serialized=junk)
    newer = jaxport.Model.from_exported({"w": np.ones(4, np.float32)}, {"apply": fake})
    with monkeypatch.context() as m:
        m.setattr(_compat, "jax_versions", lambda: ("99.11.2", "99.11.2"))
        path = tmp_path / "newer-model.jaxport"
        newer.save(path)
    with pytest.raises(jaxport.NewerFormatError, match=r"method 'apply'|apply"):
        jaxport.load_model(path)
    np.savez(tmp_path / "x.npz", np.ones(4, np.float32))
    result = run(base_env(tmp_path), "run", str(path), "apply", "-i", str(tmp_path / "x.npz"),
                 code=1, cwd=tmp_path)  # fmt: skip
    assert result.err.startswith("NewerFormatError: ") and "jax 99.11.2" in result.err
    assert result.err.count("\n") == 1
