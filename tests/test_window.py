"""jax's 6-month backward-compatibility window (``jaxport._window``): its data against the
installed jax and the CI releases, the dates, and what loading, ``inspect``, ``show`` and
``audit expiring`` say.

``tests/data/jax_0_7_0/sin.jaxport`` is a real archive written by jaxport under jax 0.7.0
(``2 * sin(x)``, x float32[4], cpu): its window ended 2026-01-22 for every jax after 0.7.0.
Regenerate it with ``tests/data/jax_0_7_0/make_archive.py`` in the jax 0.7.0 venv of
``scripts/test_jax_versions.sh``. The CLI runs the installed ``jaxport`` in a subprocess.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport import _window
from jaxport._window import (
    ENFORCED_SINCE,
    JAX_RELEASE_DATES,
    jax_window,
    release_date,
)

ROOT = Path(__file__).resolve().parent.parent
OLD = ROOT / "tests" / "data" / "jax_0_7_0" / "sin.jaxport"
OLD_JAX = ROOT / "tests" / "data" / "old_jax"
GOLDEN_MODEL = ROOT / "tests" / "golden" / "v2_model_two_methods.jaxport"
JAXPORT = str(Path(sys.executable).with_name("jaxport"))
X = np.linspace(-1, 1, 4, dtype=np.float32)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _ci_releases() -> list[str]:
    script = (ROOT / "scripts" / "test_jax_versions.sh").read_text()
    (listed,) = re.findall(r"\|\| VERSIONS=\(([^)]*)\)", script)
    return listed.split()


# -- the data against the installed jax ------------------------------------------------------


def test_the_installed_jax_and_every_ci_release_have_a_date():
    assert release_date(jax.__version__) is not None, jax.__version__
    for release in _ci_releases():
        assert release in JAX_RELEASE_DATES, release
    dates = [JAX_RELEASE_DATES[v] for v in JAX_RELEASE_DATES]
    assert all(datetime.date.fromisoformat(d) for d in dates)


def test_the_declared_jax_range_is_what_ci_tests():
    """pyproject.toml's ``jax>=A,<B``: A is the oldest CI release, B above the newest."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    low, high = re.search(r'"jax>=([0-9.]+),<([0-9.]+)"', pyproject).groups()
    releases = sorted(_ci_releases(), key=_key)
    assert releases[0] == low
    assert _key(releases[-1]) < _key(high)
    assert _key(high)[:2] == (_key(releases[-1])[0], _key(releases[-1])[1] + 1)


def test_enforcement_is_where_the_data_says():
    """jax's refusal (``_expired_error_msg``) exists from ``ENFORCED_SINCE`` on, and says why."""
    from jax._src.export import serialization

    enforced = _key(jax.__version__) >= _key(ENFORCED_SINCE)
    assert hasattr(serialization, "_expired_error_msg") == enforced
    if enforced:
        import inspect

        source = inspect.getsource(serialization._expired_error_msg)
        assert "6-month" in source and "backward-compatibility window" in source


@pytest.mark.parametrize("path", sorted(OLD_JAX.glob("*.jaxexport")), ids=lambda p: p.stem)
def test_the_refusal_rule_matches_jax_on_real_old_bytes(path):
    """jax 0.4.30's own bytes: the installed jax's deserialize does what the rule predicts."""
    predicted = jax_window("0.4.30", sharded=False).jax_deserialize
    try:
        jax.export.deserialize(bytearray(path.read_bytes()))
        measured = "accepts"
    except ValueError as e:
        assert "6-month backward-compatibility window" in str(e)
        measured = "refuses"
    assert measured == predicted


# -- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("producer", "released", "ends"),
    [
        ("0.7.0", "2025-07-22", "2026-01-22"),
        ("0.4.31", "2024-07-30", "2025-01-30"),
        ("0.10.2", "2026-06-17", "2026-12-17"),
        ("0.12.0.1", "2026-10-21", "2027-04-21"),
        ("unknown", None, None),
        ("0.0.1", None, None),
    ],
)
def test_window_dates(producer, released, ends):
    w = jax_window(producer, sharded=False, running="0.12.0.1")
    assert (w.jax_version, w.released, w.window_ends) == (producer, released, ends)
    assert w.within_window is (None if ends is None else ends >= "2026-10-21")


def test_months_are_calendar_months_clamped_to_the_month_end():
    assert _window._add_months(datetime.date(2025, 8, 31), 6) == datetime.date(2026, 2, 28)
    assert _window._add_months(datetime.date(2025, 12, 18), 6) == datetime.date(2026, 6, 18)


def test_a_running_jax_newer_than_the_table_is_judged_from_the_newest_date():
    assert jax_window("0.7.0", sharded=False, running="99.0").within_window is False
    assert jax_window("0.12.0.1", sharded=False, running="99.0").within_window is True


@pytest.mark.parametrize(
    ("producer", "sharded", "running", "verdict"),
    [
        ("0.8.1", False, "0.12.0.1", "refuses"),  # nr_devices only in the 16-bit field
        ("0.8.2", False, "0.12.0.1", "accepts"),
        ("0.8.3", True, "0.12.0.1", "refuses"),  # HloSharding only
        ("0.9.0", True, "0.12.0.1", "accepts"),
        ("0.4.30", False, "0.11.0", "accepts"),  # before the refusal
        ("0.4.30", False, "0.11.1", "refuses"),
        ("unknown", False, "0.12.0.1", "unknown"),
    ],
)
def test_what_jax_deserialize_does(producer, sharded, running, verdict):
    assert jax_window(producer, sharded=sharded, running=running).jax_deserialize == verdict


# -- loading ---------------------------------------------------------------------------------


@pytest.fixture
def jax_0_12(monkeypatch):
    """The running jax, as the window sees it, is 0.12.0.1."""
    monkeypatch.setattr(_window, "_running_jax", lambda: "0.12.0.1")


def test_loading_outside_the_window_warns_and_runs(jax_0_12):
    with pytest.warns(jaxport.OutsideJaxWindowWarning, match="since 2026-01-22") as record:
        exp = jaxport.load(OLD)
    assert "jax 0.7.0" in str(record[0].message) and str(OLD) in str(record[0].message)
    np.testing.assert_allclose(exp.call(X), 2 * np.sin(X), rtol=1e-6)


def test_a_policy_refuses_or_allows_it(jax_0_12):
    data = OLD.read_bytes()
    with pytest.raises(jaxport.OutsideJaxWindowError, match="outside jax's 6-month") as e:
        jaxport.loads(data, outside_window="refuse")
    assert isinstance(e.value, ValueError)
    assert e.value.window == jax_window("0.7.0", sharded=False, running="0.12.0.1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exp = jaxport.loads(data, outside_window="allow")
    np.testing.assert_allclose(exp.call(X), 2 * np.sin(X), rtol=1e-6)
    with pytest.raises(ValueError, match="outside_window"):
        jaxport.loads(data, outside_window="sometimes")


def test_within_the_window_nothing_is_said(monkeypatch):
    monkeypatch.setattr(_window, "_running_jax", lambda: "0.7.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jaxport.loads(OLD.read_bytes(), outside_window="refuse")


def test_models_and_registry_pulls_follow_the_policy(monkeypatch, registry):
    """A model written by jax 0.10.2 (the golden v2), read by a jax released 2027-01-01."""
    monkeypatch.setitem(JAX_RELEASE_DATES, "0.13.0", "2027-01-01")
    monkeypatch.setattr(_window, "_running_jax", lambda: "0.13.0")
    with pytest.warns(jaxport.OutsideJaxWindowWarning, match="since 2026-12-17"):
        jaxport.load_model(GOLDEN_MODEL)
    with pytest.raises(jaxport.OutsideJaxWindowError):
        jaxport.load_model(GOLDEN_MODEL, outside_window="refuse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.push(GOLDEN_MODEL, "lm")  # storing is not loading for use: nothing said
        registry.push(OLD, "old")
    with pytest.warns(jaxport.OutsideJaxWindowWarning):
        registry.pull_model("lm")
    with pytest.warns(jaxport.OutsideJaxWindowWarning):
        registry.pull("old")


def test_inspect_reports_the_window():
    info = jaxport.inspect(OLD)
    assert info.jax_version == "0.7.0"
    assert info.window == jax_window("0.7.0", sharded=False)
    assert jaxport.inspect(GOLDEN_MODEL).window == jax_window("0.10.2", sharded=False)


# -- the command line ------------------------------------------------------------------------


def _run(env: dict[str, str], *args: str, code: int = 0) -> str:
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == code, (args, proc.stdout, proc.stderr)
    return proc.stdout


@pytest.fixture
def cli_env(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(
        COLUMNS="100",
        JAX_PLATFORMS="cpu",
        JAXPORT_HOME=str(tmp_path / "home"),
        JAXPORT_REGISTRY=f"sqlite:///{tmp_path / 'reg.db'}",
        JAXPORT_BLOBS=str(tmp_path / "blobs"),
    )
    return env


def test_cli_inspect_shows_the_window(cli_env):
    import json

    doc = json.loads(_run(cli_env, "inspect", str(OLD), "--json"))
    assert doc["window"] == dataclasses.asdict(jax_window("0.7.0", sharded=False))
    text = _run(cli_env, "inspect", str(OLD))
    assert "jax window" in text and "2026-01-22" in text


def test_cli_show_and_expiring_before(cli_env, tmp_path):
    import json

    new = tmp_path / "new.jaxport"
    exp = jax.export.export(jax.jit(jnp.cos), platforms=("cpu",))(jnp.zeros(4, jnp.float32))
    jaxport.save(exp, new)
    _run(cli_env, "push", str(OLD), "--name", "old")
    _run(cli_env, "push", str(new), "--name", "new")
    shown = json.loads(_run(cli_env, "show", "old", "--json"))
    (row,) = shown["windows"]
    assert row["name"] == "old" and row["window"]["window_ends"] == "2026-01-22"
    assert row["window"]["last_known_release"] is None
    assert "jax window" in _run(cli_env, "show", "old")

    _run(cli_env, "audit", "run", "old", "--platform", "cpu")  # measured ok under the installed jax
    listed = json.loads(_run(cli_env, "audit", "expiring", "2026-02-01", "--json"))
    expected = {"old"} | ({"new"} if jax.__version__ == "0.7.0" else set())
    assert {r["name"] for r in listed} == expected
    (old,) = [r for r in listed if r["name"] == "old"]
    assert old["window"]["last_known_release"] == jax.__version__
    assert old["window"]["jax_version"] == "0.7.0"
    text = _run(cli_env, "audit", "expiring", "2026-02-01")
    assert "old:1" in text and "2026-01-22" in text
    assert json.loads(_run(cli_env, "audit", "expiring", "2025-01-01", "--json")) == []
    later = json.loads(_run(cli_env, "audit", "expiring", "2100-01-01", "new", "--json"))
    assert [r["name"] for r in later] == ["new"]
    _run(cli_env, "audit", "expiring", "soon", code=2)  # a usage error, no traceback


def test_cli_pull_as_jax_bytes_past_the_window(cli_env, tmp_path):
    """A jax 0.7.0 archive, pulled as jax-native bytes by the installed jax: unsharded ones
    always (jax >= 0.9.2 refuses to serialize an Exported without named shardings: all-None
    shardings are read as named); a sharded one, or a typed error, never a traceback."""
    sharded = OLD.with_name("sharded.jaxport")
    assert jaxport.inspect(sharded).window == jax_window("0.7.0", sharded=True)
    _run(cli_env, "push", str(OLD), "--name", "old")
    out = tmp_path / "old.jaxexport"
    _run(cli_env, "pull", "old", "--format", "jax", "-o", str(out))
    exp = jax.export.deserialize(bytearray(out.read_bytes()))
    np.testing.assert_allclose(exp.call(X), 2 * np.sin(X), rtol=1e-6)
    from jaxport.export import _compat

    if not _compat.READS_HLO_SHARDINGS:  # jax >= 0.11.1 ignores HloShardings: refused, typed
        refused = subprocess.run(
            [JAXPORT, "push", str(sharded), "--name", "old-sharded"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "UnsupportedFeatureError: " in refused.stderr
        assert "HloSharding form only" in refused.stderr
        return
    _run(cli_env, "push", str(sharded), "--name", "old-sharded")
    proc = subprocess.run(
        [JAXPORT, "pull", "old-sharded", "--format", "jax", "-o", str(tmp_path / "s.jaxexport")],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr
    if proc.returncode:
        assert "\nUnsupportedFeatureError: jax " in proc.stderr, proc.stderr  # after the warning
        assert "--format jaxport" in proc.stderr
