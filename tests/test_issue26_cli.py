"""Issue 26's commands as a newcomer meets them: the installed ``jaxport`` in a subprocess, at
``COLUMNS=80``, with wrong inputs on purpose. Every list fits 80 columns; every wrong input is
one line on stderr (``Type: message``, or a usage error), exit 1 or 2, never a traceback.

Each test pins one fix of the review of issue 26's CLI (README "Protected aliases", "Watching
jax releases", "Fleet rescue", "Retention").
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import jax
import jax.export
import jax.numpy as jnp
import pytest
from _server import admin_token, serving

import jaxport

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
WIDTH = 80
#: A port nothing listens on: an index there is unreachable.
NOWHERE = "http://127.0.0.1:9/simple/"


def _run(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300)
    out, err = proc.stdout, proc.stderr
    assert "Traceback" not in out + err and "sqlalchemy" not in err.lower(), (args, out, err)
    assert proc.returncode == code, (args, proc.returncode, out, err)
    return proc


def _fits(text: str) -> str:
    assert text.strip(), text
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    return text


def _one_line(err: str, starts: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith(starts), err
    return err


def _usage(err: str, says: str) -> None:
    assert err.startswith("Usage: jaxport") and says in err, err


def _env(db_url: str, tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "PIP_"))}
    return {**base, "COLUMNS": str(WIDTH), "JAX_PLATFORMS": "cpu",
            "JAXPORT_HOME": str(tmp_path / "home"), "JAXPORT_REGISTRY": db_url,
            "JAXPORT_BLOBS": str(tmp_path / "blobs")}  # fmt: skip


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> dict[str, str]:
    """A user of a registry on each backend, at 80 columns."""
    return _env(db_url, tmp_path)


def _push(env: dict[str, str], name: str, *aliases: str, fun=jnp.tanh) -> None:
    exp = jax.export.export(jax.jit(fun))(jax.ShapeDtypeStruct((3,), jnp.float32))
    with jaxport.Registry(env["JAXPORT_REGISTRY"], blobs=env["JAXPORT_BLOBS"]) as reg:
        reg.push(exp, name, aliases=list(aliases))


# -- jaxport alias ---------------------------------------------------------------------------


def test_alias_help_fits_80_columns(tmp_path):
    _fits(_run(_env(f"sqlite:///{tmp_path / 'reg.db'}", tmp_path), "alias", "-h").stdout)


def test_protect_fits_and_says_when_the_alias_points_nowhere(env, tmp_path):
    _push(env, "vision-encoder", "prod")
    gates = ("--require-audit", "ok", "--jax", "0.11.2,0.12.0.1", "--platforms", "cuda,tpu",
             "--require-goldens")  # fmt: skip
    said = _fits(_run(env, "alias", "protect", "vision-encoder", "prod", *gates).stdout)
    assert said.startswith("protected vision-encoder@prod: audit ok on cuda, tpu") and (
        "no version yet" not in said
    )
    typo = _run(env, "alias", "protect", "vision-encoder", "prdo", "--require-goldens").stdout
    assert "vision-encoder@prdo points at no version yet: its first move is gated" in typo
    assert json.loads(_run(env, "alias", "vision-encoder", "--json").stdout)["aliases"] == {
        "prod": 1
    }
    shown = _fits(_run(env, "show", "vision-encoder").stdout)
    assert "@prod -> 1  FAILS: audit ok on cuda, tpu under" in shown
    assert "@prdo points nowhere: golden examples" in shown
    refused = _run(env, "alias", "protect", "no-such", "prod", "--require-goldens", code=1)
    _one_line(refused.stderr, "NotFoundError: no artifact named 'no-such'")
    short = _run(env, "alias", "protect", "vision-encoder", "prod", "--require-audit", "ok",
                 "--jax", "0.11", code=1).stderr  # fmt: skip
    _one_line(short, "InvalidNameError: '0.11' is not a jax release (e.g. 0.11.2)")
    alone = _run(env, "alias", "protect", "vision-encoder", "prod", "--platforms", "cuda", code=2)
    _usage(alone.stderr, "--jax and --platforms are targets of --require-audit ok")


def test_override_says_what_it_did_and_the_log_fits(env):
    _push(env, "vision-encoder", "prod")
    _push(env, "vision-encoder", fun=jnp.sin)
    why = ("--override", "--reason", "incident 42: roll back")
    unused = _run(env, "alias", "vision-encoder", "staging", "2", *why).stdout
    assert unused == "vision-encoder@staging -> 2 (--override unused: not protected)\n"
    _run(env, "alias", "protect", "vision-encoder", "prod", "--require-goldens")
    assert _run(env, "alias", "vision-encoder", "prod", "2", *why).stdout.endswith(
        " -> 2 (gates overridden)\n"
    )
    removal = _run(env, "alias", "vision-encoder", "prod", "--remove", *why, code=2).stderr
    _usage(removal, "removing an alias is not gated: --override goes with a move")
    log = _fits(_run(env, "log", "vision-encoder").stdout)
    assert "(gates overridden)" in log


# -- jaxport watch ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://[::1", "got one that does not parse"),
        ("garbage", "got 'garbage'"),
        ("ftp://user:secret@mirror/simple/", "got 'ftp://mirror/simple/'"),
        ("http://", "got 'http://'"),
    ],
)
def test_watch_refuses_an_index_url_that_is_no_http_url_in_one_line(tmp_path, url, shown):
    env = _env(f"sqlite:///{tmp_path / 'reg.db'}", tmp_path)
    _push(env, "m")
    err = _run(env, "watch", "--index-url", url, "--dry-run", code=1).stderr
    _one_line(err, "AuditError: the package index must be an http(s) URL")
    assert shown in err and "secret" not in err
    unreachable = _run(env, "watch", "--index-url", NOWHERE, code=1).stderr
    _one_line(unreachable, "PackageIndexError: the package index http://127.0.0.1:9/simple/ ")


def test_watch_checks_each_webhook_before_reading_the_index(env):
    for hook in ("hooks.example.com/jaxport", "http://[::1", "ftp://hooks/x"):
        # Were the webhook checked after the index, this would be the index's AuditError.
        err = _run(env, "watch", "--index-url", NOWHERE, "--webhook", hook, code=2).stderr
        _usage(err, "Invalid value for '--webhook': expected an http(s) URL")
        assert "[::1" not in err and "ftp" not in err  # a webhook URL may hold a secret


# -- jaxport audit forecast ------------------------------------------------------------------


def test_forecast_keeps_every_column_within_80(env):
    _push(env, "vision-encoder-int8-distilled")
    _push(env, "a-much-longer-name-than-any-column-has-room-for-in-eighty", fun=jnp.sin)
    text = _fits(_run(env, "audit", "forecast").stdout)
    for header in ("variant", "written", "runs on", "window ends"):
        assert f" {header} " in text, text
    assert "vision-encoder-int8" in text and text.count("sha256:") == 2
    assert "…" not in text  # nothing cut: a long name folds


# -- jaxport retain / restore ----------------------------------------------------------------


def test_retain_without_a_policy_says_so_in_one_line(env):
    _push(env, "vision-encoder")
    for args in (["retain"], ["retain", "--dry-run"], ["retain", "--prefix", "vision-"]):
        err = _run(env, *args, code=1).stderr
        _one_line(err, "NotFoundError: no retention policies, so nothing to apply: set one")
    error = json.loads(_run(env, "retain", "--json", code=1).stderr)["error"]
    assert error["type"] == "NotFoundError"
    _run(env, "retain", "policy", "set", "vision-", "--keep-last", "5", "--keep-younger", "30d")
    err = _run(env, "retain", "--prefix", "other-", "--dry-run", code=1).stderr
    _one_line(err, "NotFoundError: no retention policy applies to names starting with 'other-'")
    assert "policies: 'vision-'" in err
    for prefix in ("vision-enc", "v"):  # within the policy, or around it: the run goes on
        assert _run(env, "retain", "--prefix", prefix, "--dry-run").stdout.startswith(
            "would delete 0 version(s)"
        )


def test_retain_lists_fit_80_columns_and_json_times_are_iso(env):
    for fun in (jnp.sin, jnp.cos, jnp.tanh):
        _push(env, "vision-encoder", fun=fun)
    said = _run(env, "retain", "policy", "set", "vision-", "--keep-last", "1").stdout
    assert _fits(said) == (
        "policy 'vision-': keep last 1, keep newest ok per target, keep aliased;\n"
        "    restorable for 14d\n"
    )
    _fits(_run(env, "retain", "policy", "ls").stdout)
    dry = _fits(_run(env, "retain", "--dry-run").stdout)
    assert dry.startswith("would delete 2 version(s) of 1 name(s)\n  vision-encoder:1  (vision-)")
    assert "no alias; newest ok for no\n      supported target\n" in dry  # a hanging indent
    done = json.loads(_run(env, "retain", "--json").stdout)
    until = datetime.datetime.fromisoformat(done["deleted"][0]["restorable_until"])
    assert until.utcoffset() == datetime.timedelta(0)
    gone = _run(env, "show", "vision-encoder:1", code=1).stderr
    _one_line(gone, "NotFoundError: vision-encoder has no version 1: a retention run deleted it")
    assert "(use `jaxport restore vision-encoder:1`); versions: 3" in gone
    live = _run(env, "restore", "vision-encoder:3", code=1).stderr
    _one_line(live, "ConflictError: vision-encoder:3 is not deleted")
    for bad in ("vision-encoder", "vision-encoder@prod", "sha256:abcdef"):
        _usage(_run(env, "restore", bad, code=2).stderr, "expected NAME:VERSION")


# -- jaxport rescue --expiring-before --------------------------------------------------------


def test_fleet_rescue_lists_fit_80_columns(env, db_url):
    _push(env, "vision-encoder-int8-distilled", "prod")
    _push(env, "vision-encoder", fun=jnp.sin)
    # Every window ends before 2099, and so would a re-export's: each variant is refused.
    text = _fits(_run(env, "rescue", "--expiring-before", "2099-01-01", "--dry-run", code=1).stdout)
    assert text.count("refused ") == 2 and "\n    " in text  # long refusals hang
    assert "2 variant(s) expiring before 2099-01-01 or HloSharding-only;\n  would rescue 0" in text
    for date in ("2026-13-45", "2026-02-30", "tomorrow"):
        err = _run(env, "rescue", "--expiring-before", date, "--dry-run", code=1).stderr
        _one_line(err, f"InvalidNameError: not a date YYYY-MM-DD: '{date}'")
    if db_url.startswith("sqlite"):
        err = _run(env, "rescue", "--expiring-before", "2099-01-01", "--enqueue", code=1).stderr
        _one_line(err, "UnsupportedFeatureError: the audit queue needs a PostgreSQL registry")
        assert "`jaxport rescue` without --enqueue" in err


# -- through a registry server ---------------------------------------------------------------


def test_the_same_through_a_server(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'reg.db'}"  # the server's backends: test_gates, test_retention
    env = _env(db_url, tmp_path)
    _push(env, "vision-encoder", "prod")
    _push(env, "vision-encoder", fun=jnp.sin)
    _push(env, "vision-encoder", fun=jnp.cos)
    token = admin_token(db_url, env["JAXPORT_BLOBS"])
    with serving(db_url, env["JAXPORT_BLOBS"], tmp_path / "server.log") as server:
        remote = {**env, "JAXPORT_REGISTRY": server.url, "JAXPORT_TOKEN": token}
        err = _run(remote, "retain", "--dry-run", code=1).stderr
        _one_line(err, "NotFoundError: no retention policies, so nothing to apply")
        typo = _run(remote, "alias", "protect", "vision-encoder", "prdo", "--require-goldens")
        assert "points at no version yet" in _fits(typo.stdout)
        _fits(_run(remote, "audit", "forecast").stdout)
        hook = _run(remote, "watch", "--webhook", "nope", code=2).stderr
        _usage(hook, "Invalid value for '--webhook'")
        _run(remote, "retain", "policy", "set", "vision-", "--keep-last", "1")
        _fits(_run(remote, "retain").stdout)
        gone = _run(remote, "show", "vision-encoder:2", code=1).stderr
        _one_line(gone, "NotFoundError: vision-encoder has no version 2: a retention run")
        assert "`jaxport restore vision-encoder:2`" in gone


# -- the issue's own example, word for word ----------------------------------------------------


def _keys(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh EC key pair as PEM files: release.pem (private), release.pub (public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "release.pem", tmp_path / "release.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip
    return private, public


def _store_ok(db_url: str, blobs: str, digest: str) -> list[int]:
    """``ok`` findings for cuda and tpu under 0.11.2 and 0.12.0.1, stored as audits on those
    machines would have stored them (the gates read stored findings only: nothing here runs)."""
    import time

    from sqlalchemy import insert

    from jaxport.registry._models import AuditRow

    ids = []
    with jaxport.Registry(db_url, blobs=blobs) as reg, reg._backend.engine.begin() as conn:  # type: ignore[attr-defined]
        for platform in ("cuda", "tpu"):
            for release in ("0.11.2", "0.12.0.1"):
                row = {"digest": digest, "jax_version": release, "jaxlib_version": release,
                       "platform": platform, "status": "ok", "reason": "", "details_json": "{}",
                       "seconds": 0.1, "created_at": time.time(), "level": "full", "devices": 1,
                       "examples_digest": None}  # fmt: skip
                ids.append(
                    int(conn.execute(insert(AuditRow).values(**row)).inserted_primary_key[0])
                )
    return ids


@pytest.mark.parametrize("through", ["database", "server"])
def test_the_issues_protect_example_word_for_word(db_url, tmp_path, through):
    """Issue 26 §1's command as written (``--require-signature KEY --require-audit ok --jax
    0.11.2,0.12.0.1 --platforms cuda,tpu --require-goldens``), the installed ``jaxport`` at 80
    columns, on each backend, directly and through a server: a move failing any gate is exit 1
    with every failed gate (409 underneath), ``--override --reason`` moves it and is recorded,
    and a version that passes moves with the findings and signatures named in its event."""
    env = _env(db_url, tmp_path)
    blobs = env["JAXPORT_BLOBS"]
    private, public = _keys(tmp_path)
    spec = jax.ShapeDtypeStruct((3,), jnp.float32)

    def archive(fun, stem: str) -> str:
        exp = jax.export.export(jax.jit(fun), platforms=("cuda", "tpu"))(spec)
        jaxport.save(exp, tmp_path / f"{stem}.jaxport")
        return str(tmp_path / f"{stem}.jaxport")

    _run(env, "push", archive(jnp.tanh, "v1"), "--name", "vision-encoder", "--alias", "prod")
    _run(env, "push", archive(jnp.sin, "v2"), "--name", "vision-encoder")
    admin = admin_token(db_url, blobs)
    with contextlib.ExitStack() as stack:
        url = db_url
        if through == "server":
            server = stack.enter_context(serving(db_url, blobs, tmp_path / "server.log"))
            url = server.url
            env = {**env, "JAXPORT_REGISTRY": url, "JAXPORT_TOKEN": admin}

        said = _run(env, "alias", "protect", "vision-encoder", "prod", "--require-signature",
                    str(public), "--require-audit", "ok", "--jax", "0.11.2,0.12.0.1",
                    "--platforms", "cuda,tpu", "--require-goldens").stdout  # fmt: skip
        assert _fits(said).startswith("protected vision-encoder@prod: "), said
        assert "no version yet" not in said

        refused = _run(env, "alias", "vision-encoder", "prod", "2", code=1).stderr
        _one_line(refused, "GateError: vision-encoder@prod is protected: ")  # as every error
        for words in ("signature gate", "cuda@0.11.2", "cuda@0.12.0.1", "tpu@0.11.2",
                      "tpu@0.12.0.1", "goldens gate"):  # fmt: skip
            assert words in refused, refused
        failures = json.loads(_run(env, "alias", "vision-encoder", "prod", "2", "--json",
                                   code=1).stderr)["error"]["failures"]  # fmt: skip
        assert [f["gate"] for f in failures] == ["signature"] + ["audit"] * 4 + ["goldens"]
        if through == "server":
            raw = httpx.put(f"{url}/api/v1/aliases/vision-encoder/prod", json={"version": 2},
                            headers={"Authorization": f"Bearer {admin}"})  # fmt: skip
            assert raw.status_code == 409 and raw.json()["error"]["type"] == "GateError"
        shown = _fits(_run(env, "show", "vision-encoder").stdout)
        assert "@prod -> 1  FAILS" in shown, shown

        _usage(_run(env, "alias", "vision-encoder", "prod", "2", "--override", code=2).stderr,
               "--reason")  # fmt: skip
        moved = _run(env, "alias", "vision-encoder", "prod", "2", "--override", "--reason",
                     "incident 42: roll back").stdout  # fmt: skip
        assert moved.endswith(" -> 2 (gates overridden)\n"), moved
        with jaxport.Registry(url, token=admin if through == "server" else None,
                              blobs=None if through == "server" else blobs) as reg:  # fmt: skip
            event = reg.events(name="vision-encoder", limit=1)[0]
            assert event.kind == "alias", event
            assert event.detail["override"]["reason"] == "incident 42: roll back"
            assert [f[0] for f in event.detail["override"]["failures"]] == (
                ["signature"] + ["audit"] * 4 + ["goldens"]
            )
            x = jnp.ones(3, jnp.float32)
            cos = jax.export.export(jax.jit(jnp.cos), platforms=("cuda", "tpu"))(spec)
            golden = jaxport.Example((x,), {}, jnp.cos(x))
            v3 = reg.push(cos, "vision-encoder", examples=[golden])
        # `jaxport sign` writes to a database (a server stores no private key's work): sign there
        direct = {**env, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": blobs}
        _run(direct, "sign", f"vision-encoder:{v3.version}", "--key", str(private))
        ids = _store_ok(db_url, blobs, v3.variants[0].digest)
        passed = _run(env, "alias", "vision-encoder", "prod", str(v3.version)).stdout
        assert "overridden" not in passed and "unused" not in passed, passed
        with jaxport.Registry(url, token=admin if through == "server" else None,
                              blobs=None if through == "server" else blobs) as reg:  # fmt: skip
            assert reg.aliases("vision-encoder")["prod"] == v3.version
            event = reg.events(name="vision-encoder", limit=1)[0]
            assert event.kind == "alias", event
            assert event.detail["passed"] is True and "override" not in event.detail
            assert sorted(a["id"] for a in event.detail["audits"]) == sorted(ids)
            (signature,) = event.detail["signatures"]
            assert signature["digest"] == v3.variants[0].digest
        _fits(_run(env, "show", "vision-encoder").stdout)
