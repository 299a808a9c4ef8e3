"""Team boundaries on the registry server when the attacker holds a VALID token of another team
(issue 24, section 2): a write or admin token limited to the prefix ``team-a-`` against the
names of ``team-b-``, on a real ``jaxport serve`` process over SQLite and over PostgreSQL
(``JAXPORT_TEST_POSTGRES_URL``; skipped without it).

Each test is a finding's regression test and fails on the code before its fix:

- F1: a commit names another team's archive, tensor or golden examples it never uploaded;
  ``/blobs/missing`` says whether another team's blob exists; a size check states its size.
- F2: a prefix-limited admin lists, makes and revokes tokens beyond its prefixes, and runs gc
  and verify over the whole store.
- F7: an ambiguous ``sha256:`` prefix lists archives the token cannot see (5 routes).
- F10: ``/login`` and ``/logout`` take forms sent from another site.
- F11: error answers show the server's disk paths.
- A push refused for its name still uploaded its parts.

The store: ``team-b-secret`` (a function with golden examples), ``team-b-model`` (a model in
parts), ``team-b-twin`` (a variant whose digest the fixture rewrites to share its first 12
hex digits with ``team-a-own``'s archive: an ambiguous prefix without 16 M archives) and
``team-a-own``. Tokens: ``admin`` (no prefixes), ``a-admin`` (admin, ``team-a-``),
``a-writer`` and ``b-writer`` (write, ``team-a-`` and ``team-b-``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import uuid
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sqlalchemy as sa
from _server import Server, admin_token, serving
from conftest import POSTGRES_URL_ENV, _postgres_url

import jaxport
import jaxport.registry._internal
from jaxport.registry._internal import to_wire
from jaxport.registry._remote_push import archive_parts

F32 = jnp.float32


@dataclasses.dataclass
class Store:
    server: Server
    tmp: Path
    admin: str
    a_admin: str
    a_writer: str
    b_writer: str
    secret: str  # team-b-secret's archive digest
    secret_bytes: bytes
    examples: str  # team-b-secret's golden examples blob
    tensors: list[str]  # team-b-model's part digests (skeleton first)
    own: str  # team-a-own's archive digest
    twin: str  # team-b-twin's rewritten digest: own[:12] + something else
    upper: str  # TEAM-A-upper's archive digest: a name team-a- does not start (its case)
    upper_size: int

    @property
    def api(self) -> str:
        return f"{self.server.url}/api/v1"

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def _exported(fn):
    return jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((3,), F32))


def _model() -> jaxport.Model:
    rng = np.random.default_rng(7)
    params = {f"l{i}": rng.standard_normal((8, 8)).astype(np.float32) for i in range(2)}
    return jaxport.Model(params, {"f": lambda p, x: x @ p["l0"] @ p["l1"]},
                         {"f": [jax.ShapeDtypeStruct((2, 8), F32)]})  # fmt: skip


def _fill(db: str, blobs: str) -> dict:
    """The teams' versions, pushed straight into the database; the twin's digest rewritten."""
    from jaxport.registry._model_parts import parts_of

    with jaxport.Registry(db, blobs=blobs, upgrade=True) as reg:
        x = np.ones((3,), np.float32)
        secret = reg.push(_exported(jnp.sin), "team-b-secret", examples=[((x,), {})])
        model = reg.push(_model(), "team-b-model").variants[0]
        own = reg.push(_exported(jnp.cos), "team-a-own").variants[0].digest
        twin = reg.push(_exported(jnp.tanh), "team-b-twin").variants[0].digest
        upper = reg.push(_exported(jnp.expm1), "TEAM-A-upper").variants[0]
        with reg._backend.engine.begin() as conn:
            tensors = [p.digest for p in parts_of(conn, model.variant_id)]
            examples = conn.execute(sa.text("SELECT digest FROM examples")).scalar_one()
            fake = own[:12] + hashlib.sha256(twin.encode()).hexdigest()[12:]
            conn.execute(
                sa.text("INSERT INTO blobs (digest, size, created_at) VALUES (:d, 1, 0)"),
                {"d": fake},
            )
            conn.execute(
                sa.text("UPDATE variants SET digest = :f WHERE digest = :d"),
                {"f": fake, "d": twin},
            )
        digest = secret.variants[0].digest
        data = reg.read_blob(digest)
    return {"secret": digest, "secret_bytes": data, "examples": examples,
            "tensors": tensors, "own": own, "twin": fake,
            "upper": upper.digest, "upper_size": upper.size_bytes}  # fmt: skip


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"isolation-{request.param}")
    blobs, engine, schema = str(tmp / "blobs"), None, ""
    if request.param == "sqlite":
        db = f"sqlite:///{tmp / 'registry.db'}"
    else:
        if not os.environ.get(POSTGRES_URL_ENV):
            pytest.skip(f"{POSTGRES_URL_ENV} is not set")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        engine = sa.create_engine(os.environ[POSTGRES_URL_ENV])
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        db = _postgres_url(schema)
    try:
        facts = _fill(db, blobs)
        tokens = {
            "admin": admin_token(db, blobs),
            "a_admin": admin_token(db, blobs, "a-admin", "admin", prefixes=["team-a-"]),
            "a_writer": admin_token(db, blobs, "a-writer", "write", prefixes=["team-a-"]),
            "b_writer": admin_token(db, blobs, "b-writer", "write", prefixes=["team-b-"]),
        }
        with serving(db, blobs, tmp / "serve.log") as server:
            yield Store(server, tmp, **tokens, **facts)
    finally:
        if engine is not None:
            with engine.begin() as conn:
                conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
            engine.dispose()


def _error(r: httpx.Response, *statuses: int) -> dict:
    assert r.status_code in statuses, (r.status_code, r.text[:500])
    return r.json()["error"]


def _commit(s: Store, token: str, name: str, digest: str, size: int, parts=None) -> httpx.Response:
    parts = parts or [{"position": 0, "digest": digest, "offset": 0, "size": size}]
    body = {"name": name, "archives": [{"digest": digest, "size": size, "parts": parts}]}
    return httpx.post(f"{s.api}/versions", json=body, headers=s.auth(token), timeout=120)


def _random_digest() -> str:
    return hashlib.sha256(uuid.uuid4().bytes).hexdigest()


# -- F1: knowing a digest is not enough --------------------------------------------------------


def test_commit_of_another_teams_archive_is_refused_without_its_size(store):
    s = store
    size = len(s.secret_bytes)
    first = _error(_commit(s, s.a_writer, "team-a-stolen", s.secret, 1), 422)
    assert first["type"] == "IntegrityError"
    assert str(size) not in first["message"] and f"{size:,}" not in first["message"]
    assert "was not uploaded" in first["message"]
    _error(_commit(s, s.a_writer, "team-a-stolen", s.secret, size), 422)  # the real size too
    r = httpx.get(f"{s.api}/blobs/{s.secret}", headers=s.auth(s.a_writer))
    assert r.status_code == 404
    r = httpx.get(f"{s.api}/ref", params={"reference": "team-a-stolen"}, headers=s.auth(s.a_writer))
    assert r.status_code == 404


def test_a_prefix_reaches_names_of_its_case_only(store):
    """``team-a-`` does not start ``TEAM-A-upper``: its archive is not the token's to commit,
    find or read (SQLite's LIKE ignored the case of ASCII letters: the commit succeeded and
    the blob then downloaded)."""
    s = store
    r = httpx.post(f"{s.api}/blobs/missing", json={"digests": [s.upper], "name": "team-a-up"},
                   headers=s.auth(s.a_writer))  # fmt: skip
    assert r.json() == {"missing": [s.upper]}
    e = _error(_commit(s, s.a_writer, "team-a-up", s.upper, s.upper_size), 422)
    assert e["type"] == "IntegrityError" and "was not uploaded" in e["message"]
    r = httpx.get(f"{s.api}/blobs/{s.upper}", headers=s.auth(s.a_writer))
    assert r.status_code == 404
    r = httpx.get(f"{s.api}/ref", params={"reference": f"sha256:{s.upper[:12]}"},
                  headers=s.auth(s.a_writer))  # fmt: skip
    assert r.status_code == 404


def test_a_commit_naming_another_teams_tensor_reads_as_a_missing_part(store):
    s = store
    answers = []
    for part in (s.tensors[1], _random_digest()):  # team-b's tensor, and a digest nobody has
        parts = [{"position": 0, "digest": part, "offset": 0, "size": 1}]
        e = _error(_commit(s, s.a_writer, "team-a-m", _random_digest(), 1, parts), 422)
        answers.append((e["type"], e["message"].replace(part, "D"), e["attrs"].get("expected")))
    assert answers[0][:2] == answers[1][:2]
    assert answers[0][2] == s.tensors[1]


def test_a_commit_naming_another_teams_examples_is_refused(store):
    s = store
    with jaxport.Registry(s.server.url, token=s.a_writer) as reg:
        ref = reg.push(_exported(jnp.exp), "team-a-ex")
    body = {"name": "team-a-ex", "archives": [to_wire(_parts_of(s, ref))],
            "examples": {"digest": s.examples, "kind": "function"}}  # fmt: skip
    r = httpx.post(f"{s.api}/versions", json=body, headers=s.auth(s.a_writer), timeout=120)
    e = _error(r, 422)
    assert e["type"] == "IntegrityError" and e["attrs"]["expected"] == s.examples
    assert "bytes" not in e["message"]


def _parts_of(s: Store, ref) -> jaxport.registry._internal.ArchiveParts:
    from jaxport.export._internal import Part

    variant = ref.variants[0]
    part = Part(0, variant.digest, 0, variant.size_bytes)
    return jaxport.registry._internal.ArchiveParts(variant.digest, variant.size_bytes, (part,))


def test_missing_answers_only_for_what_the_token_reaches(store):
    s = store
    nobody = _random_digest()
    digests = [s.secret, *s.tensors, s.examples, s.own, nobody]
    r = httpx.post(f"{s.api}/blobs/missing", json={"digests": digests}, headers=s.auth(s.a_writer))
    assert r.status_code == 200
    assert r.json()["missing"] == [s.secret, *s.tensors, s.examples, nobody]
    r = httpx.post(f"{s.api}/blobs/missing", json={"digests": digests}, headers=s.auth(s.b_writer))
    assert r.json()["missing"] == [s.own, nobody]
    r = httpx.post(f"{s.api}/blobs/missing", json={"digests": digests}, headers=s.auth(s.admin))
    assert r.json()["missing"] == [nobody]


def test_a_team_holding_the_bytes_still_pushes_them(store):
    """Dedup still works: the bytes are sent (they are checked, the store keeps one copy),
    then the commit names a part the token uploaded; its own versions' parts need no upload."""
    s = store
    with jaxport.Registry(s.server.url, token=s.a_writer) as reg:
        ref = reg.push(s.secret_bytes, "team-a-same-bytes")
        assert ref.variants[0].digest == s.secret
        again = reg.push(s.secret_bytes, "team-a-same-bytes-2")
        assert again.variants[0].digest == s.secret
        assert reg.read_blob(s.secret) == s.secret_bytes
        reg.push(_model(), "team-a-model")
    tensors = [p.digest for p in archive_parts(_model(), vjp_order=0, max_size=1 << 30)
               .parts.parts[1:]]  # fmt: skip
    r = httpx.post(f"{s.api}/blobs/missing", json={"digests": [s.secret, *tensors]},
                   headers=s.auth(s.a_writer))  # fmt: skip
    assert r.json()["missing"] == []  # parts of its own versions now


def test_an_old_client_uploading_without_a_name_still_commits(store):
    s = store
    data = jaxport.dumps(_exported(jnp.log1p))
    digest = hashlib.sha256(data).hexdigest()
    r = httpx.put(f"{s.api}/blobs/{digest}", content=data, headers=s.auth(s.a_writer))
    assert r.status_code == 201
    r = _commit(s, s.a_writer, "team-a-old-client", digest, len(data))
    assert r.status_code == 201, r.text[:300]
    # another team's token did not upload it: for b-writer it is missing
    r = _commit(s, s.b_writer, "team-b-old-client", digest, len(data))
    assert _error(r, 422)["type"] == "IntegrityError"


def test_a_push_refused_for_its_name_uploads_nothing(store):
    s = store
    data = jaxport.dumps(_exported(jnp.arctan))
    digest = hashlib.sha256(data).hexdigest()
    with (
        jaxport.Registry(s.server.url, token=s.a_writer) as reg,
        pytest.raises(jaxport.PermissionDeniedError),
    ):
        reg.push(data, "team-b-intruder")
    r = httpx.put(
        f"{s.api}/blobs/{digest}", params={"name": "team-b-intruder"}, content=data,
        headers=s.auth(s.a_writer),
    )  # fmt: skip
    assert _error(r, 403)["type"] == "PermissionDeniedError"
    r = httpx.post(f"{s.api}/blobs/missing", json={"digests": [digest]}, headers=s.auth(s.admin))
    assert r.json()["missing"] == [digest]  # never stored


# -- F2: a prefix-limited admin manages its prefixes only ------------------------------------


def test_a_prefixed_admin_sees_and_makes_only_tokens_within_its_own(store):
    s = store
    a = s.auth(s.a_admin)
    listed = {t["name"] for t in httpx.get(f"{s.api}/tokens", headers=a).json()}
    assert {"a-admin", "a-writer"} <= listed
    assert not listed & {"admin", "b-writer"}
    for scope, prefixes in (("admin", []), ("read", []), ("write", ["team-b-"]),
                            ("read", ["team-"]), ("admin", ["team-a-", "x"])):  # fmt: skip
        body = {"name": f"team-a-t-{uuid.uuid4().hex[:8]}", "scope": scope,
                "prefixes": prefixes}  # fmt: skip
        r = httpx.post(f"{s.api}/tokens", json=body, headers=a)
        assert _error(r, 403)["type"] == "PermissionDeniedError", (scope, prefixes)
    body = {"name": "team-a-sub", "scope": "write", "prefixes": ["team-a-sub-"]}
    assert httpx.post(f"{s.api}/tokens", json=body, headers=a).status_code == 201


def test_a_prefixed_admin_learns_no_other_token_name(store):
    """Token names are one namespace: a 409 for a name taken told a team-a- admin that
    another team's token (``b-writer``) exists. Its tokens are named within its prefixes,
    and any other name is refused alike, taken or not."""
    s = store
    a = s.auth(s.a_admin)
    answers = []
    for name in ("b-writer", "admin", f"free-{uuid.uuid4().hex[:8]}"):
        body = {"name": name, "scope": "read", "prefixes": ["team-a-"]}
        e = _error(httpx.post(f"{s.api}/tokens", json=body, headers=a), 403)
        answers.append(e["message"].replace(f"'team-a-{name}'", "'team-a-NAME'"))
    assert len(set(answers)) == 1 and "team-a-" in answers[0]


def test_a_token_makes_no_token_that_outlives_it(store):
    """An admin token that expires (a CI job's, an hour) made a token that never expires,
    keeping its reach past its own end."""
    s = store
    body = {"name": f"short-{uuid.uuid4().hex[:8]}", "scope": "admin", "prefixes": ["team-a-"],
            "expires_in": 3600}  # fmt: skip
    r = httpx.post(f"{s.api}/tokens", json=body, headers=s.auth(s.admin))
    assert r.status_code == 201, r.text
    short = s.auth(r.json()["secret"])
    for expires_in in (None, 7200):
        body = {"name": f"team-a-long-{uuid.uuid4().hex[:8]}", "scope": "read",
                "prefixes": ["team-a-"], "expires_in": expires_in}  # fmt: skip
        e = _error(httpx.post(f"{s.api}/tokens", json=body, headers=short), 403)
        assert e["type"] == "PermissionDeniedError" and "expire" in e["message"]
    body = {"name": f"team-a-ok-{uuid.uuid4().hex[:8]}", "scope": "read", "prefixes": ["team-a-"],
            "expires_in": 60}  # fmt: skip
    assert httpx.post(f"{s.api}/tokens", json=body, headers=short).status_code == 201


def test_a_prefixed_admin_cannot_revoke_other_tokens(store):
    s = store
    a = s.auth(s.a_admin)
    for name in ("admin", "b-writer"):
        e = _error(httpx.delete(f"{s.api}/tokens/{name}", headers=a), 404)
        assert e["message"] == f"no token named {name!r}"
    assert httpx.get(f"{s.api}/tokens", headers=s.auth(s.admin)).status_code == 200
    assert httpx.get(f"{s.api}/names", headers=s.auth(s.b_writer)).status_code == 200


def test_store_wide_operations_need_an_admin_without_prefixes(store):
    s = store
    a = s.auth(s.a_admin)
    for path, body in (("/gc", {"dry_run": True}), ("/verify", {})):
        e = _error(httpx.post(f"{s.api}{path}", json=body, headers=a, timeout=120), 403)
        assert e["type"] == "PermissionDeniedError"
    _error(httpx.delete(f"{s.api}/names/team-b-secret", headers=a), 403)
    r = httpx.post(f"{s.api}/gc", json={"dry_run": True}, headers=s.auth(s.admin), timeout=120)
    assert r.status_code == 200


# -- F7: hidden means hidden ---------------------------------------------------------------


def test_a_digest_prefix_is_matched_among_visible_archives_only(store):
    s = store
    prefix = f"sha256:{s.own[:10]}"  # team-b-twin's digest starts with the same 12 digits
    h = s.auth(s.a_writer)
    r = httpx.get(f"{s.api}/ref", params={"reference": prefix}, headers=h)
    assert r.status_code == 200 and r.json()["name"] == "team-a-own", r.text[:300]
    answers = [
        httpx.get(f"{s.api}/resolve", params={"reference": prefix}, headers=h),
        httpx.get(f"{s.api}/signatures", params={"reference": prefix}, headers=h),
        httpx.get(f"{s.api}/diff", params={"a": prefix, "b": "team-a-own:1"}, headers=h),
        httpx.post(
            f"{s.api}/audits", json={"reference": prefix, "level": "static"}, headers=h, timeout=300
        ),
    ]
    for r in answers:
        assert r.status_code == 200, (r.request.url, r.text[:300])
        assert s.twin[:16] not in r.text and "team-b" not in r.text
    # The admin sees both archives: the prefix is ambiguous to it.
    e = _error(httpx.get(f"{s.api}/ref", params={"reference": prefix},
                         headers=s.auth(s.admin)), 400)  # fmt: skip
    assert s.twin[:14] in e["message"]
    # Team b sees only the twin: the prefix is its archive, not an ambiguity.
    r = httpx.get(f"{s.api}/ref", params={"reference": prefix}, headers=s.auth(s.b_writer))
    assert r.status_code == 200 and r.json()["name"] == "team-b-twin"


# -- F10: CSRF on the sign-in forms -----------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://sub.evil.example"},
    ],
)
def test_sign_in_forms_from_another_site_are_refused(store, headers):
    s = store
    r = httpx.post(f"{s.server.url}/login", data={"token": s.a_writer}, headers=headers)
    assert r.status_code == 403 and "jaxport_token" not in r.headers.get("set-cookie", "")
    r = httpx.post(f"{s.server.url}/logout", headers=headers, cookies={"jaxport_token": "x"})
    assert r.status_code == 403 and "jaxport_token" not in r.headers.get("set-cookie", "")


def test_sign_in_forms_from_the_server_itself_work(store):
    s = store
    host = s.server.url.removeprefix("http://")
    for headers in ({"Origin": s.server.url}, {"Sec-Fetch-Site": "same-origin"}, {},
                    {"Origin": "https://registry.example", "Host": host,
                     "X-Forwarded-Host": "registry.example"}):  # fmt: skip
        r = httpx.post(f"{s.server.url}/login", data={"token": s.a_writer}, headers=headers)
        assert r.status_code == 303, (headers, r.text[:300])
        assert "jaxport_token=" in r.headers["set-cookie"]
        assert httpx.post(f"{s.server.url}/logout", headers=headers).status_code == 303


# -- F11: no disk path in an answer ----------------------------------------------------------


def test_error_answers_show_no_server_path(store):
    s = store
    nobody = _random_digest()
    answers = [
        _commit(s, s.admin, "leak", nobody, 10),  # "blob ... is missing from <blobs>"
        httpx.get(f"{s.server.url}/names/team-a-nothing", cookies={"jaxport_token": s.a_writer}),
    ]
    garbage = b"not an archive at all" * 10
    digest = hashlib.sha256(garbage).hexdigest()
    httpx.put(f"{s.api}/blobs/{digest}", content=garbage, headers=s.auth(s.admin))
    answers.append(_commit(s, s.admin, "leak", digest, len(garbage)))
    for r in answers:
        assert 400 <= r.status_code < 500, r.text[:300]
        assert str(s.tmp) not in r.text and "/tmp/" not in r.text, r.text[:500]
        assert "jaxport-commit-" not in r.text
    assert "team-b" not in answers[1].text  # a limited token's page lists no other name
