"""Custom calls on load (issue 9): jax's export-time allowlist, applied to every module read.

Test archives, all built here: a module calling a target jax does not guarantee stable
(``jax.ffi.ffi_call("foo")`` exported with ``DisabledSafetyCheck.custom_call("foo")``), a VJP
module calling one (a ``custom_vjp`` whose backward pass calls ``"bar"``), a module calling a
host callback (``jax.pure_callback`` lowered by jit: ``jax.export`` refuses to export it, so
the module is put in an Exported by hand, as a hostile author would), a jax 0.4.30 artifact
calling ``lapack_sgeqrf`` (tests/data/old_jax), and headers that lie about their modules'
targets, re-sealed so that their digests are valid. None of these modules is ever run: a
forged host callback kills the process.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxport
from jaxport.export import (
    HOST_CALLBACK_TARGETS,
    _archive,
    _container,
    _modules,
    is_host_callback,
    module_custom_calls,
    stable_custom_call_targets,
)

DC = export.DisabledSafetyCheck
X = jax.ShapeDtypeStruct((4,), jnp.float32)
OLD_JAX = Path(__file__).with_name("data") / "old_jax"
CPU_CALLBACK = "xla_ffi_python_cpu_callback"


def _ffi(target, x):
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@pytest.fixture(scope="module")
def foo():
    """An Exported whose primal module calls the non-stable target ``foo``."""
    return export.export(
        jax.jit(lambda x: _ffi("foo", x) + 1), disabled_checks=[DC.custom_call("foo")]
    )(X)


@pytest.fixture(scope="module")
def bar_in_vjp():
    """An Exported whose VJP module (order 1), not its primal, calls the target ``bar``."""

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (_ffi("bar", g),))
    return export.export(jax.jit(f), disabled_checks=[DC.custom_call("bar")])(X)


def _with_module(module: bytes):
    """An Exported of the right signature around ``module``, as a hostile author makes one."""
    base = export.export(jax.jit(jnp.sin))(X)
    return dataclasses.replace(base, mlir_module_serialized=module)


@pytest.fixture(scope="module")
def callback():
    """An Exported whose primal module calls ``jax.pure_callback`` (a host callback)."""
    from jax._src.export import _export

    def f(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    module = jax.jit(f).lower(X).compiler_ir("stablehlo")
    with module.context:
        return _with_module(bytes(_export._module_to_bytecode(module)))


def _resealed(exp, vjp_order: int, claims: list[tuple[str, ...]]) -> bytes:
    """``dumps(exp)`` whose header lists ``claims`` as the modules' targets, digests valid."""
    chain = _archive.vjp_chain(exp, vjp_order)
    modules = [bytes(e.mlir_module_serialized) for e in chain]
    chunks, section = _container.compress_section(modules)
    refs, offset = [], 0
    for m, targets in zip(modules, claims, strict=True):
        refs.append(_modules.ModuleRef(0, offset, len(m), _modules.stablehlo_version(m), targets))
        offset += len(m)
    header = _archive._encode_header(chain, refs, [section], vjp_order, [])
    return b"".join([_container.encode_preamble(header), header, *chunks])


def test_stable_targets_load_and_run():
    exp = export.export(jax.jit(lambda a: jnp.linalg.qr(a)[1]))(jnp.zeros((4, 4)))
    data = jaxport.dumps(exp, vjp_order=1)
    (targets,) = module_custom_calls(data)[:1]
    assert targets and set(targets) <= stable_custom_call_targets()  # lapack_sgeqrf_ffi, ...
    a = np.arange(16, dtype=np.float32).reshape(4, 4) + np.eye(4, dtype=np.float32)
    np.testing.assert_allclose(jaxport.loads(data).call(a), exp.call(a), rtol=1e-5, atol=1e-5)


def test_a_non_stable_target_is_refused(foo):
    with pytest.raises(jaxport.UnsafeArchiveError) as e:
        jaxport.loads(jaxport.dumps(foo))
    assert str(e.value) == (
        "the primal module calls custom-call targets that no jax release guarantees stable: "
        "['foo']; if you trust the archive's author, pass allow_custom_calls=('foo',) (Python) "
        "or --allow-custom-call foo (CLI)"
    )
    assert (e.value.targets, e.value.vjp_order) == (("foo",), 0)
    assert isinstance(e.value, jaxport.UnsupportedFeatureError | ValueError)


def test_a_non_stable_target_allowed_by_name_loads(foo, tmp_path):
    data = jaxport.dumps(foo)
    back = jaxport.loads(data, allow_custom_calls=["foo"])
    assert back.mlir_module_serialized == foo.mlir_module_serialized
    path = tmp_path / "foo.jaxport"
    path.write_bytes(data)
    with pytest.raises(jaxport.UnsafeArchiveError, match=str(path)):
        jaxport.load(path)
    assert jaxport.load(path, allow_custom_calls=("foo", "other")).fun_name == foo.fun_name


def test_a_vjp_target_is_refused_at_load_from_the_header(bar_in_vjp):
    data = jaxport.dumps(bar_in_vjp, vjp_order=1)
    with pytest.raises(jaxport.UnsafeArchiveError, match="the VJP module of order 1") as e:
        jaxport.loads(data)
    assert (e.value.targets, e.value.vjp_order) == (("bar",), 1)
    back = jaxport.loads(data, allow_custom_calls=("bar",))
    assert module_custom_calls(data) == ((), ("bar",))
    assert back.vjp().mlir_module_serialized == (
        _archive.stored_vjp(bar_in_vjp).mlir_module_serialized
    )


@pytest.mark.parametrize("allow", [(), (CPU_CALLBACK,), tuple(sorted(HOST_CALLBACK_TARGETS))])
def test_host_callbacks_are_refused_even_when_named(callback, allow):
    data = jaxport.dumps(callback)
    assert jaxport.inspect(data).custom_call_targets == (CPU_CALLBACK,)
    with pytest.raises(jaxport.UnsafeArchiveError) as e:
        jaxport.loads(data, allow_custom_calls=allow)
    assert str(e.value) == (
        f"the primal module calls host callbacks ['{CPU_CALLBACK}']: a Python callback cannot "
        "come from an archive, and these targets are refused even when named in "
        "allow_custom_calls"
    )
    assert e.value.targets == (CPU_CALLBACK,)


def test_a_target_named_like_a_host_callback_is_refused():
    target = "xla_ffi_python_npu_callback"  # not a target of any jax yet
    exp = export.export(
        jax.jit(lambda x: _ffi(target, x)), disabled_checks=[DC.custom_call(target)]
    )(X)
    with pytest.raises(jaxport.UnsafeArchiveError, match="host callbacks"):
        jaxport.loads(jaxport.dumps(exp), allow_custom_calls=(target,))


def test_a_header_omitting_a_target_is_corrupt(foo):
    data = _resealed(foo, 0, [()])
    assert jaxport.inspect(data).custom_call_targets == ()  # the header's claim, unchecked
    assert module_custom_calls(data) == (("foo",),)  # the module's truth
    for allow in [(), ("foo",)]:
        with pytest.raises(jaxport.CorruptArchiveError) as e:
            jaxport.loads(data, allow_custom_calls=allow)
        assert str(e.value) == (
            "the header lists custom-call targets [] for the primal module, "
            "but the module calls ['foo']"
        )
        assert not isinstance(e.value, jaxport.UnsafeArchiveError)


def test_a_header_omitting_a_host_callback_is_corrupt(callback):
    with pytest.raises(jaxport.CorruptArchiveError, match=f"module calls \\['{CPU_CALLBACK}'\\]"):
        jaxport.loads(_resealed(callback, 0, [()]), allow_custom_calls=(CPU_CALLBACK,))


def test_a_header_omitting_a_vjp_target_is_corrupt_when_the_vjp_is_read(bar_in_vjp):
    back = jaxport.loads(_resealed(bar_in_vjp, 1, [(), ()]))  # the primal module is honest
    with pytest.raises(jaxport.CorruptArchiveError, match="for the VJP module of order 1"):
        back.vjp()


def test_a_header_claiming_a_target_the_module_lacks_is_corrupt(foo):
    with pytest.raises(
        jaxport.CorruptArchiveError, match=r"lists custom-call targets \['Sharding', 'foo'\]"
    ):
        jaxport.loads(_resealed(foo, 0, [("Sharding", "foo")]), allow_custom_calls=("foo",))


_ESCAPED = b"""module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32> {jax.result_info = "result"}) {
    %0 = "stablehlo.custom\\5Fcall"(%arg0) {call_target_name = "f\\6Fo"}
      : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""


def test_a_text_module_is_refused_unless_trusted_and_then_parsed_not_scanned():
    # jax 0.10 also reads MLIR text, where escapes hide "custom_call" from a search of the bytes.
    # jaxport writes only bytecode, so a reader refuses text from an untrusted archive; a
    # trusted one is parsed (in-process), never scanned.
    assert b"custom_call" not in _ESCAPED and b"foo" not in _ESCAPED
    exp = _with_module(_ESCAPED)
    untrue = _resealed(exp, 0, [()])
    with pytest.raises(jaxport.CorruptArchiveError, match=r"primal module \(section 0\) is not"):
        jaxport.loads(untrue)
    try:
        data = jaxport.dumps(exp)
    except jaxport.UnsupportedFeatureError:  # jax 0.7 reads bytecode only: so does the reader
        with pytest.raises(jaxport.CorruptArchiveError, match="not StableHLO that MLIR can read"):
            jaxport.loads(untrue, trusted=True)
        return
    assert jaxport.inspect(data).custom_call_targets == ("foo",)
    with pytest.raises(jaxport.UnsafeArchiveError, match="'foo'"):
        jaxport.loads(data)
    with pytest.raises(jaxport.CorruptArchiveError, match=r"but the module calls \['foo'\]"):
        jaxport.loads(untrue, trusted=True)


def test_a_module_mlir_cannot_parse_is_corrupt():
    exp = _with_module(b"not MLIR")
    with pytest.raises(jaxport.CorruptArchiveError, match="is not MLIR bytecode"):
        jaxport.loads(_resealed(exp, 0, [()]))
    with pytest.raises(jaxport.CorruptArchiveError, match="not StableHLO that MLIR can read"):
        jaxport.loads(_resealed(exp, 0, [()]), trusted=True)
    junk = _with_module(b"ML\xefR" + b"\x06junk" * 8)
    with pytest.raises(jaxport.CorruptArchiveError, match=r"section 0\): MLIR cannot read it"):
        jaxport.loads(_resealed(junk, 0, [()]))
    with pytest.raises(jaxport.UnsupportedFeatureError, match="cannot write the Exported"):
        jaxport.dumps(exp)


def test_jax_0_4_30_lapack_artifact():
    """jax 0.4.30's QR: from jax's own bytes where this jax still deserializes them, else
    (jax >= 0.11.1: older than its 6-month window) from the jaxport archive of the same
    Exported (tests/data/old_jax/convert_to_jaxport.py, made under jax 0.10.2)."""
    if jaxport.jax_window("0.4.30", sharded=False).jax_deserialize == "accepts":
        exp = export.deserialize(bytearray((OLD_JAX / "qr_f32.jaxexport").read_bytes()))
    else:
        exp = jaxport.load(
            OLD_JAX / "qr_f32.jaxport",
            allow_custom_calls=("lapack_sgeqrf", "lapack_sorgqr"),
            outside_window="allow",
        )
    data = jaxport.dumps(exp)
    back = jaxport.loads(data)  # lapack_sgeqrf, lapack_sorgqr: stable in jax 0.4.30..0.4.34
    assert back.mlir_module_serialized == exp.mlir_module_serialized


def test_allow_custom_calls_must_be_names():
    with pytest.raises(TypeError, match=r"allow_custom_calls=\('foo',\)"):
        jaxport.loads(b"", allow_custom_calls="foo")
    with pytest.raises(TypeError, match="must hold str"):
        jaxport.loads(b"", allow_custom_calls=[b"foo"])


def test_the_auditor_helpers():
    stable = stable_custom_call_targets()
    assert "lapack_sgeqrf_ffi" in stable and "Sharding" in stable
    assert not stable & HOST_CALLBACK_TARGETS
    assert {"xla_python_cpu_callback", CPU_CALLBACK} <= HOST_CALLBACK_TARGETS
    assert all(map(is_host_callback, HOST_CALLBACK_TARGETS))
    assert is_host_callback("xla_ffi_python_npu_callback")  # by the name rule
    assert not any(map(is_host_callback, stable))
