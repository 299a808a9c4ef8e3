"""The jax-release watcher (``Registry.watch_jax``, ``jaxport watch``, ``audit/_watch.py``,
``registry/_releases.py``) and ``jaxport audit forecast`` (``registry/_forecast.py``).

No network: each test serves a PEP 691 package index on 127.0.0.1 (``Index``: a
``ThreadingHTTPServer`` thread) announcing releases the test makes up, e.g. jax 0.13.0 published
2027-01-20, after the 6-month window of everything jax 0.10.2 wrote (it ends 2026-12-17). Every
registry test runs on SQLite and PostgreSQL (``db_url``); the queue tests need
``JAXPORT_TEST_POSTGRES_URL`` and run real ``jaxport audit-worker`` processes.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import sqlalchemy as sa

import jaxport
from jaxport import AuditError, PermissionDeniedError, UnsupportedFeatureError
from jaxport.audit import _watch
from jaxport.server._webhooks import signature

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
POSTGRES_URL_ENV = "JAXPORT_TEST_POSTGRES_URL"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_SPEC = jax.ShapeDtypeStruct((4,), jnp.float32)
#: jax 0.10.2 (the installed jax, which writes the pushed archives) was published 2026-06-17.
ENDS = "2026-12-17"


class Index:
    """A PEP 691 index on 127.0.0.1: ``releases[package]`` lists ``(version, upload time,
    yanked)``; ``answer`` (when set) replaces the page: ``(status, content type, body)``."""

    def __init__(self) -> None:
        self.releases: dict[str, list[tuple[str, str | None, bool]]] = {"jax": [], "jaxlib": []}
        self.answer: tuple[int, str, bytes] | None = None
        self.requests: list[dict[str, str]] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append({"path": self.path, **dict(self.headers)})
                status, kind, body = index.answer or index.page(self.path.strip("/").split("/")[-1])
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def announce(self, package: str, version: str, uploaded: str | None, yanked: bool = False):
        self.releases[package].append((version, uploaded, yanked))

    def page(self, package: str) -> tuple[int, str, bytes]:
        files = []
        for version, uploaded, yanked in self.releases.get(package, []):
            for name in (f"{package}-{version}-py3-none-any.whl", f"{package}-{version}.tar.gz"):
                entry: dict[str, Any] = {"filename": name, "url": f"/files/{name}",
                                         "hashes": {}, "yanked": yanked}  # fmt: skip
                if uploaded is not None:
                    entry["upload-time"] = uploaded
                files.append(entry)
        doc = {"meta": {"api-version": "1.1"}, "name": package, "files": files}
        return 200, JSON_TYPE, json.dumps(doc).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index()
    try:
        yield served
    finally:
        served.close()


def _push_three(reg: Any) -> list[str]:
    """Three versions of ``mlp``, one variant each, written by the installed jax."""
    fns = (lambda x: x * 2, lambda x: x + 1, lambda x: x - 3)
    out = []
    for fn in fns:
        ref = reg.push(jax.export.export(jax.jit(fn))(_SPEC), "mlp")
        out.append(ref.variants[0].digest)
    return out


def _update_variant(reg: Any, digest: str, **values: Any) -> None:
    from jaxport.registry._models import VariantRow

    with reg._backend.engine.begin() as conn:
        conn.execute(sa.update(VariantRow).where(VariantRow.digest == digest).values(**values))


# -- the index -------------------------------------------------------------------------------


def test_read_releases_parses_pep691(index):
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")
    index.announce("jax", "0.13.0rc1", "2026-12-01T10:00:00.123456Z")
    index.announce("jax", "0.12.2", "2026-11-25T10:00:00Z", yanked=True)
    index.announce("jax", "0.9.0", None)
    found = _watch.read_releases(index.url, "jax")
    assert [r.version for r in found] == ["0.9.0", "0.12.1", "0.12.2", "0.13.0rc1"]
    by = {r.version: r for r in found}
    assert by["0.9.0"].uploaded_at is None
    noon = datetime.datetime(2026, 11, 20, 10, tzinfo=datetime.UTC)
    assert by["0.12.1"].uploaded_at == noon.timestamp()
    assert by["0.12.2"].yanked and not by["0.12.1"].yanked
    assert by["0.13.0rc1"].prerelease and not by["0.12.1"].prerelease
    assert (
        index.requests[-1]["Accept"] == JSON_TYPE and index.requests[-1]["path"] == "/simple/jax/"
    )


def test_newer_releases_skip_prereleases_and_yanked(index):
    for version, yanked in (("0.12.0", False), ("0.12.1", False), ("0.12.2", True),
                            ("0.13.0rc1", False)):  # fmt: skip
        index.announce("jax", version, "2026-11-20T10:00:00Z", yanked=yanked)
    listed = _watch.read_releases(index.url, "jax")
    assert [r.version for r in _watch.newer_releases(listed, set())] == ["0.12.1"]
    assert [r.version for r in _watch.newer_releases(listed, {"0.11.0"})] == ["0.12.0", "0.12.1"]
    pre = _watch.newer_releases(listed, {"0.12.1"}, prereleases=True)
    assert [r.version for r in pre] == ["0.13.0rc1"]
    assert _watch.newer_releases(listed, {"0.12.1"}) == []


_LONG = json.dumps({"meta": {"api-version": "1.0"}, "files": [], "pad": "x" * 5000}).encode()


@pytest.mark.parametrize(
    "answer, limit, message",
    [
        ((500, JSON_TYPE, b"{}"), None, "answered HTTP 500"),
        ((200, "text/html", b"<html>"), None, "does not speak the JSON simple API"),
        ((200, JSON_TYPE, b"{not json"), None, "does not parse"),
        ((200, JSON_TYPE, b"[1, 2]"), None, "not a JSON object"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "2.0"}, "files": []}'), None, "not 1.x"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "1.0"}, "files": {}}'), None, "no list"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "1.0"}, "files": [{"filename": 3}]}'),
         None, "without a usable filename"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "1.0"}, "files": '
                          b'[{"filename": "numpy-1.0-py3-none-any.whl"}]}'),
         None, "on the page of jax"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "1.0"}, "files": '
                          b'[{"filename": "jax-x.y-py3-none-any.whl"}]}'), None, "does not parse"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "1.0"}, "files": [{"filename": '
                          b'"jax-1.0.tar.gz", "upload-time": "yesterday"}]}'),
         None, "not ISO 8601"),
        ((200, JSON_TYPE, _LONG), ("MAX_ANSWER_BYTES", 1000), "more than 1,000 bytes"),
        ((200, JSON_TYPE, b'{"meta": {"api-version": "1.0"}, "files": [{}, {}, {}]}'),
         ("MAX_FILES", 2), "more than 2"),
    ],
)  # fmt: skip
def test_hostile_index_answers_are_audit_errors(index, monkeypatch, answer, limit, message):
    index.answer = answer
    if limit is not None:
        monkeypatch.setattr(_watch, *limit)
    url = index.url.replace("http://", "http://user:s3cret@")
    with pytest.raises(AuditError, match="the package index") as caught:
        _watch.read_releases(url, "jax")
    assert message in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_index_url_follows_pip(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_INDEX_URL", "http://mirror.example/simple/ http://other/")
    assert _watch.index_url() == "http://mirror.example/simple/"
    assert _watch.index_url("http://given/simple/") == "http://given/simple/"
    monkeypatch.delenv("PIP_INDEX_URL")
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = http://configured.example/simple/\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    assert _watch.index_url() == "http://configured.example/simple/"
    config.write_text("[global]\ntimeout = 5\n")
    assert _watch.index_url() == _watch.DEFAULT_INDEX


def test_an_index_that_hangs_is_given_up(index, monkeypatch):
    original = index.page

    def slow(package: str) -> tuple[int, str, bytes]:
        time.sleep(2)
        return original(package)

    monkeypatch.setattr(index, "page", slow)
    monkeypatch.setattr(_watch, "TIMEOUT", 0.3)
    with pytest.raises(AuditError, match="cannot be read: ReadTimeout"):
        _watch.read_releases(index.url, "jax")


def test_unreachable_or_non_http_index(index):
    with pytest.raises(AuditError, match="http"):
        _watch.read_releases("file:///opt/pypi/simple", "jax")
    index.close()
    with pytest.raises(AuditError, match="cannot be read"):
        _watch.read_releases(index.url, "jax")


# -- the watch on a registry -----------------------------------------------------------------


def test_watch_judges_each_new_release_once(registry, index):
    _push_three(registry)
    index.announce("jax", "0.10.1", "2026-05-20T10:00:00Z")
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")  # inside the window
    index.announce("jaxlib", "0.12.1", "2026-11-20T10:00:00Z")
    first = registry.watch_jax(index_url=index.url)
    assert [(r.package, r.version) for r in first.new] == [("jax", "0.12.1"), ("jaxlib", "0.12.1")]
    (summary,) = first.releases
    assert (summary.version, summary.published, summary.variants) == ("0.12.1", "2026-11-20", 3)
    assert (summary.ok, summary.expires, summary.refused, summary.rescue) == (3, 0, 0, 0)
    assert "jaxport audit run --jax 0.12.1" in summary.queue and summary.enqueued == 0
    assert (
        summary.judged_by
        == f"the installed jax {jax.__version__}'s capabilities projected to 0.12.1"
    )

    index.announce("jax", "0.13.0", "2027-01-20T10:00:00Z")  # past every window
    index.announce("jax", "0.13.1rc1", "2027-02-01T10:00:00Z")
    index.announce("jax", "0.13.1", "2027-02-02T10:00:00Z", yanked=True)
    dry = registry.watch_jax(index_url=index.url, dry_run=True)
    assert [r.version for r in dry.new] == ["0.13.0"] and dry.dry_run
    second = registry.watch_jax(index_url=index.url)
    (summary,) = second.releases
    assert (summary.ok, summary.expires, summary.refused, summary.rescue) == (0, 3, 0, 3)
    assert summary.expiring == {ENDS: 3}
    assert registry.watch_jax(index_url=index.url).new == []

    events = [e for e in registry.events(limit=20) if e.kind == "jax-release"]
    assert [e.detail["version"] for e in events] == ["0.13.0", "0.12.1"]  # the dry run: none
    assert events[0].detail["expiring"] == {ENDS: 3} and events[0].detail["rescue"] == 3
    assert events[0].detail["index"] == index.url and events[0].name is None
    with registry._backend.engine.connect() as conn:
        seen = conn.execute(sa.text("SELECT package, version FROM jax_releases")).all()
    assert sorted(seen) == [("jax", "0.12.1"), ("jax", "0.13.0"), ("jaxlib", "0.12.1")]


def test_static_refusals_and_rescue(registry, index):
    ok, hlo_only, old_convention = _push_three(registry)
    # shardings for 2 devices written by jax 0.8.1 (HloSharding form only), and a calling
    # convention no jax since 0.4.30 runs
    _update_variant(registry, hlo_only, jax_version="0.8.3", sharded=True, nr_devices=2)
    _update_variant(registry, old_convention, calling_convention_version=3)
    index.announce("jax", "0.11.2", "2026-09-17T10:00:00Z")
    (summary,) = registry.watch_jax(index_url=index.url).releases
    assert (summary.ok, summary.expires, summary.refused, summary.rescue) == (1, 0, 2, 1)
    reasons = " | ".join(summary.refusals)
    assert "HloSharding form only" in reasons and "calling convention version 3" in reasons
    rows = {r.digest: r for r in registry.forecast("mlp")}
    assert rows[ok].outlook == "ok" and rows[hlo_only].outlook == "refused"
    assert "HloSharding" in rows[hlo_only].reason
    assert rows[hlo_only].window_ends == "2026-07-29"  # 0.8.3: 2026-01-29 + 6 months


def test_a_ready_environment_gives_the_release_its_own_capabilities(registry, index, tmp_path):
    """A release whose audit environment is ready here is judged by asking a worker there (an
    environment whose interpreter is this one, standing for jax 0.12.1's)."""
    from jaxport.registry import default_home

    _push_three(registry)
    _ready_environment(default_home(), "0.12.1")
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")
    (summary,) = registry.watch_jax(index_url=index.url, dry_run=True).releases
    assert summary.judged_by == f"the capabilities of its audit environment (jax {jax.__version__})"
    assert (summary.ok, summary.refused) == (3, 0)


def test_forecast_from_findings_and_the_newest_release(registry, index):
    digests = _push_three(registry)
    before = registry.forecast()
    assert [(r.outlook, r.newest_release) for r in before] == [("", None)] * 3
    assert all(r.window_ends == ENDS and r.runs_on == () for r in before)
    registry.audit("mlp:1")  # full, with the installed jax: ok
    index.announce("jax", "0.13.0", "2027-01-20T10:00:00Z")
    registry.watch_jax(index_url=index.url)
    rows = registry.forecast("mlp")
    assert [r.version for r in rows] == [1, 2, 3] and rows[0].digest == digests[0]
    assert rows[0].runs_on == (jax.__version__,) and rows[1].runs_on == ()
    assert {(r.newest_release, r.outlook) for r in rows} == {("0.13.0", "expires")}
    assert ENDS in rows[0].reason
    assert [r.version for r in registry.forecast("mlp:2")] == [2]
    with pytest.raises(jaxport.NotFoundError):
        registry.forecast("nothing")


# -- through a registry server ---------------------------------------------------------------


class Hook:
    """A webhook receiver on 127.0.0.1: the bodies POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.signed: list[tuple[bytes, str]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                hook.signed.append((raw, self.headers["X-Jaxport-Signature"]))
                hook.bodies.append(json.loads(raw))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        for _ in range(300):  # bounded: 30 s
            if len(self.bodies) >= count:
                break
            time.sleep(0.1)
        return self.bodies


def test_watch_and_forecast_through_a_server(db_url, tmp_path, index):
    from _server import admin_token, serving

    blobs = str(tmp_path / "blobs")
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as direct:
        _push_three(direct)
        direct.push(jax.export.export(jax.jit(jnp.sin))(_SPEC), "other")
    admin = admin_token(db_url, blobs)
    prefixed = admin_token(db_url, blobs, "team", "admin", prefixes=["other"])
    reader = admin_token(db_url, blobs, "reader", "read", prefixes=["mlp"])
    index.announce("jax", "0.13.0", "2027-01-20T10:00:00Z")
    hook = Hook()
    env = {"PIP_INDEX_URL": index.url}
    with serving(db_url, blobs, tmp_path / "log", extra=("--webhook", hook.url), env=env) as s:
        with jaxport.Registry(s.url, token=prefixed) as reg, pytest.raises(PermissionDeniedError):
            reg.watch_jax()
        with jaxport.Registry(s.url, token=admin) as reg:
            with pytest.raises(UnsupportedFeatureError, match="index_url"):
                reg.watch_jax(index_url=index.url)
            report = reg.watch_jax()
            assert report.index == index.url and [r.version for r in report.new] == ["0.13.0"]
            assert (report.releases[0].variants, report.releases[0].expires) == (4, 4)
            remote = reg.forecast()
        with jaxport.Registry(s.url, token=reader) as reg:
            assert [r.name for r in reg.forecast()] == ["mlp"] * 3
            with pytest.raises(PermissionDeniedError):
                reg.forecast("other")
        (body,) = [b for b in hook.wait_for(1) if b["kind"] == "jax-release"]
        assert body["detail"]["expires"] == 4 and body["actor"] == "admin"
    with jaxport.Registry(db_url, blobs=blobs) as direct:
        assert remote == direct.forecast()


def test_an_index_that_fails_is_a_502_through_a_server_asked_once(db_url, tmp_path, index):
    """The server's index answering 500: ``POST /api/v1/watch`` is a 502 whose body is the
    API's error (``PackageIndexError``, the index without its credentials), and the client
    raises it without asking again (the server is fine: its upstream failed)."""
    import httpx
    from _server import admin_token, serving

    blobs = str(tmp_path / "blobs")
    jaxport.Registry(db_url, blobs=blobs, upgrade=True).close()
    admin = admin_token(db_url, blobs)
    index.answer = (500, "text/plain", b"down")
    port = index.url.split(":")[2].split("/")[0]
    env = {"PIP_INDEX_URL": f"http://pip:hunter2@127.0.0.1:{port}/simple/?token=s3cret"}
    with serving(db_url, blobs, tmp_path / "log", env=env) as s:
        with jaxport.Registry(s.url, token=admin) as reg, pytest.raises(AuditError) as caught:
            reg.watch_jax()
        assert type(caught.value) is jaxport.PackageIndexError and len(index.requests) == 1
        said = f"the package index http://127.0.0.1:{port}/simple/ answered HTTP 500"
        assert str(caught.value).startswith(said)
        auth = {"Authorization": f"Bearer {admin}"}
        answer = httpx.post(f"{s.url}/api/v1/watch", json={}, headers=auth, timeout=60)
    assert answer.status_code == 502 and "hunter2" not in answer.text
    assert "s3cret" not in answer.text
    assert answer.json() == {"error": {"type": "PackageIndexError", "message": str(caught.value),
                                       "attrs": {}}}  # fmt: skip


# -- the command line ------------------------------------------------------------------------


def _cli(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_cli_watch_and_forecast(db_url, tmp_path, index):
    blobs = str(tmp_path / "blobs")
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
        _push_three(reg)
    env = {**os.environ, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": blobs, "COLUMNS": "80",
           "PIP_INDEX_URL": index.url}  # fmt: skip
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")
    hook, secret = Hook(), tmp_path / "secret"
    secret.write_text("hook-key\n")
    text = _cli(env, "watch", "--webhook", hook.url, "--webhook-secret-file", str(secret)).stdout
    assert "jax 0.12.1 (published 2026-11-20): 3 variant(s)" in text
    ((raw, signed),) = hook.signed  # delivered before the command returned
    assert json.loads(raw)["kind"] == "jax-release" and json.loads(raw)["detail"]["ok"] == 3
    assert signed == signature("hook-key", raw)
    assert "stay ok 3, expire 0, refused 0, need rescue 0" in text
    assert "no new jax or jaxlib release" in _cli(env, "watch").stdout
    index.announce("jax", "0.13.0", "2027-01-20T10:00:00Z")
    dry = json.loads(_cli(env, "watch", "--dry-run", "--json").stdout)
    assert dry["dry_run"] and dry["releases"][0]["expiring"] == {ENDS: 3}
    report = json.loads(_cli(env, "watch", "--json", "--index-url", index.url).stdout)
    assert report["releases"][0]["rescue"] == 3

    forecast = _cli(env, "audit", "forecast").stdout
    assert "jax 0.13.0" in forecast and forecast.count("expires") == 3
    assert max(len(line) for line in forecast.splitlines()) <= 80
    rows = json.loads(_cli(env, "audit", "forecast", "mlp:1", "--json").stdout)
    assert [(r["version"], r["outlook"], r["window_ends"]) for r in rows] == [(1, "expires", ENDS)]

    index.answer = (200, "text/html", b"<html>")
    failed = _cli(env, "watch", code=1)
    assert failed.stderr.startswith("PackageIndexError: the package index")
    assert failed.stdout == ""
    error = json.loads(_cli(env, "watch", "--json", code=1).stderr)
    assert error["error"]["type"] == "PackageIndexError"


# -- the audit queue (PostgreSQL, real workers) ----------------------------------------------


def test_cli_watch_exits_1_when_a_webhook_does_not_take_the_event(db_url, tmp_path, index):
    """Two webhooks, the second on a closed port of 127.0.0.1: the first gets the event, the
    second fails its 6 tries (about 15 s); the report is printed all the same (``--json``:
    the document on stdout), then one line on stderr naming the receiver by scheme, host and
    port (no user, path or query: they may be its secret), exit 1. The release is recorded."""
    import socket

    blobs = str(tmp_path / "blobs")
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as reg:
        reg.push(jax.export.export(jax.jit(jnp.sin))(_SPEC), "mlp")
    env = {**os.environ, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": blobs,
           "PIP_INDEX_URL": index.url}  # fmt: skip
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = f"http://hook:hunter2@127.0.0.1:{port}/services/T0/s3cret?token=abc"
    hook = Hook()
    failed = _cli(env, "watch", "--json", "--webhook", hook.url, "--webhook", dead, code=1)
    assert json.loads(failed.stdout)["releases"][0]["version"] == "0.12.1"
    assert [b["kind"] for b in hook.bodies] == ["jax-release"]
    error = json.loads(failed.stderr)["error"]
    assert error["type"] == "WebhookError" and failed.stderr.count("\n") == 1
    assert f"to webhook 2 http://127.0.0.1:{port}: ConnectError after 6 tries" in error["message"]
    assert not any(s in failed.stderr for s in ("hunter2", "s3cret", "services", "abc"))
    assert "no new jax or jaxlib release" in _cli(env, "watch").stdout  # recorded as seen
    index.announce("jax", "0.13.0", "2027-01-20T10:00:00Z")
    text = _cli(env, "watch", "--webhook", dead, code=1)
    assert "jax 0.13.0 (published 2027-01-20)" in text.stdout
    assert text.stderr.startswith("WebhookError: 1 webhook delivery(ies) failed: event ")
    assert text.stderr.count("\n") == 1


@pytest.fixture
def pg_env(tmp_path):
    """The environment of a PostgreSQL registry in a fresh schema, upgraded by ``jaxport db
    upgrade`` (the audit queue installed), with its own ``JAXPORT_HOME``."""
    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set: the audit queue needs PostgreSQL")
    base = os.environ[POSTGRES_URL_ENV]
    schema = f"w_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    env = {**os.environ, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": str(tmp_path / "blobs"),
           "JAXPORT_HOME": str(tmp_path / "home"), "COLUMNS": "80"}  # fmt: skip
    try:
        _cli(env, "db", "upgrade")
        yield env
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def _ready_environment(home: Path, release: str) -> None:
    """An audit environment for ``release`` as ``audit/_envs.py`` leaves a complete one (its
    interpreter: this one, whose jax is ``release``), so a worker needs no package index."""
    directory = home / "envs" / f"jax-{release}"
    (directory / "bin").mkdir(parents=True)
    python = directory / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    marker = {"release": release, "jaxport": jaxport.__version__, "base_python": sys.executable}
    (directory / "jaxport-env.json").write_text(json.dumps(marker))


def test_watch_enqueues_full_audits_for_real_workers(pg_env, index):
    with jaxport.Registry(pg_env["JAXPORT_REGISTRY"], blobs=pg_env["JAXPORT_BLOBS"]) as reg:
        digests = _push_three(reg)
    release = jax.__version__  # the release "announced": its environment is this one
    _ready_environment(Path(pg_env["JAXPORT_HOME"]), release)
    index.announce("jax", release, "2026-06-17T10:00:00Z")
    report = json.loads(_cli(pg_env, "watch", "--index-url", index.url, "--json").stdout)
    (summary,) = report["releases"]
    assert summary["enqueued"] == 3 and "3 full audit job(s) enqueued" in summary["queue"]
    worker = _cli(pg_env, "audit-worker", "--platform", "cpu", "--until-idle",
                  "--stalled-after", "2", "--json")  # fmt: skip
    done = json.loads(worker.stdout)
    assert sorted(d["finding"]["digest"] for d in done) == sorted(digests)
    assert {(d["finding"]["jax_version"], d["finding"]["status"], d["recorded"]) for d in done} == {
        (release, "ok", True)
    }
    rows = json.loads(_cli(pg_env, "audit", "forecast", "--json").stdout)
    assert {tuple(r["runs_on"]) for r in rows} == {(release,)}


def test_watch_enqueues_one_full_audit_per_platform(pg_env, index):
    """A variant for cpu and tpu: one job per platform, each on its platform's queue, in the
    new release's environment (a tpu worker elsewhere takes its job)."""
    exp = jax.export.export(jax.jit(jnp.sin), platforms=("cpu", "tpu"))
    with jaxport.Registry(pg_env["JAXPORT_REGISTRY"], blobs=pg_env["JAXPORT_BLOBS"]) as reg:
        digest = reg.push(exp(jax.ShapeDtypeStruct((3,), jnp.float32)), "multi").digests[0]
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")
    report = json.loads(_cli(pg_env, "watch", "--index-url", index.url, "--json").stdout)
    (summary,) = report["releases"]
    assert (summary["ok"], summary["enqueued"]) == (1, 2), summary
    engine = sa.create_engine(pg_env["JAXPORT_REGISTRY"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT queue_name, args FROM procrastinate_jobs")).all()
    finally:
        engine.dispose()
    assert sorted((q, a["digest"], a["platform"], a["jax"]) for q, a in rows) == [
        ("audit-cpu", digest, "cpu", "0.12.1"),
        ("audit-tpu", digest, "tpu", "0.12.1"),
    ]


def test_a_worker_watches_periodically(pg_env, index):
    index.announce("jax", "0.12.1", "2026-11-20T10:00:00Z")
    env = {**pg_env, "JAXPORT_WATCH_CRON": "* * * * * */2", "PIP_INDEX_URL": index.url}
    worker = subprocess.Popen(
        [JAXPORT, "audit-worker", "--platform", "cpu", "--stalled-after", "2"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        with jaxport.Registry(pg_env["JAXPORT_REGISTRY"], blobs=pg_env["JAXPORT_BLOBS"]) as reg:
            events: list[Any] = []
            for _ in range(600):  # bounded: 60 s
                events = [e for e in reg.events(limit=10) if e.kind == "jax-release"]
                if events or worker.poll() is not None:
                    break
                time.sleep(0.1)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert [e.detail["version"] for e in events] == ["0.12.1"], err.decode()[-2000:]
    assert events[0].actor.startswith("local:")
