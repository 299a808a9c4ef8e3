"""The registry server as its users meet it: tokens and scopes, prefixes, expiry and
revocation, hostile uploads, a server killed mid-upload, two server processes under eight
concurrent clients, webhooks, the event log, ranges, and the CLI against it. Every test talks to
real ``jaxport serve`` processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _server import JAXPORT, admin_token, serving, start

import jaxport

F32 = jnp.float32
CORPUS = Path(__file__).parent / "reliability" / "corpus"
CRASHERS = Path(__file__).parent / "reliability" / "crashers"


def _exported(fn=jnp.sin):
    return jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((3,), F32))


@pytest.fixture
def served(db_url, tmp_path):
    """A server on each backend with a fresh database and an admin token."""
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as s:
        s.admin = admin_token(db_url, blobs)  # type: ignore[attr-defined]
        yield s


def _client(served, scope: str | None = "admin", **kw) -> jaxport.Registry:
    if scope is None:
        return jaxport.Registry(served.url, token="")
    secret = admin_token(served.db_url, served.blobs, f"t{uuid.uuid4().hex[:8]}", scope, **kw)
    return jaxport.Registry(served.url, token=secret)


def test_scopes_allow_and_refuse(served):
    admin = jaxport.Registry(served.url, token=served.admin)
    admin.push(_exported(), "sin")
    reader, writer = _client(served, "read"), _client(served, "write")
    assert reader.names() == ["sin"]
    with pytest.raises(jaxport.PermissionDeniedError) as e:
        reader.push(_exported(jnp.cos), "cos")
    assert e.value.needed == "write"
    writer.push(_exported(jnp.cos), "cos")
    writer.alias("cos", "prod", 1)
    for call in (lambda r: r.delete("cos", 1, force=True), lambda r: r.gc(),
                 lambda r: r.tokens.list(), lambda r: r.verify()):  # fmt: skip
        with pytest.raises(jaxport.PermissionDeniedError) as e:
            call(writer)
        assert e.value.needed == "admin"
    admin.delete("cos", force=True)
    assert admin.names() == ["sin"]


def test_no_wrong_expired_revoked_token_is_401(served):
    nobody = _client(served, None)
    with pytest.raises(jaxport.AuthenticationError):
        nobody.names()
    r = httpx.get(f"{served.url}/api/v1/names", headers={"Authorization": "Bearer jxp_wrong"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "jxp_wrong" not in r.text
    short = _client(served, "read", expires_in=1.0)
    short.names()
    time.sleep(1.2)
    with pytest.raises(jaxport.AuthenticationError, match="expired"):
        short.names()
    admin = jaxport.Registry(served.url, token=served.admin)
    new = admin.tokens.create("gone", "read")
    gone = jaxport.Registry(served.url, token=new.secret)
    gone.names()
    admin.tokens.revoke("gone")
    with pytest.raises(jaxport.AuthenticationError, match="revoked"):
        gone.names()
    assert new.secret not in repr(new) and new.secret not in repr(gone)
    listed = httpx.get(
        f"{served.url}/api/v1/tokens", headers={"Authorization": f"Bearer {served.admin}"}
    )
    assert new.secret not in listed.text and served.admin not in listed.text


def test_prefix_limits(served):
    admin = jaxport.Registry(served.url, token=served.admin)
    admin.push(_exported(), "team-a-sin")
    admin.push(_exported(jnp.cos), "other")
    team = _client(served, "write", prefixes=["team-a-"])
    assert team.names() == ["team-a-sin"]
    team.push(_exported(jnp.tanh), "team-a-tanh")
    with pytest.raises(jaxport.PermissionDeniedError):
        team.push(_exported(jnp.tanh), "other")
    with pytest.raises(jaxport.PermissionDeniedError):
        team.pull("other")
    with pytest.raises(jaxport.NotFoundError) as e:
        team.get("team-a-nothing")
    assert "other" not in str(e.value)  # no hint of names outside the prefixes
    assert {e.name for e in team.events()} <= {"team-a-sin", "team-a-tanh"}


def test_events_name_the_token(served):
    admin = jaxport.Registry(served.url, token=served.admin)
    new = admin.tokens.create("ci", "write")
    ci = jaxport.Registry(served.url, token=new.secret)
    ci.push(_exported(), "sin", aliases=["prod"])
    ci.alias("sin", "staging", 1)
    admin.delete("sin", force=True)
    events = admin.events()
    assert [(e.actor, e.kind) for e in events[:3]] == [
        ("admin", "delete"), ("ci", "alias"), ("ci", "push"),
    ]  # fmt: skip
    assert events[-1].kind == "token-create"


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.jaxport")) + sorted(CRASHERS.glob("*")),
                         ids=lambda p: p.stem)  # fmt: skip
def test_hostile_uploads_get_typed_errors(db_url, tmp_path, path):
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as s:
        reg = jaxport.Registry(s.url, token=admin_token(db_url, blobs))
        with pytest.raises(jaxport.JaxportError) as e:
            reg.push(path, "hostile")
        assert not isinstance(e.value, jaxport.ServerUnavailableError)
        assert reg.names() == []  # nothing visible, and the server still answers
        assert reg.push(_exported(), "after").created


def test_killed_mid_upload_then_resumes(db_url, tmp_path):
    from jaxport.registry._remote_push import archive_parts

    blobs = str(tmp_path / "blobs")
    rng = np.random.default_rng(0)
    params = {f"l{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(10)}
    model = jaxport.Model(params, {"f": lambda p, x: x @ p["l0"]},
                          {"f": [jax.ShapeDtypeStruct((2, 64), F32)]})  # fmt: skip
    local = archive_parts(model, vjp_order=0, max_size=1 << 30)
    s = start(db_url, blobs, tmp_path / "a.log")
    token = admin_token(db_url, blobs)
    reg = jaxport.Registry(s.url, token=token)
    half = local.parts.parts[: len(local.parts.parts) // 2]
    for p in half:
        reg._backend._http.json(
            "PUT", f"/blobs/{p.digest}", content=bytes(local.chunks.view(p.offset, p.end))
        )

    def stalling():  # a part that never finishes: the server dies while reading it
        yield b"x" * 1000
        time.sleep(30)
        yield b""

    victim = local.parts.parts[-1]

    def upload_victim() -> None:
        auth = {"Authorization": f"Bearer {token}"}
        with contextlib.suppress(httpx.HTTPError):  # the server dies under it
            httpx.put(f"{s.url}/api/v1/blobs/{victim.digest}", content=stalling(),
                      headers=auth, timeout=5)  # fmt: skip

    threading.Thread(target=upload_victim, daemon=True).start()
    time.sleep(0.5)
    s.kill()
    with jaxport.Registry(db_url, blobs=blobs) as direct:
        assert direct.names() == []  # nothing visible
        assert direct.blobs.exists(half[0].digest) and not direct.blobs.exists(victim.digest)
    with serving(db_url, blobs, tmp_path / "b.log") as s2:
        again = jaxport.Registry(s2.url, token=token)
        assert set(again.missing_blobs([p.digest for p in local.parts.parts])) == {
            p.digest for p in local.parts.parts[len(half):]
        }  # fmt: skip
        ref = again.push(model, "resumed")
        assert again.pull_bytes("resumed") == model.dumps() and ref.version == 1


def test_fine_tune_uploads_one_tensor(served):
    reg = jaxport.Registry(served.url, token=served.admin)
    rng = np.random.default_rng(1)
    params = {f"l{i:02d}": rng.standard_normal((128, 128)).astype(np.float32) for i in range(100)}
    spec = {"f": [jax.ShapeDtypeStruct((2, 128), F32)]}
    model = jaxport.Model(params, {"f": lambda p, x: x @ p["l00"]}, spec)
    sent: list[int] = []
    send = reg._backend._http._client.send

    def counting(request, **kw):
        if request.method == "PUT":
            sent.append(len(request.content))
        return send(request, **kw)

    reg._backend._http._client.send = counting
    reg.push(model, "big")
    first = sum(sent)
    sent.clear()
    tuned = dict(params, l42=params["l42"] + 0.5)
    reg.push(model.update_params(tuned), "big")
    assert sum(sent) < 0.02 * first
    assert len(sent) == 2  # the new skeleton and the one tensor


def test_two_server_processes_eight_clients(db_url, tmp_path, request, monkeypatch):
    if not db_url.startswith("postgresql"):
        pytest.skip("two server processes share a PostgreSQL database (SQLite: one writer)")
    s3 = request.getfixturevalue("s3")  # one S3 store (tests/_s3.py: moto's server)
    blobs = s3.url()
    env = {"JAXPORT_BLOBS_OPTIONS": json.dumps(s3.storage_options())}
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", env["JAXPORT_BLOBS_OPTIONS"])
    token = admin_token(db_url, blobs)
    with serving(db_url, blobs, tmp_path / "a.log", env=env) as a, \
         serving(db_url, blobs, tmp_path / "b.log", env=env) as b:  # fmt: skip
        archives = [jaxport.dumps(_exported(f)) for f in (jnp.sin, jnp.cos, jnp.tanh, jnp.exp)]

        def work(i: int) -> list[int]:
            reg = jaxport.Registry((a, b)[i % 2].url, token=token)
            versions = []
            for k in range(4):
                data = archives[(i + k) % 4]
                versions.append(reg.push(data, f"shared{k}").version)
                assert reg.pull_bytes(f"shared{k}", platform="cpu") in archives
            return versions

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(8)))
        reg = jaxport.Registry(a.url, token=token)
        for k in range(4):
            refs = reg.list(f"shared{k}")
            digests = [r.variants[0].digest for r in refs]
            assert len(digests) == len(set(digests)) == 4  # none lost, none twice
            assert [r.version for r in refs] == [1, 2, 3, 4]


def test_webhooks_are_signed_and_retried(db_url, tmp_path):
    received: list[tuple[dict, dict]] = []
    fails = {"left": 2}

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if fails["left"] > 0:
                fails["left"] -= 1
                self.send_response(500)
            else:
                received.append((dict(self.headers), json.loads(body)))
                received[-1][0]["raw"] = body
                self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    secret_file = tmp_path / "hook.key"
    secret_file.write_text("s3cr3t-key\n")
    blobs = str(tmp_path / "blobs")
    extra = ("--webhook", f"http://127.0.0.1:{hook.server_address[1]}/hook",
             "--webhook-secret-file", str(secret_file))  # fmt: skip
    try:
        with serving(db_url, blobs, tmp_path / "serve.log", extra=extra) as s:
            reg = jaxport.Registry(s.url, token=admin_token(db_url, blobs))
            reg.push(_exported(), "sin")
            deadline = time.monotonic() + 20
            while not received and time.monotonic() < deadline:
                time.sleep(0.1)
            log = s.log.read_text()
    finally:
        hook.shutdown()
        hook.server_close()
    headers, event = received[0]
    assert event["kind"] == "push" and event["name"] == "sin" and event["actor"] == "admin"
    expected = hmac.new(b"s3cr3t-key", headers["raw"], hashlib.sha256).hexdigest()
    assert headers["X-Jaxport-Signature"] == f"sha256={expected}"
    assert "s3cr3t" not in log


def test_ranges_etag_and_inspect_of_a_header(served):
    reg = jaxport.Registry(served.url, token=served.admin)
    data = jaxport.dumps(_exported())
    reg.push(data, "sin")
    digest = hashlib.sha256(data).hexdigest()
    auth = {"Authorization": f"Bearer {served.admin}"}
    r = httpx.get(f"{served.url}/api/v1/blobs/{digest}", headers={**auth, "Range": "bytes=0-63"})
    assert r.status_code == 206 and r.content == data[:64]
    assert r.headers["etag"] == f'"{digest}"'
    assert r.headers["content-range"] == f"bytes 0-63/{len(data)}"
    r = httpx.get(
        f"{served.url}/api/v1/blobs/{digest}", headers={**auth, "If-None-Match": f'"{digest}"'}
    )
    assert r.status_code == 304


def test_corrupt_blob_is_never_returned(served):
    reg = jaxport.Registry(served.url, token=served.admin)
    data = jaxport.dumps(_exported())
    reg.push(data, "sin")
    digest = hashlib.sha256(data).hexdigest()
    with jaxport.Registry(served.db_url, blobs=served.blobs) as direct:
        path = direct.blobs.path(digest)
    raw = bytearray(Path(path).read_bytes())
    raw[-1] ^= 1
    Path(path).write_bytes(bytes(raw))
    with pytest.raises(jaxport.IntegrityError):
        reg.pull_bytes("sin")
    assert reg.names() == ["sin"]  # the server keeps answering


def test_cli_against_the_server(served, tmp_path):
    env = {**os.environ, "JAXPORT_TOKEN": served.admin, "COLUMNS": "80"}
    archive = tmp_path / "sin.jaxport"
    jaxport.save(_exported(), archive)

    def cli(*args: str, token: str | None = served.admin) -> subprocess.CompletedProcess[str]:
        e = dict(env)
        if token is None:
            e.pop("JAXPORT_TOKEN")
        else:
            e["JAXPORT_TOKEN"] = token
        return subprocess.run([JAXPORT, "--registry", served.url, *args], env=e,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    assert cli("push", str(archive), "--name", "sin", "--alias", "prod").returncode == 0
    listed = cli("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    pulled = cli("pull", "sin@prod", "--output", str(tmp_path / "out.jaxport"))
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "out.jaxport").read_bytes() == archive.read_bytes()
    log = cli("log", "--json")
    newest = json.loads(log.stdout)["events"][0]
    assert newest["kind"] == "push" and newest["at"].endswith("+00:00")  # ISO 8601, UTC
    made = cli("token", "create", "reader", "--scope", "read")
    assert made.returncode == 0 and made.stdout.strip().startswith("jxp_")
    denied = cli("push", str(archive), "--name", "x", token=made.stdout.strip())
    assert denied.returncode == 1 and "PermissionDeniedError" in denied.stderr
    assert "Traceback" not in denied.stderr and made.stdout.strip() not in denied.stderr
    anonymous = cli("ls", token=None)
    assert anonymous.returncode == 1 and "AuthenticationError" in anonymous.stderr


def test_open_read_server(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log", extra=("--open-read",)) as s:
        anyone = jaxport.Registry(s.url, token="")
        assert anyone.names() == []
        with pytest.raises(jaxport.AuthenticationError):
            anyone.push(_exported(), "sin")


def test_secrets_stay_out_of_messages(served):
    reg = jaxport.Registry(served.url, token=served.admin)
    assert served.admin not in repr(reg) and served.admin not in reg.url
    down = jaxport.Registry("http://user:pw@127.0.0.1:9/", token="jxp_abc")
    down._backend._http._client.timeout = httpx.Timeout(0.5)
    with pytest.raises(jaxport.ServerUnavailableError) as e:
        down.names()
    assert "pw" not in str(e.value) and "jxp_abc" not in str(e.value)
    assert sys.modules  # the error is typed, not httpx's
