"""Where users stand (issue 24 §1): the installed ``jaxport`` command configured by the
environment exactly as by its options, on SQLite, PostgreSQL and a registry server; SQLite
files that are missing or cannot be made; the API's documentation page and its headers.

The wheel without extras is tested by ``scripts/test_wheel_install.sh`` (``.ci/run``), which
needs fresh virtual environments; here everything runs in the dev install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from _server import admin_token, serving

import jaxport

JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    """The user's environment: none of jaxport's variables but ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    env.update(COLUMNS="80", JAXPORT_HOME=str(tmp_path / "home"), **values)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([JAXPORT, *args], env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    return out


def _ok(args: list[str], env: dict[str, str], cwd: Path) -> str:
    out = _run(args, env, cwd)
    assert out.returncode == 0, (args, out.stderr)
    return out.stdout


def _archive(path: Path) -> Path:
    jaxport.save(jax.export.export(jax.jit(jnp.tanh))(jnp.zeros(3)), path)
    return path


def _session(env: dict[str, str], cwd: Path) -> dict[str, object]:
    """push, alias, ls, show, pull, log, search as a user types them; their JSON answers."""
    _archive(cwd / "tanh.jaxport")
    pushed = json.loads(_ok(["push", "tanh.jaxport", "--name", "tanh", "--json"], env, cwd))
    _ok(["alias", "tanh", "prod", "1"], env, cwd)
    _ok(["pull", "tanh@prod", "-o", "pulled.jaxport"], env, cwd)
    assert (cwd / "pulled.jaxport").read_bytes() == (cwd / "tanh.jaxport").read_bytes()
    listed = json.loads(_ok(["ls", "--json"], env, cwd))
    shown = json.loads(_ok(["show", "tanh@prod", "--json"], env, cwd))
    log = json.loads(_ok(["log", "tanh", "--json"], env, cwd))
    found = json.loads(_ok(["search", "--platform", "cpu", "--json"], env, cwd))
    return {"pushed": pushed, "listed": listed, "shown": shown, "log": log, "found": found}


def _versions(listed: object) -> list[tuple[str, int]]:
    rows = listed["versions"] if isinstance(listed, dict) else listed  # type: ignore[index]
    return [(r["name"], r["version"]) for r in rows]  # type: ignore[index]


@pytest.mark.slow
def test_the_environment_configures_every_command_as_the_options_do(db_url, tmp_path, monkeypatch):
    """JAXPORT_REGISTRY / JAXPORT_BLOBS against --registry / --blobs, SQLite and PostgreSQL:
    the same answers, and jaxport.Registry() reads the same registry."""
    blobs = str(tmp_path / "blobs")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    by_env = _session(_env(tmp_path, JAXPORT_REGISTRY=db_url, JAXPORT_BLOBS=blobs), tmp_path / "a")
    env = _env(tmp_path)
    options = ["--registry", db_url, "--blobs", blobs]
    cwd = tmp_path / "b"
    _archive(cwd / "tanh.jaxport")
    again = json.loads(
        _ok([*options, "push", "tanh.jaxport", "--name", "tanh", "--json"], env, cwd)
    )
    assert again["version"] == by_env["pushed"]["version"] == 1  # type: ignore[index]
    listed = json.loads(_ok([*options, "ls", "--json"], env, cwd))
    assert _versions(listed) == _versions(by_env["listed"]) == [("tanh", 1)]
    shown = json.loads(_ok([*options, "show", "tanh@prod", "--json"], env, cwd))
    assert shown == by_env["shown"]
    assert by_env["log"] and by_env["found"]
    monkeypatch.setenv("JAXPORT_REGISTRY", db_url)
    monkeypatch.setenv("JAXPORT_BLOBS", blobs)
    with jaxport.Registry() as reg:
        assert reg.get("tanh@prod").version == 1


@pytest.mark.slow
def test_a_server_through_the_environment_alone(db_url, tmp_path, monkeypatch):
    """JAXPORT_REGISTRY=http://... and JAXPORT_TOKEN for every command and Registry(); --token
    and --registry give the same; a wrong token is one line, exit 1."""
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "server.log") as server:
        token = admin_token(db_url, blobs)
        (tmp_path / "a").mkdir()
        env = _env(tmp_path, JAXPORT_REGISTRY=server.url, JAXPORT_TOKEN=token)
        seen = _session(env, tmp_path / "a")
        assert _versions(seen["listed"]) == [("tanh", 1)]
        assert [e["kind"] for e in seen["log"]["events"]][:2] == ["alias", "push"]  # type: ignore[index]
        options = ["--registry", server.url, "--token", token, "ls", "--json"]
        assert json.loads(_ok(options, _env(tmp_path), tmp_path)) == seen["listed"]
        wrong = _run(["ls"], {**env, "JAXPORT_TOKEN": "jxp_" + "0" * 40}, tmp_path)
        assert wrong.returncode == 1 and wrong.stderr.startswith("AuthenticationError")
        assert len(wrong.stderr.strip().splitlines()) == 1
        monkeypatch.setenv("JAXPORT_REGISTRY", server.url)
        monkeypatch.setenv("JAXPORT_TOKEN", token)
        with jaxport.Registry() as reg:
            assert reg.url == server.url and reg.get("tanh@prod").version == 1


def test_token_is_refused_for_a_database(tmp_path):
    out = _run(["--registry", f"sqlite:///{tmp_path}/r.db", "--token", "jxp_x", "ls"],
               _env(tmp_path), tmp_path)  # fmt: skip
    assert out.returncode == 1 and out.stderr.startswith("InvalidNameError: --token is for")


def test_a_missing_sqlite_directory_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    """The README's server line in a fresh directory without srv/: the absolute path, no
    traceback, nothing made; the Python API says the same."""
    out = _run(["--registry", "sqlite:///srv/reg.db", "token", "create", "admin", "--scope",
                "admin"], _env(tmp_path), tmp_path)  # fmt: skip
    assert out.returncode == 1
    assert f"cannot open the SQLite registry {tmp_path / 'srv' / 'reg.db'}" in out.stderr
    assert not (tmp_path / "srv").exists()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(jaxport.RegistryError, match=str(tmp_path / "srv")):
        jaxport.Registry("sqlite:///srv/reg.db")


READS = [
    ["ls"], ["show", "tanh"], ["log"], ["search", "--platform", "cpu"], ["alias", "tanh"],
    ["token", "list"], ["verify"], ["audit", "matrix"],
    ["pull", "tanh", "-o", "x.jaxport"], ["inspect", "tanh:1"], ["diff", "tanh:1", "tanh:2"],
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("where", ["option", "environment", "default"])
def test_read_only_commands_never_create_a_database(tmp_path, where):
    """Each read-only command on a SQLite file that does not exist: exit 1, the absolute path
    named, and no file (nor the default home) made."""
    db = tmp_path / "reg.db"
    env = _env(
        tmp_path, **({"JAXPORT_REGISTRY": "sqlite:///reg.db"} if where == "environment" else {})
    )
    expected = tmp_path / "home" / "registry.db" if where == "default" else db
    for args in READS:
        full = ["--registry", "sqlite:///reg.db", *args] if where == "option" else args
        out = _run(full, env, tmp_path)
        assert out.returncode == 1, (args, out.stdout)
        assert f"no registry database at {expected}" in out.stderr, (args, out.stderr)
        assert not db.exists() and not (tmp_path / "home").exists(), args
    full = (
        ["--registry", "sqlite:///reg.db", "db", "current"]
        if where == "option"
        else ["db", "current"]
    )
    out = _run(full, env, tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("database: none"), out.stderr
    assert not db.exists() and not (tmp_path / "home").exists()


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_api_docs_and_security_headers_in_process(tmp_path):
    """The docs page names only this server's assets; each asset is served from the package;
    every answer (page, API, error, docs) carries its Content-Security-Policy."""
    from fastapi.testclient import TestClient

    from jaxport.server import create_app

    with jaxport.Registry(f"sqlite:///{tmp_path}/r.db") as reg:
        client = TestClient(create_app(reg, open_read=True))
        page = client.get("/api/v1/docs")
        assert page.status_code == 200
        assert "http" not in page.text and "<script>" not in page.text  # no CDN, no inline
        for asset in ("assets/swagger-ui-bundle.js", "assets/swagger-ui.css", "init.js"):
            answer = client.get(f"/api/v1/docs/{asset}")
            assert answer.status_code == 200 and len(answer.content) > 400, asset
        assert client.get("/api/v1/docs/assets/../../_app.py").status_code == 404
        assert client.get("/api/v1/docs/assets/index.html").status_code == 404
        for path, needle in [("/api/v1/docs", "script-src 'self'"), ("/", "default-src 'none'"),
                             ("/api/v1/names", "sandbox"), ("/nothing", "default-src 'none'"),
                             ("/api/v1/ref?reference=x", "sandbox")]:  # fmt: skip
            answer = client.get(path)
            assert needle in answer.headers["content-security-policy"], path
            assert answer.headers["x-frame-options"] == "DENY", path
