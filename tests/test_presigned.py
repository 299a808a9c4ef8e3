"""Transfers straight between a client and the server's S3 store (``server/_presign.py``,
``registry/_presigned.py``, ``registry/_store_urls.py``), against moto's S3 server with S3's
checks of presigned URLs and checksums (``tests/_s3_moto.py``).

What passes through the server process is read from its ``GET /api/v1/transfer``: HTTP body
bytes in and out, blob bytes read from and written to the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _server import JAXPORT, admin_token, serving

import jaxport

F32 = jnp.float32
TENSORS, SIDE = 16, 256  # 16 tensors of 256 KiB: 4 MiB of parameters


def _model(seed: int = 0) -> jaxport.Model:
    rng = np.random.default_rng(seed)
    params = {f"w{i:02d}": rng.standard_normal((SIDE, SIDE)).astype(np.float32)
              for i in range(TENSORS)}  # fmt: skip
    spec = {"f": [jax.ShapeDtypeStruct((2, SIDE), F32)]}
    return jaxport.Model(params, {"f": lambda p, x: x @ p["w00"] @ p["w15"]}, spec)


def _payload() -> int:
    return TENSORS * SIDE * SIDE * 4


@pytest.fixture
def s3_served(s3, tmp_path, monkeypatch, request):
    """A server over SQLite and an S3 prefix, its admin token; ``env`` from the test's
    ``presign_env`` marker-like parameter (``request.param``), if any."""
    db_url = f"sqlite:///{tmp_path / 'registry.db'}"
    blobs = s3.url()
    options = json.dumps(s3.storage_options())
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", options)
    env = {"JAXPORT_BLOBS_OPTIONS": options, **getattr(request, "param", {})}
    token = admin_token(db_url, blobs)
    with serving(db_url, blobs, tmp_path / "serve.log", env=env) as server:
        server.admin = token  # type: ignore[attr-defined]
        server.s3 = s3  # type: ignore[attr-defined]
        yield server


def _api(server, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token or server.admin}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60)


def _moved(server) -> int:
    """Bytes through the server process so far (HTTP bodies and store reads and writes)."""
    with _api(server) as api:
        counts = api.get("/transfer").json()
    return sum(counts.values())


def test_push_and_pull_go_straight_to_the_store(s3_served):
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    model = _model()
    before = _moved(s3_served)
    pushed = reg.push(model, "direct")
    after_push = _moved(s3_served)
    pulled = reg.pull_model("direct", platform="cpu")
    after_pull = _moved(s3_served)
    for name, value in model.params.items():
        np.testing.assert_array_equal(pulled.params[name], value)
    assert reg.pull_bytes("direct", platform="cpu") == model.dumps()
    assert pushed.variants[0].digest == hashlib.sha256(model.dumps()).hexdigest()
    # the skeleton, JSON and headers only: well under 2 % of the 4 MiB of tensors each way
    assert after_push - before < 0.02 * _payload()
    assert after_pull - after_push < 0.02 * _payload()
    keys = s3_served.s3.keys(s3_served.blobs)
    assert not [k for k in keys if k.startswith("staging/")]  # every staged part moved


def test_a_part_with_other_bytes_is_refused_by_the_store(s3_served):
    data = b"the bytes of a part" * 1000
    digest = hashlib.sha256(data).hexdigest()
    with _api(s3_served) as api:
        answer = api.post("/uploads", json={"parts": [{"digest": digest, "size": len(data)}],
                                            "name": "x"}).json()  # fmt: skip
        url = answer["urls"][digest]
        wrong = b"THE" + data[3:]  # same length, another sha256
        refused = httpx.put(url["url"], content=wrong, headers=url["headers"])
        assert refused.status_code == 400 and b"BadDigest" in refused.content
        other_header = dict(url["headers"], **{"x-amz-checksum-sha256": "A" * 43 + "="})
        assert httpx.put(url["url"], content=wrong, headers=other_header).status_code == 403
        body = {"upload": answer["upload"], "digests": [digest], "name": "x"}
        done = api.post("/uploads/complete", json=body)
        assert done.json() == {"stored": [], "missing": [digest]}
        assert digest in api.post("/blobs/missing", json={"digests": [digest]}).json()["missing"]


@pytest.mark.parametrize("s3_served", [{"JAXPORT_PRESIGN_EXPIRES": "1"}], indirect=True)
def test_an_expired_url_is_refused(s3_served):
    data = b"a part" * 1000
    digest = hashlib.sha256(data).hexdigest()
    with _api(s3_served) as api:
        answer = api.post("/uploads", json={"parts": [{"digest": digest, "size": len(data)}],
                                            "name": "x"}).json()  # fmt: skip
    assert answer["expires_in"] == 1
    time.sleep(2.5)  # past the URL's expiry (signed in seconds)
    url = answer["urls"][digest]
    refused = httpx.put(url["url"], content=data, headers=url["headers"])
    assert refused.status_code == 403 and b"Request has expired" in refused.content
    # the client sends a part the store refused through the server instead
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    assert reg.push(_model(1), "late").version == 1  # fresh URLs, or through the server


def test_a_team_token_gets_no_url_for_another_teams_archive(s3_served):
    admin = jaxport.Registry(s3_served.url, token=s3_served.admin)
    digest = admin.push(_model(2), "team-b-model").variants[0].digest
    team_a = admin.tokens.create("team-a-writer", "write", prefixes=["team-a-"]).secret
    with _api(s3_served, team_a) as api:
        answer = api.get(f"/blobs/{digest}/locations")
        assert answer.status_code == 404
        assert "url" not in answer.text
        start = api.post("/uploads", json={"parts": [{"digest": digest, "size": 1}],
                                           "name": "team-b-x"})  # fmt: skip
        assert start.status_code == 403
    with _api(s3_served) as api:  # the admin's upload id is not team-a's to complete
        upload = api.post("/uploads", json={"parts": [{"digest": "0" * 64, "size": 1}]}).json()
    with _api(s3_served, team_a) as api:
        done = api.post("/uploads/complete",
                        json={"upload": upload["upload"], "digests": ["0" * 64],
                              "name": "team-a-x"})  # fmt: skip
        assert done.status_code == 403
    with _api(s3_served) as api:
        assert api.get(f"/blobs/{digest}/locations").json()["size"] > _payload()


def test_a_staged_part_never_becomes_a_blob_and_gc_removes_it(s3_served):
    data = b"never committed" * 1000
    digest = hashlib.sha256(data).hexdigest()
    with _api(s3_served) as api:
        answer = api.post("/uploads", json={"parts": [{"digest": digest, "size": len(data)}],
                                            "name": "x"}).json()  # fmt: skip
        url = answer["urls"][digest]
        assert httpx.put(url["url"], content=data, headers=url["headers"]).status_code == 200
    staged = f"staging/{answer['upload']}/{digest}"
    assert staged in s3_served.s3.keys(s3_served.blobs)
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    assert reg.missing_blobs([digest]) == [digest]  # not a blob
    report = reg.gc(temp_age=3600)
    assert staged in report.kept_temp  # younger than temp_age: kept
    assert staged in s3_served.s3.keys(s3_served.blobs)
    report = reg.gc(temp_age=0)
    assert staged in report.temp_files
    assert staged not in s3_served.s3.keys(s3_served.blobs)


def test_a_local_store_server_streams(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as server:
        token = admin_token(db_url, blobs)
        server.admin = token  # type: ignore[attr-defined]
        reg = jaxport.Registry(server.url, token=token)
        model = _model(3)
        digest = reg.push(model, "local").variants[0].digest
        with _api(server) as api:
            answer = api.post("/uploads", json={"parts": [{"digest": "1" * 64, "size": 5}]})
            assert answer.json()["urls"] == {} and answer.json()["upload"] is None
            assert answer.json()["missing"] == ["1" * 64]
            assert api.get(f"/blobs/{digest}/locations").status_code == 422
            counts = api.get("/transfer").json()
        assert counts["http_received"] > _payload()  # every byte came through the server
        before = _moved(server)
        assert reg.pull_bytes("local", platform="cpu") == model.dumps()
        assert _moved(server) - before > _payload()


def test_a_server_start_sweeps_old_staged_parts_only(s3):
    from jaxport.registry._blobs import open_blob_store

    store = open_blob_store(s3.url(), s3.storage_options())
    data = b"staged, never completed" * 100
    digest = hashlib.sha256(data).hexdigest()
    url, headers = store.urls.put_url("ab" * 16, digest, len(data), 60)
    assert httpx.put(url, content=data, headers=headers).status_code == 200
    assert store.urls.sweep(3600) == []  # young: an upload may still complete it
    assert store.urls.sweep(0) == [f"staging/{'ab' * 16}/{digest}"]
    assert list(store.strays()) == [] and not store.exists(digest)


def test_serve_presign_expires_0_sends_every_byte_through_the_server(s3, tmp_path, monkeypatch):
    db_url = f"sqlite:///{tmp_path / 'off.db'}"
    options = json.dumps(s3.storage_options())
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", options)
    blobs = s3.url() + "-off"
    token = admin_token(db_url, blobs)
    env = {"JAXPORT_BLOBS_OPTIONS": options, "JAXPORT_PRESIGN_EXPIRES": "900"}
    extra = ("--presign-expires", "0")  # the flag wins over the environment
    with serving(db_url, blobs, tmp_path / "serve.log", env=env, extra=extra) as server:
        data = b"a part" * 1000
        digest = hashlib.sha256(data).hexdigest()
        parts = [{"digest": digest, "size": len(data)}]
        with _api(server, token) as api:
            answer = api.post("/uploads", json={"parts": parts, "name": "x"}).json()
        assert answer["urls"] == {} and answer["expires_in"] == 0
        reg = jaxport.Registry(server.url, token=token)
        server.admin = token  # type: ignore[attr-defined]
        before = _moved(server)
        reg.push(_model(3), "through")
        assert _moved(server) - before > _payload()  # in as HTTP bodies, out to the store
        pulled = reg.pull_model("through", platform="cpu")
        np.testing.assert_array_equal(pulled.params["w00"], _model(3).params["w00"])


@pytest.mark.parametrize("value", ["forever", "-1", str(8 * 24 * 3600)])
def test_serve_refuses_a_bad_presign_expires_before_it_starts(tmp_path, value):
    db_url = f"sqlite:///{tmp_path / 'r.db'}"
    env = {**os.environ, "JAXPORT_PRESIGN_EXPIRES": value, "JAXPORT_REGISTRY": db_url,
           "JAXPORT_BLOBS": str(tmp_path / "b")}  # fmt: skip
    done = subprocess.run([JAXPORT, "serve", "--port", "0"], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "JAXPORT_PRESIGN_EXPIRES is 0 to 604800 seconds" in done.stderr
    assert "Traceback" not in done.stderr
    flag = subprocess.run([JAXPORT, "serve", "--presign-expires", "604801"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert flag.returncode == 2 and "Traceback" not in flag.stderr


def test_no_presigned_url_query_reaches_a_log_line(s3_served, caplog, tmp_path):
    """A presigned URL's query is its signature: a secret. httpx logs every request's URL at
    INFO, so the client sends the store's requests without httpx's client logging; nothing
    jaxport or httpx/httpcore logs at DEBUG during a presigned push and pull (lazy and whole)
    names a query of the store's URLs, nor does the server's log."""
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    model = _model(3)
    before = _moved(s3_served)
    with caplog.at_level(logging.DEBUG):
        reg.push(model, "quiet")
        lazy = reg.pull_model("quiet", platform="cpu")
        for name, value in model.params.items():
            np.testing.assert_array_equal(lazy.params[name], value)
        assert reg.pull_bytes("quiet", platform="cpu") == model.dumps()
    assert _moved(s3_served) - before < 0.05 * 2 * _payload()  # the bytes went to the store
    lines = [record.getMessage() for record in caplog.records]
    assert any("HTTP Request" in line for line in lines)  # httpx's INFO lines were captured
    server_log = (tmp_path / "serve.log").read_text(errors="replace")
    for text in [*lines, server_log]:
        assert "X-Amz-Signature" not in text, "a presigned URL's query in a log line"
        assert "X-Amz-Credential" not in text, "a presigned URL's query in a log line"
