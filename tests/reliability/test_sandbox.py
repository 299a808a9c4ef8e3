"""The module sandbox (issue 15): no module bytes reach MLIR in the caller before a worker
parsed them, and nothing a module does to that worker kills or hangs the caller.

Reproducers, all generated here except the crasher that ``fuzz_reader.py`` found earlier
(``crashers/``): an MLIR *text* module with an attribute nested 10,000 deep (it kills any
process that parses it: SIGSEGV), real bytecode with bytes mutated (seeded; about 1 % crash or
hang jaxlib), a header whose avals lie about ``main``, and jax-native bytes. Each reaches every
reader entry point (``loads``, ``load``, ``load_model``, ``Registry.push`` and ``pull``, the
``jaxport`` command) and gives a typed error in bounded time, with this process alive.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from _helpers import skip_unless_it_crashes
from jaxport.export import _modules, _sandbox, _verdicts, _vetting

X = jax.ShapeDtypeStruct((4,), jnp.float32)
CRASHER = Path(__file__).with_name("crashers") / "mlir_portable_artifact_segfault.jaxport"
SIGNATURE = "(%arg0: tensor<4xf32>) -> (tensor<4xf32>)"
JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def nesting_bomb(depth: int = 10_000) -> bytes:
    """MLIR text: ``main`` with one attribute nested ``depth`` deep (7,000 kill a parser)."""
    attr = "[" * depth + "]" * depth
    return (
        f"module {{ func.func public @main{SIGNATURE} attributes {{x = {attr}}} "
        f"{{ return %arg0 : tensor<4xf32> }} }}"
    ).encode()


def _with_module(module: bytes) -> Any:
    return dataclasses.replace(
        jax.export.export(jax.jit(jnp.sin))(X), mlir_module_serialized=module
    )


@pytest.fixture
def unscanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer does not parse modules (a hostile author's writer does not either)."""
    monkeypatch.setattr(_modules, "custom_call_targets", lambda ms, path=None: [() for _ in ms])


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("JAXPORT_CACHE", str(cache))
    return cache


def _bomb_archive() -> bytes:
    return jaxport.dumps(_with_module(nesting_bomb()))


def test_a_text_nesting_bomb_is_refused_by_every_reader_without_parsing(
    unscanned: None, tmp_path: Path
) -> None:
    data = _bomb_archive()
    path = tmp_path / "bomb.jaxport"
    path.write_bytes(data)
    for read in (lambda: jaxport.loads(data), lambda: jaxport.load(path)):
        with pytest.raises(
            jaxport.CorruptArchiveError, match=r"primal module \(section 0\) is not"
        ):
            read()
    registry = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=tmp_path / "blobs")
    with pytest.raises(jaxport.CorruptArchiveError, match="not MLIR bytecode"):
        registry.push(path, "bomb")
    assert registry.list() == []


def _bomb_model(path: Path) -> None:
    params = {"w": np.ones(4, np.float32)}
    base = jax.export.export(jax.jit(lambda p, x: x * p["w"]))(params, X)
    bad = dataclasses.replace(base, mlir_module_serialized=nesting_bomb())
    jaxport.Model.from_exported(params, {"f": bad}).save(path)


def test_the_cli_refuses_the_bomb_with_one_line(unscanned: None, tmp_path: Path) -> None:
    function, model = tmp_path / "bomb.jaxport", tmp_path / "model.jaxport"
    function.write_bytes(_bomb_archive())
    _bomb_model(model)
    np.savez(tmp_path / "x.npz", np.ones(4, np.float32))
    env = {**os.environ, "JAXPORT_HOME": str(tmp_path / "home")}
    for args in (
        ["push", str(function), "--name", "bomb"],
        ["push", str(model), "--name", "bomb"],
        ["run", str(model), "f", "-i", str(tmp_path / "x.npz")],
    ):
        out = subprocess.run([JAXPORT, *args], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith("CorruptArchiveError:") and "Traceback" not in out.stderr


def test_a_model_method_with_a_text_module_is_refused(unscanned: None, tmp_path: Path) -> None:
    path = tmp_path / "m.jaxport"
    _bomb_model(path)
    with pytest.raises(jaxport.CorruptArchiveError, match=r"of method 'f' \(section 0\) is not"):
        jaxport.load_model(path)


def test_a_trusted_file_skips_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = jax.export.export(jax.jit(jnp.cos))(X)
    path = tmp_path / "f.jaxport"
    jaxport.save(exp, path)
    monkeypatch.setattr(_sandbox.Sandbox, "parse", _never)
    back = jaxport.load(path, trusted=True)
    np.testing.assert_allclose(back.call(np.ones(4, np.float32)), np.cos(np.ones(4)), rtol=1e-6)
    with pytest.raises(Asked):
        jaxport.load(path)


class Asked(jaxport.JaxportError):
    """Raised by a sandbox that must not be asked (a JaxportError, so readers pass it on)."""


def _never(*args: Any, **kwargs: Any) -> Any:
    raise Asked("the sandbox was asked")


def test_a_native_crash_is_a_typed_error_and_the_pool_recovers() -> None:
    skip_unless_it_crashes(CRASHER)
    data = CRASHER.read_bytes()
    pool = _sandbox.default_sandbox()
    for _ in range(2):
        with pytest.raises(jaxport.UnsafeModuleError) as e:
            jaxport.loads(data)
        # SIGSEGV up to jaxlib 0.10.2, SIGABRT under 0.11.2 (0.12 no longer crashes on it)
        assert re.search(r"SIG(SEGV|ABRT)", e.value.what) and e.value.section == 0
        assert "primal module (section 0)" in str(e.value) and "trusted=True" in str(e.value)
    good = jax.export.export(jax.jit(jnp.tan))(X)
    started = pool.started
    assert jaxport.loads(jaxport.dumps(good)).fun_name == "tan"  # a fresh worker: ok
    assert pool.started == started + 1


def _primal_module(data: bytes) -> bytes:
    """The primal module's bytes of an archive, read without parsing them."""
    from jaxport.export import _archive, _container

    view = memoryview(data)
    head = _archive.read_header(view, len(view), path=None)
    reader = _container.SectionReader(
        view[head.payload_start :], head.sections, payload_start=head.payload_start, path=None
    )
    ref = _modules.decode_module(head.archive.Exported().Module())
    return reader.read(ref.section, ref.offset, ref.length)


def test_a_worker_killed_by_a_module_is_replaced() -> None:
    skip_unless_it_crashes(CRASHER)
    pool = _sandbox.Sandbox(size=1)
    try:
        with pytest.raises(_sandbox.SandboxFailure, match=r"SIG(SEGV|ABRT)"):
            pool.parse(_primal_module(CRASHER.read_bytes()), timeout=60)
        with pytest.raises(_sandbox.ModuleRefused, match="not MLIR bytecode"):
            pool.parse(nesting_bomb(), timeout=60)  # the worker refuses text by itself too
        good = bytes(jax.export.export(jax.jit(jnp.sin))(X).mlir_module_serialized)
        facts, _ = pool.parse(good, timeout=60)
        assert facts["main"]["inputs"] == ["tensor<4xf32>"]
        assert pool.started == 2
    finally:
        pool.close()


def test_a_hang_becomes_a_typed_error_after_the_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox, "default_timeout", lambda nbytes: 0.0)  # no time at all
    exp = jax.export.export(jax.jit(jnp.exp))(X)
    with pytest.raises(jaxport.UnsafeModuleError, match=r"no answer within 0 s"):
        jaxport.loads(jaxport.dumps(exp))


def test_verdicts_are_cached_locally_and_not_for_failures(
    private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = jax.export.export(jax.jit(lambda x: x * 3))(X)
    data = jaxport.dumps(exp)
    jaxport.loads(data)
    (entry,) = private_cache.glob("verdicts/*/*/*.json")
    assert entry.stem == _digest(exp.mlir_module_serialized)
    monkeypatch.setattr(_sandbox.Sandbox, "parse", _never)
    jaxport.loads(data)  # from the cache
    entry.write_text("{not json")
    with pytest.raises(Asked):
        jaxport.loads(data)  # a damaged entry is a miss


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_the_registry_records_verdicts_at_push_for_other_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = jax.export.export(jax.jit(lambda x: x - 1))(X)
    path = tmp_path / "f.jaxport"
    jaxport.save(exp, path, vjp_order=1)
    registry = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=tmp_path / "blobs")
    registry.push(path, "f")
    monkeypatch.setenv("JAXPORT_CACHE", str(tmp_path / "another-client"))
    monkeypatch.setattr(_sandbox.Sandbox, "parse", _never)
    other = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=tmp_path / "blobs")
    back = other.pull("f")
    back.vjp()  # the VJP module's verdict was recorded too
    assert not (tmp_path / "another-client" / "verdicts").exists()  # all from the registry


def test_a_header_whose_avals_lie_about_main_is_corrupt() -> None:
    exp = jax.export.export(jax.jit(jnp.sin))(X)
    other = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((5,), jnp.float32))
    liar = dataclasses.replace(exp, mlir_module_serialized=other.mlir_module_serialized)
    with pytest.raises(jaxport.CorruptArchiveError, match=r"main's arguments: #0 is tensor<5xf32>"):
        jaxport.loads(jaxport.dumps(liar))


def test_hostile_jax_native_bytes_are_converted_in_a_child(tmp_path: Path) -> None:
    registry = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=tmp_path / "blobs")
    native = jax.export.export(jax.jit(jnp.sin))(X).serialize()
    ref = registry.push(native, "native")
    assert "converted from jax-native bytes" in ref.notes[0]
    for junk in (b"\x00" * 64, native[:-40] + b"\xff" * 40, native[:200]):
        with pytest.raises(jaxport.JaxportError):
            registry.push(junk, "junk")
    assert [r.name for r in registry.list()] == ["native"]


def _mutants(base: bytes, n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(4, len(b))] = rng.randrange(256)
        out.append(bytes(b))
    return out


@pytest.mark.slow
def test_mutated_bytecode_never_kills_the_reader(unscanned: None) -> None:
    """300 seeded mutants of a real module, each re-sealed in an archive: typed errors or a
    normal load, never a death (about 1 % crash or hang the sandbox's worker)."""
    base = jax.export.export(jax.jit(lambda x, w: jnp.tanh(x @ w).sum(0)))(
        jax.ShapeDtypeStruct((4, 8), jnp.float32), jax.ShapeDtypeStruct((8, 3), jnp.float32)
    )
    outcomes: dict[str, int] = {}
    for module in _mutants(bytes(base.mlir_module_serialized), 300, seed=15):
        data = jaxport.dumps(dataclasses.replace(base, mlir_module_serialized=module))
        try:
            jaxport.loads(data)
            kind = "loaded"
        except jaxport.JaxportError as e:
            kind = type(e).__name__
        outcomes[kind] = outcomes.get(kind, 0) + 1
    assert sum(outcomes.values()) == 300
    assert outcomes.get("CorruptArchiveError", 0) > 200, outcomes


def test_the_worker_imports_jaxlib_only() -> None:
    code = (
        "import runpy, sys; sys.argv = ['w', '0']; "
        f"g = runpy.run_path({str(Path(_sandbox.__file__).with_name('_sandbox_worker.py'))!r}); "
        "print(sorted(m for m in ('jax', 'jaxport') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], input="", capture_output=True, text=True, timeout=60
    )
    assert out.stdout.splitlines()[-1] == "[]", out.stderr


def test_the_worker_environment_is_allow_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    from jaxport._environ import worker_environment

    for name in ("DATABASE_URL", "JAXPORT_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD"):
        monkeypatch.setenv(name, "secret")
    monkeypatch.setenv("JAXPORT_REGISTRY", "postgresql://u:secret@h/db")
    env = worker_environment()
    assert "secret" not in "".join(env.values()) and "PATH" in env


def test_verdict_keys_are_checked_before_they_name_a_file(tmp_path: Path) -> None:
    cache = _verdicts.LocalVerdictCache(tmp_path)
    evil = _verdicts.VerdictKey("../../etc/passwd", "0.10.2")
    cache.put(evil, _verdicts.Verdict({"targets": []}))
    assert cache.get(evil) is None and not any(tmp_path.rglob("*"))
    assert _vetting.jaxlib_version()


def test_jax_native_bytes_around_a_crashing_module_never_reach_this_process(
    tmp_path: Path,
) -> None:
    """jax's own reader does not look into the module; converting it (``dumps`` looks for
    custom calls) or the sandbox afterwards meets the crasher, never this process."""
    skip_unless_it_crashes(CRASHER)
    base = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float32))
    module = _primal_module(CRASHER.read_bytes())
    native = dataclasses.replace(base, mlir_module_serialized=module).serialize()
    registry = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=tmp_path / "blobs")
    with pytest.raises(jaxport.UnsafeArchiveError, match=r"SIG(SEGV|ABRT)"):
        registry.push(native, "crasher")
    assert registry.list() == []


def test_a_jax_native_conversion_that_hangs_is_stopped() -> None:
    from jaxport.export._native import convert_native

    native = jax.export.export(jax.jit(jnp.sin))(X).serialize()
    with pytest.raises(jaxport.UnsafeArchiveError, match=r"no answer within 0.01 s"):
        convert_native(native, timeout=0.01)
    assert convert_native(native).vjp_order == 0


def test_verify_deep_takes_a_time_limit(tmp_path: Path) -> None:
    env = {**os.environ, "JAXPORT_HOME": str(tmp_path / "home")}
    path = tmp_path / "f.jaxport"
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(X), path)
    run = functools.partial(subprocess.run, capture_output=True, text=True, env=env, timeout=300)
    assert run([JAXPORT, "push", str(path), "--name", "f"]).returncode == 0
    out = run([JAXPORT, "verify", "--deep", "--timeout", "0.001", "--json"])
    assert out.returncode == 1 and "0.001 s time limit" in out.stdout, out.stdout + out.stderr
    assert run([JAXPORT, "verify", "--deep"]).returncode == 0
    bad = run([JAXPORT, "audit", "--timeout", "0"])
    assert bad.returncode == 2 and "--timeout" in bad.stderr
