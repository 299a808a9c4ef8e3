"""Issue 26's server routes against valid tokens used where they must not reach: another team's
tokens (prefix-limited, each scope), a write token of the same team, a prefix-limited admin;
and odd bodies on every new route. Each attack is a typed 4xx (``server/_errors.py``), never a
500 (the one 5xx here: the server's own package index cannot be read, a 502
``PackageIndexError``); no answer names another team's names, versions or digests; the server
never reads a package index a client names, and no secret (a token, an index password) is in
any answer or in the server's log.

One ``jaxport serve`` per database (SQLite, and PostgreSQL where the fixture gives it) serves
the module: ``team-a-m`` (1: sin, ``@prod``, protected by a goldens gate; 2: cos with golden
examples), ``team-b-m:1`` (derived from ``team-a-m:1`` by an unprefixed pusher),
``team-b-old`` (1 soft-deleted by a retention run, 2 live); tokens ``admin`` (unprefixed),
``b-read``, ``b-write``, ``b-admin`` (prefix ``team-b-``) and ``a-write`` (prefix ``team-a-``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import uuid

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _server import Server, admin_token, serving

import jaxport

F32 = jnp.float32
POSTGRES_URL_ENV = "JAXPORT_TEST_POSTGRES_URL"
#: The password of the package index the server is configured with (never to be shown).
INDEX_PASSWORD = "s3cretIndexPassw0rd"


def _exported(fn):
    return jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((3,), F32))


@dataclasses.dataclass
class Target:
    server: Server
    tokens: dict[str, str]
    a_digest: str  # the archive of team-a-m:1
    listener: Listener

    @property
    def api(self) -> str:
        return f"{self.server.url}/api/v1"

    def call(self, who: str, method: str, path: str, **kw) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kw.pop("headers", {})}
        return httpx.request(method, self.api + path, headers=headers, timeout=120, **kw)


class Listener:
    """A TCP port that counts the connections made to it (a URL a client names)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing answers there


def _on_postgres(statement: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(os.environ[POSTGRES_URL_ENV])
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def target(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("issue26-attacks")
    schema = None
    if request.param == "sqlite":
        db = f"sqlite:///{tmp / 'registry.db'}"
    else:
        if not os.environ.get(POSTGRES_URL_ENV):
            pytest.skip(f"{POSTGRES_URL_ENV} is not set")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        _on_postgres(f"CREATE SCHEMA {schema}")
        base = os.environ[POSTGRES_URL_ENV]
        db = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    blobs = str(tmp / "blobs")
    golden = [jaxport.Example((np.ones(3, np.float32),))]
    with jaxport.Registry(db, blobs=blobs, upgrade=True) as reg:
        a1 = reg.push(_exported(jnp.sin), "team-a-m", aliases=["prod"])
        reg.push(_exported(jnp.cos), "team-a-m", examples=golden)
        reg.protect("team-a-m", "prod", require_goldens=True)
        reg.push(_exported(jnp.tanh), "team-b-m", derived_from="team-a-m:1")
        reg.push(_exported(jnp.exp), "team-b-old")
        reg.push(_exported(jnp.abs), "team-b-old")
        reg.set_retention_policy("team-a-", keep_last=5)
        reg.set_retention_policy("team-b-old", keep_last=1, keep_ok_per_target=False)
        assert [(d.name, d.version) for d in reg.retain("team-b-old").deleted] == [
            ("team-b-old", 1)
        ]
    tokens = {"admin": admin_token(db, blobs)}
    for who, scope in (("b-read", "read"), ("b-write", "write"), ("b-admin", "admin")):
        tokens[who] = admin_token(db, blobs, who, scope, prefixes=["team-b-"])
    tokens["a-write"] = admin_token(db, blobs, "a-write", "write", prefixes=["team-a-"])
    listener = Listener()
    index = f"http://pip:{INDEX_PASSWORD}@127.0.0.1:{_dead_port()}/simple/"
    env = {"PIP_INDEX_URL": index}
    try:
        with serving(db, blobs, tmp / "serve.log", env=env) as server:
            yield Target(server, tokens, a1.variants[0].digest, listener)
    finally:
        listener.sock.close()
        if schema is not None:
            _on_postgres(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def t(target):
    """The module's server; afterwards its log holds no traceback, internal error or secret."""
    start = target.server.log.stat().st_size
    yield target
    log = target.server.log.read_bytes()[start:].decode("utf-8", "replace")
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    assert not any(s in log for s in (*target.tokens.values(), INDEX_PASSWORD))


def _typed(r: httpx.Response, status: int, kind: str) -> dict:
    """The error of a typed answer: ``status`` and the ``JaxportError`` subclass ``kind``."""
    assert r.status_code == status, (r.status_code, r.text[:500])
    error = r.json()["error"]
    assert set(error) == {"type", "message", "attrs"} and error["type"] == kind, error
    return error


# -- another team's valid tokens --------------------------------------------------------------

DENIED = "PermissionDeniedError"
CROSS_TEAM = [
    # protected aliases: read, protect, unprotect, override
    ("b-read", "GET", "/gates/team-a-m", None),
    ("b-read", "GET", "/gates/team-a-m/prod?version=1", None),
    ("b-admin", "PUT", "/gates/team-a-m/prod", {"require_goldens": True}),
    ("b-admin", "PUT", "/gates/team-b-m/prod", {"require_goldens": True}),  # its own, still no
    ("b-admin", "DELETE", "/gates/team-a-m/prod", None),
    ("b-write", "PUT", "/aliases/team-a-m/prod", {"version": 1, "override": True, "reason": "x"}),
    ("a-write", "PUT", "/aliases/team-a-m/prod", {"version": 1, "override": True, "reason": "x"}),
    ("b-admin", "PUT", "/aliases/team-b-m/x", {"version": 1, "override": True, "reason": "x"}),
    # lineage, forecast
    ("b-read", "GET", "/lineage?reference=team-a-m:1", None),
    ("b-read", "GET", "/forecast?reference=team-a-m", None),
    # fleet rescue: goldens, events
    ("b-read", "GET", "/rescue/examples/team-a-m/2", None),
    ("b-read", "GET", "/rescue/examples/team-a-m/2/blob", None),
    ("b-write", "POST", "/rescue/events", {"name": "team-a-m", "version": 1, "detail": {}}),
    ("b-read", "POST", "/rescue/events", {"name": "team-b-m", "version": 1, "detail": {}}),
    # retention: policies, runs, restore
    ("b-write", "GET", "/retention/policies", None),
    ("b-admin", "PUT", "/retention/policies/team-a-", {"keep_last": 1}),
    ("b-admin", "PUT", "/retention/policies/team-", {"keep_last": 1}),
    ("b-admin", "DELETE", "/retention/policies/team-a-", None),
    ("b-admin", "POST", "/retention/runs", {"dry_run": True}),
    ("b-admin", "POST", "/retention/runs", {"prefix": "team-a-", "dry_run": True}),
    ("b-admin", "POST", "/retention/runs", {"prefix": "team", "dry_run": True}),
    ("b-admin", "POST", "/retention/restore", {"name": "team-a-m", "version": 1}),
    ("b-write", "POST", "/retention/restore", {"name": "team-b-old", "version": 1}),
    # the watcher: store-wide
    ("b-admin", "POST", "/watch", {"dry_run": True}),
    ("b-write", "POST", "/watch", {"dry_run": True}),
]


@pytest.mark.parametrize(("who", "method", "path", "body"), CROSS_TEAM)
def test_a_token_beyond_its_scope_or_prefixes_is_refused(t, who, method, path, body):
    r = t.call(who, method, path, json=body)
    _typed(r, 403, DENIED)
    assert t.a_digest[:12] not in r.text


@pytest.mark.parametrize("page", ["/names/team-a-m", "/names/team-a-m/2", "/names/team-a-m/matrix"])
def test_another_teams_pages_are_refused(t, page):
    r = httpx.get(t.server.url + page, cookies={"jaxport_token": t.tokens["b-read"]})
    assert r.status_code == 403 and "team-a-m:" not in r.text


def test_a_push_through_the_client_meets_the_gates_of_its_aliases(t):
    """A writer of the team pushing with a protected alias through ``Registry(url)``: the
    version is stored, the alias stays where it was (``GateError``), and no override is its."""
    with jaxport.Registry(t.server.url, token=t.tokens["a-write"]) as client:
        before = client.aliases("team-a-m")["prod"]
        with pytest.raises(jaxport.GateError, match="goldens"):
            client.push(_exported(jnp.floor), "team-a-m", aliases=["prod"])
        assert client.aliases("team-a-m")["prod"] == before
        with pytest.raises(jaxport.PermissionDeniedError):
            client.alias("team-a-m", "prod", 1, override=True, reason="mine")
        assert client.aliases("team-a-m")["prod"] == before


def test_a_move_of_a_protected_alias_meets_its_gates_for_a_writer_of_the_team(t):
    moved = t.call("a-write", "PUT", "/aliases/team-a-m/prod", json={"version": 2})  # goldens
    assert moved.status_code == 204, moved.text
    r = t.call("a-write", "PUT", "/aliases/team-a-m/prod", json={"version": 1})  # no goldens
    error = _typed(r, 409, "GateError")
    assert [f[0] for f in error["attrs"]["failures"]] == ["goldens"]
    gates = t.call("a-write", "GET", "/gates/team-a-m").json()
    assert [(g["gates"]["alias"], g["version"]) for g in gates] == [("prod", 2)]
    # the override's flag is refused before the move, even where the gates would pass
    _typed(t.call("a-write", "PUT", "/aliases/team-a-m/prod",
                  json={"version": 2, "override": True, "reason": "x"}), 403, DENIED)  # fmt: skip


def test_what_a_team_sees_holds_no_other_names(t):
    """Lineage, forecast, retention policies and plans, and the event log (API and page) show
    a prefix-limited token its names only: ``team-b-m:1`` derives from ``team-a-m:1``, which
    its push event records."""
    lineage = t.call("b-read", "GET", "/lineage", params={"reference": "team-b-m:1"})
    assert lineage.status_code == 200 and lineage.json()["ancestors"][0]["state"] == "hidden"
    forecast = t.call("b-read", "GET", "/forecast").json()
    assert {f["name"] for f in forecast} == {"team-b-m", "team-b-old"}
    policies = t.call("b-admin", "GET", "/retention/policies").json()
    assert [p["prefix"] for p in policies] == ["team-b-old"]
    plan = t.call("b-admin", "POST", "/retention/runs", json={"prefix": "team-b-", "dry_run": True})
    assert plan.status_code == 200
    events = t.call("b-read", "GET", "/events")
    assert events.status_code == 200
    assert {e["name"] for e in events.json()} == {"team-b-m", "team-b-old"}
    push = next(e for e in events.json() if e["name"] == "team-b-m" and e["kind"] == "push")
    assert push["detail"]["derivation"] == "explicit" and push["detail"]["derived_from"] is None
    for answer in (lineage, events, t.call("b-read", "GET", "/events?name=team-b-m")):
        assert "team-a" not in answer.text and t.a_digest[:12] not in answer.text
    page = httpx.get(f"{t.server.url}/events", cookies={"jaxport_token": t.tokens["b-read"]})
    assert page.status_code == 200 and "team-a" not in page.text
    # the unprefixed admin sees the source
    full = t.call("admin", "GET", "/events?name=team-b-m").json()
    assert next(e for e in full if e["kind"] == "push")["detail"]["derived_from"] == "team-a-m:1"


# -- the server reads no URL a client names, and says no index password ------------------------


def test_watch_reads_the_servers_index_only_and_never_shows_its_password(t):
    before = t.listener.connections
    body = {"dry_run": True, "timeout": 5, "index_url": f"http://127.0.0.1:{t.listener.port}/"}
    r = t.call("admin", "POST", "/watch", json=body)
    error = _typed(r, 502, "PackageIndexError")  # the server's index (a dead port): upstream
    assert error["message"].startswith("the package index http://127.0.0.1:")
    assert error["message"].endswith("/simple/ cannot be read: ConnectError")
    assert INDEX_PASSWORD not in r.text and "pip" not in error["message"]
    admin = jaxport.Registry(t.server.url, token=t.tokens["admin"])
    with admin, pytest.raises(jaxport.PackageIndexError) as caught:  # typed, an AuditError too
        admin.watch_jax(dry_run=True)
    assert isinstance(caught.value, jaxport.AuditError) and str(caught.value) == error["message"]
    assert t.listener.connections == before
    events = t.call("admin", "GET", "/events").json()
    assert INDEX_PASSWORD not in json.dumps(events)


# -- bad input: a typed 4xx, never a 500 --------------------------------------------------------

BAD = [
    ("GET", "/gates/team-b-m/prod?version=2147483648", None, 400, "InvalidNameError"),
    ("GET", "/gates/team-b-m/prod?version=0", None, 422, "InvalidNameError"),
    ("GET", "/gates/team-b-m/bad%20alias?version=1", None, 400, "InvalidNameError"),
    ("GET", "/gates/team-b-old/prod?version=1", None, 404, "NotFoundError"),  # deleted
    ("GET", "/gates/" + "x" * 5000, None, 400, "InvalidNameError"),
    ("PUT", "/gates/team-b-m/prod", {"require_audit": "bogus"}, 400, "InvalidNameError"),
    ("PUT", "/gates/team-b-m/prod", {"jax_releases": ["1" * 5000]}, 400, "InvalidNameError"),
    ("PUT", "/gates/team-b-m/prod", {"require_signature": "zz"}, 422, "InvalidNameError"),
    ("PUT", "/gates/team-b-m/prod", {"platforms": list("abcdefghijk")}, 422, "InvalidNameError"),
    ("DELETE", "/gates/team-b-m/not-protected", None, 404, "NotFoundError"),
    ("PUT", "/aliases/team-b-m/prod", {"version": 1, "override": True, "reason": " "}, 400,
     "InvalidNameError"),
    ("PUT", "/aliases/team-b-m/prod", {"version": 1, "override": True, "reason": "r" * 1001},
     422, "InvalidNameError"),
    ("PUT", "/aliases/team-b-old/prod", {"version": 1}, 404, "NotFoundError"),  # deleted
    ("GET", "/lineage?reference=team-b-m:1&depth=-1", None, 400, "InvalidNameError"),
    ("GET", "/lineage?reference=team-b-m:1&depth=1099511627776", None, 400, "InvalidNameError"),
    ("GET", "/lineage?reference=team-b-m:99", None, 404, "NotFoundError"),
    ("GET", "/lineage?reference=team-b-old:1", None, 404, "NotFoundError"),  # deleted
    ("GET", "/lineage?reference=", None, 400, "InvalidNameError"),
    ("GET", "/forecast?reference=team-b-m:0", None, 400, "InvalidNameError"),
    ("GET", "/forecast?reference=" + "x" * 10000, None, 400, "InvalidNameError"),
    ("GET", "/forecast?reference=team-b-old:1", None, 404, "NotFoundError"),  # deleted
    ("GET", "/rescue/examples/team-b-m/99999999999999999999", None, 400, "InvalidNameError"),
    ("GET", "/rescue/examples/team-b-m/-1", None, 400, "InvalidNameError"),
    ("GET", "/rescue/examples/team-b-m/1/blob", None, 404, "NotFoundError"),  # no goldens
    ("GET", "/rescue/examples/team-b-old/1", None, 404, "NotFoundError"),  # deleted
    ("POST", "/rescue/events", {"name": "team-b-m", "version": 2**40, "detail": {}}, 400,
     "InvalidNameError"),
    ("POST", "/rescue/events", {"name": "team-b-old", "version": 1, "detail": {}}, 404,
     "NotFoundError"),
    ("POST", "/rescue/events", {"name": "team-b-m", "version": 1, "detail": []}, 422,
     "InvalidNameError"),
    ("POST", "/rescue/events", {"name": "team-b-m", "version": 1, "detail": {"x": "y" * 70000}},
     413, "InvalidNameError"),
    ("PUT", "/retention/policies/team-b-", {"keep_last": -1}, 400, "InvalidNameError"),
    ("PUT", "/retention/policies/team-b-", {"keep_last": 2**70}, 400, "InvalidNameError"),
    ("PUT", "/retention/policies/team-b-", {"keep_younger_than": -5}, 400, "InvalidNameError"),
    ("PUT", "/retention/policies/team-b-", {"restore_period": 1e300}, 400, "InvalidNameError"),
    ("PUT", "/retention/policies/team-b-", {"keep_younger_than": 1e300}, 400,
     "InvalidNameError"),
    ("PUT", "/retention/policies/team-b-%00", {"keep_last": 1}, 400, "InvalidNameError"),
    ("DELETE", "/retention/policies/team-b-nope", None, 404, "NotFoundError"),
    ("POST", "/retention/runs", {"prefix": "team-b-%", "dry_run": True}, 400, "InvalidNameError"),
    ("POST", "/retention/restore", {"name": "team-b-m", "version": 1}, 409, "ConflictError"),
    ("POST", "/retention/restore", {"name": "team-b-m", "version": 0}, 400, "InvalidNameError"),
    ("POST", "/retention/restore", {"name": "team-b-m", "version": 2**40}, 400,
     "InvalidNameError"),
    ("POST", "/retention/restore", {"name": "team-b-nope", "version": 1}, 404, "NotFoundError"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "status", "kind"), BAD)
def test_bad_input_is_a_typed_4xx(t, method, path, body, status, kind):
    """As the team's own admin (``b-admin``), or the unprefixed one for gates and aliases."""
    who = "admin" if path.startswith(("/gates", "/aliases")) else "b-admin"
    _typed(t.call(who, method, path, json=body), status, kind)


RAW_DETAILS = [
    b'{"\\ud800": "x"}',  # a lone surrogate: not UTF-8, no JSON answer can carry it
    b'{"x": "\\udfff"}',
    b'{"x": ["\\ud800"]}',
    b'{"x": NaN}',
    b'{"x": Infinity}',
    b'{"x": 1e999}',
]


@pytest.mark.parametrize("detail", RAW_DETAILS)
def test_a_rescue_events_detail_is_storable_json(t, detail):
    """A detail that no JSON answer could carry is refused before it is stored, so it cannot
    break the event log for every reader afterwards."""
    body = b'{"name": "team-b-m", "version": 1, "detail": ' + detail + b"}"
    r = t.call("b-write", "POST", "/rescue/events", content=body,
               headers={"content-type": "application/json"})  # fmt: skip
    _typed(r, 400, "InvalidNameError")
    for who in ("admin", "b-read"):
        assert t.call(who, "GET", "/events").status_code == 200
    assert httpx.get(f"{t.server.url}/events",
                     cookies={"jaxport_token": t.tokens["admin"]}).status_code == 200  # fmt: skip


def test_an_overrides_reason_is_storable_json(t):
    """The reason an unprefixed admin gives is stored in the move's event: a lone surrogate is
    refused as a rescue event's detail is (an answer could not carry it)."""
    body = b'{"version": 1, "override": true, "reason": "why \\udfff"}'
    r = t.call("admin", "PUT", "/aliases/team-b-m/staging", content=body,
               headers={"content-type": "application/json"})  # fmt: skip
    _typed(r, r.status_code if r.status_code in (400, 422) else 400, "InvalidNameError")
    assert t.call("admin", "GET", "/events").status_code == 200


def test_a_teams_writer_records_a_rescue_event_of_its_names(t):
    body = {"name": "team-b-m", "version": 1, "detail": {"source": "team-b-m:1", "x": "\u00e9"}}
    r = t.call("b-write", "POST", "/rescue/events", json=body)
    assert r.status_code == 201, r.text
    event = r.json()
    assert (event["actor"], event["kind"], event["detail"]["x"]) == ("b-write", "rescue", "\u00e9")
