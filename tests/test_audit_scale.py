"""Audits at scale: incremental reuse, the static level, parallel workers, per-variant time
limits, the progress bar, ``--jax`` environments (resolved offline here; made once in a slow
test)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jax
import jax.export
import jax.numpy as jnp
import pytest

import jaxport
from jaxport.audit import AuditJob, run_audits
from jaxport.audit._envs import cached_environment, plan_environment
from jaxport.audit._probe import key_from_metadata
from jaxport.audit._static import Capabilities, Facts, static_verdict

JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def _exp(fun=jnp.sin, platforms=None):
    return jax.export.export(jax.jit(fun), platforms=platforms)(
        jax.ShapeDtypeStruct((4,), jnp.float32)
    )


def _missing_custom_call():
    target = "jaxport_no_such_target"

    def fun(x):
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return jax.export.export(
        jax.jit(fun), disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)]
    )(jax.ShapeDtypeStruct((4,), jnp.float32))


def _no_workers(monkeypatch):
    """Any worker start fails the test: what is proved instant starts none."""
    from jaxport.audit import _worker

    def refuse(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(_worker._Worker, "__init__", refuse)


# -- incremental ----------------------------------------------------------------------------


def test_a_second_audit_reuses_every_finding_and_force_measures_again(registry, monkeypatch):
    registry.push(_exp(jnp.sin), "a")
    registry.push(_exp(jnp.cos, platforms=("cpu", "tpu")), "b")
    first = registry.audit()
    assert [f.reused for f in first] == [False, False, False]
    assert {(f.name, f.platform, f.status, f.level) for f in first} == {
        ("a", "cpu", "ok", "full"), ("b", "cpu", "ok", "full"), ("b", "tpu", "not-run", "full"),
    }  # fmt: skip
    assert {f.devices for f in first if f.platform == "cpu"} == {8}

    with monkeypatch.context() as m:
        _no_workers(m)
        again = registry.audit()
    assert all(f.reused for f in again)
    assert [(f.digest, f.status, f.reason) for f in again] == [
        (f.digest, f.status, f.reason) for f in first
    ]
    assert len(registry.audit_results()) == 3  # nothing new stored

    forced = registry.audit("a", force=True)
    assert [f.reused for f in forced] == [False] and len(registry.audit_results()) == 4


def test_findings_are_not_reused_across_devices_examples_or_levels(registry, monkeypatch):
    import numpy as np

    registry.push(_exp(jnp.sin), "a")
    registry.audit("a")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    (two,) = registry.audit("a")  # another device count: measured again
    assert not two.reused and two.devices == 2
    x = np.ones(4, np.float32)
    registry.push(_exp(jnp.sin), "a", examples=[((x,), {})])  # same archive, with examples
    (with_examples,) = registry.audit("a:2")
    assert not with_examples.reused and "matches 1 example" in with_examples.reason
    (static,) = registry.audit("a:1", level="static")
    assert not static.reused and static.level == "static"


def test_versions_sharing_an_archive_are_measured_once(registry):
    for name in ("x", "y", "z"):
        registry.push(_exp(jnp.sin), name)
    findings = registry.audit()
    assert [f.name for f in findings] == ["x", "y", "z"]
    assert len({f.created_at for f in findings}) == 1 and len(registry.audit_results()) == 3


# -- static ---------------------------------------------------------------------------------

_CAPS = Capabilities(
    jax_version="0.10.2",
    jaxlib_version="0.10.2",
    format_range=(1, 3),
    calling_convention_range=(9, 10),
    platforms=frozenset({"cpu", "cuda"}),
    stable_targets=frozenset({"lapack_sgeqrf_ffi", "shape_assertion"}),
    registered_targets={"cpu": frozenset({"my_cpu_kernel"}), "cuda": frozenset()},
)


_NEW = dataclasses.replace(_CAPS, jax_version="0.12.0", reads_hlo_shardings=False)
_UNKNOWN = "only a full audit measures"


@pytest.mark.parametrize(
    ("facts", "platform", "caps", "status", "reason"),
    [
        (Facts(3, 9, ("cpu",), ("lapack_sgeqrf_ffi",)), "cpu", _CAPS, "unknown", _UNKNOWN),
        (Facts(3, 9, ("cpu",), ("my_cpu_kernel",)), "cpu", _CAPS, "unknown", _UNKNOWN),
        (Facts(3, 9, ("cuda",), ("my_cpu_kernel",)), "cuda", _CAPS, "incompatible", "not provided"),
        (Facts(3, 9, ("cpu",), ("lapack_sgeqrf",)), "cpu", _CAPS, "incompatible", "lapack_sgeqrf"),
        (Facts(3, 8, ("cpu",), ()), "cpu", _CAPS, "incompatible", "calling convention version 8"),
        (Facts(3, 11, ("cpu",), ()), "cpu", _CAPS, "incompatible", "outside jax's 9..10"),
        (Facts(4, 9, ("cpu",), ()), "cpu", _CAPS, "incompatible", "format version 4"),
        (Facts(3, 9, ("tpu",), ()), "tpu", _CAPS, "incompatible", "does not lower for tpu"),
        (Facts(3, 9, ("cpu",), None), "cpu", _CAPS, "unknown", "not recorded at push: custom"),
        (Facts(None, 9, ("cpu",), ()), "cpu", _CAPS, "unknown", "not recorded at push: format"),
        (Facts(3, 12, ("cpu",), None), "cpu", _CAPS, "incompatible", "calling convention"),
        # jax 0.7 wrote shardings in the HloSharding form only; jax >= 0.11.1 ignores it
        (Facts(3, 9, ("cpu",), (), "model", "0.7.0", True, 8), "cpu", _NEW, "incompatible",
         "HloSharding form only"),
        (Facts(3, 9, ("cpu",), (), "model", "0.7.0", True, 8), "cpu", _CAPS, "unknown", _UNKNOWN),
        (Facts(3, 9, ("cpu",), (), "model", "0.9.2", True, 8), "cpu", _NEW, "unknown", _UNKNOWN),
        (Facts(3, 9, ("cpu",), (), "model", "unknown", True, 8), "cpu", _NEW, "unknown",
         _UNKNOWN),
        (Facts(3, 9, ("cpu",), (), "function", "0.12.0", False, 1), "cpu", _CAPS, "unknown",
         "newer than jax 0.10.2"),
        (Facts(3, 9, ("cpu",), (), "function", "0.4.30", False, 1), "cpu", _CAPS, "unknown",
         "outside jax's 6-month window"),
    ],
)  # fmt: skip
def test_static_verdicts(facts, platform, caps, status, reason):
    result = static_verdict(facts, platform, caps)
    assert result.status == status and reason in result.reason, result


_SHLO = dataclasses.replace(_CAPS, stablehlo_range=("1.0.0", "1.10.3"))


@pytest.mark.parametrize(
    ("module", "caps", "status", "reason"),
    [
        ("0.9.0", _SHLO, "incompatible", "StableHLO 0.9.0, older than the oldest jaxlib"),
        ("1.0.0", _SHLO, "unknown", _UNKNOWN),
        ("1.10.3", _SHLO, "unknown", _UNKNOWN),
        # declared newer: jax writes ops for an older target, so only parsing decides
        ("1.11.0", _SHLO, "unknown", "declare StableHLO 1.11.0, newer than jaxlib 0.10.2's"),
        ("0.9.0", _CAPS, "unknown", _UNKNOWN),  # the jaxlib's range not known: nothing refused
        (None, _SHLO, "unknown", _UNKNOWN),  # pushed before revision 0017
    ],
)  # fmt: skip
def test_static_verdicts_on_the_recorded_stablehlo_version(module, caps, status, reason):
    facts = Facts(3, 9, ("cpu",), (), "function", "0.10.2", False, 1, stablehlo_version=module)
    result = static_verdict(facts, "cpu", caps)
    assert result.status == status and reason in result.reason, result
    assert ("stablehlo" in result.checks) == (module is not None and caps is _SHLO)


def test_a_push_records_the_newest_stablehlo_version_and_static_audits_read_it(registry):
    from jaxport.audit import capabilities

    ref = registry.push(_exp(jnp.sin), "shlo")
    declared = {m.stablehlo_version for m in jaxport.inspect(registry.pull_bytes("shlo")).modules}
    assert ref.variants[0].stablehlo_version == max(declared, key=_key) and declared != {""}
    caps = capabilities()
    assert caps.stablehlo_range is not None
    (finding,) = registry.audit("shlo", level="static")
    assert finding.checks["stablehlo"].startswith(ref.variants[0].stablehlo_version)


def _key(version):
    return tuple(int(p) for p in version.split("."))


def test_a_static_verdict_is_not_run_where_a_full_audit_would_be():
    facts = Facts(3, 9, ("cpu",), (), "function", "0.10.2", True, 8)
    assert static_verdict(facts, "cpu", _CAPS, devices=2).status == "not-run"
    assert static_verdict(facts, "cpu", _CAPS, devices=8).status == "unknown"
    assert "no cpu device" in static_verdict(facts, "cpu", _CAPS, devices=0).reason


def test_capabilities_round_trip_through_json():
    for caps in (_CAPS, _SHLO):
        assert Capabilities.from_json(json.loads(json.dumps(caps.to_json()))) == caps


def test_static_audit_parses_and_compiles_nothing(registry, monkeypatch):
    registry.push(_exp(jnp.sin, platforms=("cpu", "tpu")), "ok")
    registry.push(_missing_custom_call(), "missing")
    from jaxport.audit import _checks

    monkeypatch.setattr(_checks, "audit_archive", None)  # would fail if called
    _no_workers(monkeypatch)
    findings = {(f.name, f.platform): f for f in registry.audit(level="static")}
    assert {k: f.status for k, f in findings.items()} == {
        ("ok", "cpu"): "unknown", ("ok", "tpu"): "not-run", ("missing", "cpu"): "incompatible",
    }  # fmt: skip
    assert "jaxport_no_such_target" in findings[("missing", "cpu")].reason
    assert {f.level for f in registry.audit_results()} == {"static"}
    assert all(f.reused for f in registry.audit(level="static"))


def test_static_findings_do_not_outrank_full_ones_in_upgrade_rows(registry):
    registry.push(_missing_custom_call(), "m")
    registry.audit("m")  # compile-error, measured
    registry.audit("m", level="static")  # newer, static
    (row,) = registry.upgrade_report(jax.__version__, "m")
    assert row.now == "compile-error"


def test_audit_arguments_are_checked(registry):
    registry.push(_exp(), "a")
    for kwargs in ({"level": "deep"}, {"workers": 0}, {"workers": True}, {"jax": "latest"}):
        with pytest.raises(jaxport.InvalidNameError):
            registry.audit("a", **kwargs)
    with pytest.raises(jaxport.InvalidNameError, match="not both"):
        registry.audit("a", python=sys.executable, jax="0.7.0")


# -- parallel workers, time limits ------------------------------------------------------------


def test_two_workers_give_the_serial_results_in_order(registry):
    registry.push(_exp(jnp.sin), "a")
    registry.push(_exp(jnp.cos), "b")
    registry.push(_missing_custom_call(), "c")
    registry.push(_exp(jnp.tanh, platforms=("tpu",)), "d")
    serial = registry.audit(store=False)
    parallel = registry.audit(store=False, workers=2, force=True)
    assert [(f.name, f.platform, f.status, f.reason) for f in parallel] == [
        (f.name, f.platform, f.status, f.reason) for f in serial
    ]


def _fake_worker(tmp_path: Path) -> Path:
    """Speaks the worker protocol; hangs on an archive that reads b"hang", dies on b"die"."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, signal, sys, time\n"
        "print(json.dumps({'jax_version': '9.9', 'jaxlib_version': '9.9'}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    data = open(json.loads(line)['archive'], 'rb').read()\n"
        "    if data == b'hang':\n"
        "        time.sleep(600)\n"
        "    if data == b'die':\n"
        "        os.kill(os.getpid(), signal.SIGSEGV)\n"
        "    reply = {'status': 'ok', 'reason': data.decode(), 'checks': {}, 'seconds': 0}\n"
        "    print(json.dumps(reply), flush=True)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_hung_or_crashed_job_is_a_finding_and_the_run_goes_on(tmp_path, workers):
    blobs = [b"a", b"hang", b"b", b"die", b"c", b"d"]
    seen = []
    env, results = run_audits(
        [AuditJob(b, "cpu") for b in blobs],
        python=_fake_worker(tmp_path),
        timeout=1.0,
        workers=workers,
        progress=lambda i, r: seen.append(i),
    )
    assert env.jax_version == "9.9" and sorted(seen) == list(range(6))
    assert [r.status for r in results] == ["ok", "crash", "ok", "crash", "ok", "ok"]
    assert "time limit" in results[1].reason and "SIGSEGV" in results[3].reason
    assert [r.reason for r in results if r.status == "ok"] == ["a", "b", "c", "d"]


# -- the environment key ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "plugins", "cpu", "cuda"),
    [
        ({}, {}, 1, 0),
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}, {}, 8, 0),
        ({"JAX_NUM_CPU_DEVICES": "4"}, {}, 4, 0),
        ({}, {"jax-cuda12-plugin": "0.10.2"}, 1, None),
        ({"JAX_PLATFORMS": "cpu"}, {"jax-cuda12-plugin": "0.10.2"}, 1, 0),
    ],
)
def test_environment_key(environ, plugins, cpu, cuda):
    key = key_from_metadata({"jax": "0.10.2", "jaxlib": "0.10.2", **plugins}, environ)
    assert (key.jax_version, key.devices["cpu"], key.devices["cuda"]) == ("0.10.2", cpu, cuda)
    with pytest.raises(jaxport.AuditError):
        key_from_metadata({"jax": None, "jaxlib": None}, environ)


# -- --jax environments ---------------------------------------------------------------------


def _which(*names):
    return lambda n: f"/usr/bin/{n}" if n in names else None


def test_environment_plan_with_uv_and_with_venv(tmp_path):
    uv = plan_environment("0.7.0", tmp_path, which=_which("uv"), current=(3, 11))
    assert uv.directory == tmp_path / "envs" / "jax-0.7.0" and not uv.ready
    assert uv.commands[0][:2] == ("/usr/bin/uv", "venv")
    assert "jax==0.7.0" in uv.commands[1] and "jaxlib==0.7.0" in uv.commands[1]
    pip = plan_environment("0.7.0", tmp_path, which=_which(), current=(3, 11))
    assert pip.commands[0][1:3] == ("-m", "venv") and pip.commands[1][1:4] == (
        "-m",
        "pip",
        "install",
    )
    assert pip.base_python == sys.executable


def test_jax_0_11_needs_python_3_12(tmp_path):
    empty = {"PYENV_ROOT": str(tmp_path / "no-pyenv")}
    plan = plan_environment(
        "0.12.0", tmp_path, which=_which("python3.12"), environ=empty, current=(3, 11)
    )
    assert plan.base_python == "/usr/bin/python3.12"
    pyenv = tmp_path / "pyenv" / "versions" / "3.12.1" / "bin"
    pyenv.mkdir(parents=True)
    (pyenv / "python3.12").touch()
    plan = plan_environment(
        "0.11.0", tmp_path, which=_which(), environ={"PYENV_ROOT": str(pyenv.parents[2])},
        current=(3, 11),
    )  # fmt: skip
    assert plan.base_python == str(pyenv / "python3.12")
    with pytest.raises(jaxport.AuditError, match=r"Python 3\.12"):
        plan_environment("0.11.0", tmp_path, which=_which(), environ=empty, current=(3, 11))
    assert plan_environment("0.11.0", tmp_path, which=_which(), current=(3, 12)).commands


def test_a_made_environment_is_reused_and_refreshed_for_another_jaxport(tmp_path):
    directory = tmp_path / "envs" / "jax-0.7.0"
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / "python").touch()
    assert cached_environment("0.7.0", tmp_path) is None  # no marker: incomplete
    marker = directory / "jaxport-env.json"
    marker.write_text(json.dumps({"release": "0.7.0", "jaxport": jaxport.__version__}))
    plan = plan_environment("0.7.0", tmp_path, which=_which())
    assert plan.ready and plan.commands == ()
    assert cached_environment("0.7.0", tmp_path) == str(directory / "bin" / "python")
    marker.write_text(json.dumps({"release": "0.7.0", "jaxport": "0.0.1"}))
    plan = plan_environment("0.7.0", tmp_path, which=_which())
    assert not plan.ready and len(plan.commands) == 1 and "--no-deps" in plan.commands[0]
    for bad in ("latest", "0.7.0; rm -rf /", "../0.7", ""):
        with pytest.raises(jaxport.InvalidNameError):
            plan_environment(bad, tmp_path)
        assert cached_environment(bad, tmp_path) is None


@pytest.mark.slow
def test_audit_with_jax_makes_the_environment_once_and_reuses_it(tmp_path):
    """Makes ``$JAXPORT_HOME/envs/jax-0.10.2`` (the release whose wheels are on this machine:
    no network), audits there, and a second run reuses it and every finding."""
    env = _cli_env(tmp_path)
    jaxport.Registry(env["JAXPORT_REGISTRY"], blobs=env["JAXPORT_BLOBS"]).push(_exp(), "a")
    release = jax.__version__
    first = _cli(env, "audit", "run", "--jax", release, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["findings"][0]["status"] == "ok"
    python = Path(env["JAXPORT_HOME"]) / "envs" / f"jax-{release}" / "bin" / "python"
    assert python.exists()
    again = _cli(env, "audit", "run", "--jax", release, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["findings"][0]["reused"] is True


# -- the command line -----------------------------------------------------------------------


def _cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(
        COLUMNS="80",
        JAX_PLATFORMS="cpu",
        JAXPORT_HOME=str(tmp_path / "home"),
        JAXPORT_REGISTRY=f"sqlite:///{tmp_path / 'reg.db'}",
        JAXPORT_BLOBS=str(tmp_path / "blobs"),
    )
    return env


def _cli(env, *args):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, timeout=600)
    assert b"Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_cli_static_force_jobs_and_exit_codes(tmp_path):
    env = _cli_env(tmp_path)
    reg = jaxport.Registry(env["JAXPORT_REGISTRY"], blobs=env["JAXPORT_BLOBS"])
    reg.push(_exp(), "a")
    ok = _cli(env, "audit", "static", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["findings"][0]["level"] == "static"
    assert (
        json.loads(_cli(env, "audit", "static", "--json").stdout)["findings"][0]["reused"] is True
    )
    forced = _cli(env, "audit", "static", "--force", "--json")
    assert json.loads(forced.stdout)["findings"][0]["reused"] is False
    reg.push(_missing_custom_call(), "m")
    assert _cli(env, "audit", "static", "-j", "2").returncode == 1  # incompatible
    assert _cli(env, "audit", "run", "-j", "0").returncode == 2
    both = _cli(env, "audit", "run", "--python", sys.executable, "--jax", "0.7.0")
    assert both.returncode == 2 and b"not both" in both.stderr
    bad = _cli(env, "audit", "run", "--jax", "latest", "--json")
    assert bad.returncode == 1 and json.loads(bad.stderr)["error"]["type"] == "InvalidNameError"
    reg.close()


def _in_terminal(env, *args) -> str:
    """``jaxport ARGS`` with stdout and stderr on a pseudo-terminal: everything it wrote."""
    import pty

    main, child = pty.openpty()
    proc = subprocess.Popen([JAXPORT, *args], env=env, stdout=child, stderr=child)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=300)
    os.close(main)
    return out.decode(errors="replace")


def test_the_progress_bar_is_drawn_on_a_terminal_and_never_with_json(tmp_path):
    env = _cli_env(tmp_path)
    with jaxport.Registry(env["JAXPORT_REGISTRY"], blobs=env["JAXPORT_BLOBS"]) as reg:
        reg.push(_exp(), "a")
    assert "auditing" in _in_terminal(env, "audit", "static", "--force")
    quiet = _in_terminal(env, "audit", "static", "--force", "--json")
    assert "auditing" not in quiet and json.loads(quiet)["findings"][0]["level"] == "static"
    piped = _cli(env, "audit", "static", "--force")  # not a terminal: no bar either
    assert b"auditing" not in piped.stderr + piped.stdout


def test_a_static_audit_with_another_interpreter_asks_its_worker(registry):
    registry.push(_exp(jnp.sin), "a")
    (finding,) = registry.audit(level="static", python=sys.executable)
    assert finding.status == "unknown" and finding.level == "static"
    assert finding.jax_version == jax.__version__


def test_a_variant_over_its_time_limit_is_a_crash_finding_measured_again_next_time(registry):
    registry.push(_exp(jnp.sin), "a")
    (hung,) = registry.audit("a", timeout=0.001)
    assert hung.status == "crash" and "time limit" in hung.reason
    (again,) = registry.audit("a")
    assert not again.reused and again.status == "ok"
