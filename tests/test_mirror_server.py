"""Signatures and findings made elsewhere, stored through a registry server
(``server/_api_adopt.py``) and by a direct registry (``registry/_adoption.py``), on SQLite and
PostgreSQL: ``jaxport.registry.mirror`` direct -> server -> direct keeps them (the signature
verifies after the round trip, the findings are the same) and a second run copies nothing;
another team's valid token is refused; hostile bodies are typed 400 / 409 / 413 answers that
store nothing; a server without the routes is an ``UnsupportedFeatureError`` (a note in the
mirror's report)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import pytest
from _oci_versions import populate, signing_key
from _server import admin_token, serving
from test_signing import _pki

from jaxport import (
    ConflictError,
    InvalidNameError,
    NotFoundError,
    Registry,
    SignatureError,
    UnsupportedFeatureError,
)
from jaxport._signing import MAX_BUNDLE_BYTES, sign_digest
from jaxport.registry import CopyReport, mirror
from jaxport.registry._http_backend import HttpBackend
from jaxport.registry._oci_mapping import Attached, adopt_attached
from jaxport.server._limits import MAX_ADOPT_BODY

ALL = ["fn:1", "mlp:1", "mlp:2"]


def _function(scale: float = 1.0):
    f = jax.jit(lambda x: jnp.cos(x) * scale)
    return jax.export.export(f)(jax.ShapeDtypeStruct((3,), jnp.float32))


def _finding(digest: str, **changed) -> dict:
    row = {
        "digest": digest, "level": "static", "jax_version": "0.7.0", "jaxlib_version": "0.7.0",
        "platform": "cpu", "devices": 1, "examples_digest": None, "status": "ok",
        "reason": "measured elsewhere", "details_json": json.dumps({"load": "ok"}),
        "seconds": 0.25, "created_at": 1_700_000_000.5,
    }  # fmt: skip
    return row | changed


def _findings(reg: Registry, name: str) -> list[tuple]:
    return sorted(
        (f.digest, f.level, f.jax_version, f.jaxlib_version, f.platform, f.devices, f.status,
         f.reason, json.dumps(f.checks, sort_keys=True), f.seconds, f.created_at)
        for f in reg.audit_results(name=name)
    )  # fmt: skip


def test_mirror_through_a_server_keeps_signatures_and_findings(db_url, tmp_path):
    src = Registry(f"sqlite:///{tmp_path / 'src.db'}", blobs=tmp_path / "src-blobs")
    public = populate(src, tmp_path)
    blobs = str(tmp_path / "served-blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as server:
        client = Registry(server.url, token=admin_token(db_url, blobs))
        out = mirror(src, client)
        assert out.versions == ALL and out.signatures == 2 and out.findings == 2, out.notes
        assert not out.notes
        again = mirror(src, client)
        assert not again.copied_anything and again.signatures == again.findings == 0
        assert not again.notes
        dst = Registry(f"sqlite:///{tmp_path / 'dst.db'}", blobs=tmp_path / "dst-blobs")
        back = mirror(client, dst)
        assert back.versions == ALL and back.signatures == 2 and back.findings == 2
        for ref in ("fn:1", "mlp:2"):
            assert all(c.ok for c in dst.verify_signatures(ref, [public])), ref
            assert [s.bundle_digest for s in dst.signatures(ref)] == [
                s.bundle_digest for s in src.signatures(ref)
            ]
        for name in ("fn", "mlp"):
            assert _findings(dst, name) == _findings(client, name) == _findings(src, name)
        assert not mirror(client, dst).copied_anything


@pytest.fixture
def teams(db_url, tmp_path):
    """A server with ``team-a-fn`` and ``team-b-fn`` (other archives), its admin client, and
    write tokens limited to ``team-a-`` and ``team-b-``."""
    blobs = str(tmp_path / "served-blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as server:
        admin = Registry(server.url, token=admin_token(db_url, blobs))
        admin.push(_function(1.0), "team-a-fn")
        admin.push(_function(2.0), "team-b-fn")
        tokens = {
            t: admin.tokens.create(f"team-{t}", "write", prefixes=[f"team-{t}-"]).secret
            for t in ("a", "b")
        }
        yield server, admin, tokens


def _post(server, token: str, path: str, body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if isinstance(body, bytes):
        headers["Content-Type"] = "application/json"
        return httpx.post(f"{server.url}/api/v1{path}", content=body, headers=headers, timeout=60)
    return httpx.post(f"{server.url}/api/v1{path}", json=body, headers=headers, timeout=60)


def _signature_body(digest: str, private: Path, signs: str | None = None) -> dict:
    signed = sign_digest(signs or digest, private)
    return {"digest": digest, "bundle": signed.bundle.decode(), "signer": signed.signer,
            "kind": signed.kind}  # fmt: skip


def test_another_teams_valid_token_is_refused(teams, tmp_path):
    server, admin, tokens = teams
    private, _ = signing_key(tmp_path)
    b_digest = admin.get("team-b-fn:1").digests[0]
    body = _signature_body(b_digest, private)
    refused = _post(server, tokens["a"], "/signatures/team-b-fn", body)
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "PermissionDeniedError"
    hidden = _post(server, tokens["a"], "/signatures/team-a-fn", body)  # another name's archive
    assert hidden.status_code == 404 and "team-b" not in hidden.text
    finding = {"findings": [_finding(b_digest)]}
    assert _post(server, tokens["a"], "/findings/team-b-fn", finding).status_code == 403
    assert _post(server, tokens["a"], "/findings/team-a-fn", finding).status_code == 404
    assert admin.signatures("team-b-fn:1") == [] and admin.audit_results(name="team-b-fn") == []
    team_a = Registry(server.url, token=tokens["a"])  # the client's calls, typed
    with pytest.raises(PermissionError):
        team_a._backend.adopt_findings("team-b-fn", [_finding(b_digest)])
    team_b = Registry(server.url, token=tokens["b"])
    stored = team_b._backend.adopt_signature("team-b-fn", b_digest, body["bundle"].encode(),
                                             body["signer"], "key")  # fmt: skip
    assert admin.signatures("team-b-fn:1") == [stored]
    again = team_b._backend.adopt_signature("team-b-fn", b_digest, body["bundle"].encode(),
                                            body["signer"], "key")  # fmt: skip
    assert again == stored and len(admin.signatures("team-b-fn:1")) == 1
    [event] = [e for e in admin.events(name="team-b-fn") if e.kind == "sign"]  # once
    assert (event.actor, event.version) == ("team-b", 1)
    assert event.detail == {"signers": [body["signer"]], "adopted": True}
    assert team_b._backend.adopt_findings("team-b-fn", [_finding(b_digest)]) == 1
    assert team_b._backend.adopt_findings("team-b-fn", [_finding(b_digest)]) == 0
    assert len(admin.audit_results(name="team-b-fn")) == 1


def test_hostile_bodies_are_typed_and_store_nothing(teams, tmp_path):
    server, admin, tokens = teams
    private, _ = signing_key(tmp_path)
    digest, other = admin.get("team-a-fn:1").digests[0], admin.get("team-b-fn:1").digests[0]
    good = _signature_body(digest, private)
    sig = "/signatures/team-a-fn"
    hostile = [
        (sig, good | {"bundle": "x" * (MAX_BUNDLE_BYTES + 1)}, 400, "InvalidNameError"),
        (sig, good | {"bundle": "not json"}, 400, "SignatureError"),
        (sig, good | {"bundle": '{"mediaType": 1}'}, 400, "SignatureError"),
        (sig, _signature_body(digest, private, signs=other), 400, "SignatureError"),
        (sig, good | {"signer": "ab" * 31}, 400, "SignatureError"),
        (sig, good | {"kind": "certificate"}, 400, "SignatureError"),
        (sig, good | {"digest": "f" * 64}, 400, "SignatureError"),  # the bundle's is another
        (sig, good | {"digest": "../x"}, 400, "SignatureError"),
        (sig, {"digest": digest}, 422, "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [{"digest": digest}]}, 400, "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest, status="great")]}, 400,
         "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest, details_json="{")]}, 400,
         "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest, details_json="[1]")]}, 400,
         "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest, seconds="1")]}, 400,
         "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest, jax_version="9" * 41)]}, 400,
         "InvalidNameError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest), _finding(other)]}, 404,
         "NotFoundError"),
        ("/findings/team-a-fn", {"findings": [_finding(digest)] * 1001}, 422, "InvalidNameError"),
    ]  # fmt: skip
    for path, body, status, kind in hostile:
        answer = _post(server, tokens["a"], path, body)
        assert (answer.status_code, answer.json()["error"]["type"]) == (status, kind), body
    too_large = b'{"findings": [' + b" " * MAX_ADOPT_BODY + b"]}"
    assert _post(server, tokens["a"], "/findings/team-a-fn", too_large).status_code == 413
    assert admin.signatures("team-a-fn:1") == [] and admin.audit_results(name="team-a-fn") == []
    assert _post(server, tokens["a"], sig, good).status_code == 200
    resigned = _signature_body(digest, private)  # the same signer, another bundle
    conflict = _post(server, tokens["a"], sig, resigned)
    assert conflict.status_code == 409 and conflict.json()["error"]["type"] == "ConflictError"
    [kept] = admin.signatures("team-a-fn:1")
    assert admin.read_blob(kept.bundle_digest) == good["bundle"].encode()


def test_a_direct_registry_checks_what_it_adopts(registry, tmp_path):
    registry.push(_function(), "fn")
    digest = registry.get("fn:1").digests[0]
    private, _ = signing_key(tmp_path)
    backend = registry._backend
    with pytest.raises(SignatureError, match="not one file with sha256"):
        signed = sign_digest("0" * 64, private)
        backend.adopt_signature("fn", digest, signed.bundle, signed.signer, signed.kind)
    signed = sign_digest(digest, private)
    with pytest.raises(NotFoundError):
        backend.adopt_signature("other", digest, signed.bundle, signed.signer, signed.kind)
    pki = _pki(tmp_path)
    cert = sign_digest(digest, pki["leaf_key"], certificate=pki["leaf"],
                       certificate_chain=[pki["ca"]])  # fmt: skip
    with pytest.raises(SignatureError, match="not the signer"):
        backend.adopt_signature("fn", digest, cert.bundle, signed.signer, "certificate")
    doc = json.loads(cert.bundle)
    doc["dsseEnvelope"]["signatures"][0]["sig"] = json.loads(signed.bundle)["dsseEnvelope"][
        "signatures"
    ][0]["sig"]  # another key's signature of the same statement
    with pytest.raises(SignatureError, match="does not verify"):
        backend.adopt_signature("fn", digest, json.dumps(doc).encode(), cert.signer, "certificate")
    assert registry.signatures("fn:1") == []
    backend.adopt_signature("fn", digest, cert.bundle, cert.signer, "certificate")
    backend.adopt_signature("fn", digest, signed.bundle, signed.signer, "key")
    with pytest.raises(ConflictError):
        again = sign_digest(digest, private)
        backend.adopt_signature("fn", digest, again.bundle, again.signer, again.kind)
    assert {s.kind for s in registry.signatures("fn:1")} == {"key", "certificate"}
    with pytest.raises(InvalidNameError, match="details_json"):
        backend.adopt_findings("fn", [_finding(digest, details_json="[")])
    assert backend.adopt_findings("fn", [_finding(digest)] * 2) == 1


def test_a_server_without_the_routes_is_a_note(teams, tmp_path, monkeypatch):
    """A server older than the routes answers 404: the mirror's report says what it did not
    store, and nothing is."""
    _, admin, _ = teams
    real = HttpBackend._adopting
    monkeypatch.setattr(
        HttpBackend, "_adopting", lambda self, route, *rest: real(self, "/older" + route, *rest)
    )
    digest = admin.get("team-a-fn:1").digests[0]
    signed = sign_digest(digest, signing_key(tmp_path)[0])
    attached = Attached([(digest, signed.bundle, signed.signer, "key")], [_finding(digest)])
    report = CopyReport()
    adopt_attached(admin, attached, "team-a-fn:1", report)
    [note] = report.notes
    assert "signatures and findings not stored" in note and "older than its route" in note
    assert report.signatures == report.findings == 0
    assert admin.signatures("team-a-fn:1") == [] and admin.audit_results(name="team-a-fn") == []
    with pytest.raises(UnsupportedFeatureError):
        admin._backend.adopt_findings("team-a-fn", [_finding(digest)])
