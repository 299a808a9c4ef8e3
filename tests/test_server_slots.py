"""The server's thread slots (``server/_bridge.py``; issue 24 §2): work that may last hours
(audits, verify, retention runs, the watcher) runs in slots of its own, so that one audit
token's requests, however long, never hold up every team's commits and gc; and one token's
uploads, however slow, hold at most ``UPLOADS_PER_TOKEN`` of the upload slots."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import pytest

import jaxport
from jaxport.server._bridge import LONG, UPLOADS_PER_TOKEN

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture
def served(tmp_path):
    from fastapi.testclient import TestClient

    from jaxport.server import create_app

    reg = jaxport.Registry(f"sqlite:///{tmp_path}/r.db", blobs=str(tmp_path / "blobs"))
    reg.push(jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((2,), jnp.float32)), "f")
    secret = reg.tokens.create("admin", "admin").secret
    with TestClient(create_app(reg)) as client:
        client.headers["Authorization"] = f"Bearer {secret}"
        yield reg, client
    reg.close()


def test_audits_that_run_long_never_take_the_commits_slots(served, monkeypatch):
    reg, client = served
    release, lock, inside = threading.Event(), threading.Lock(), [0]

    def held_audit(*args, **kwargs):
        with lock:
            inside[0] += 1
        release.wait(30)
        return []

    monkeypatch.setattr(reg, "audit", held_audit)
    answers: list[int] = []
    audits = [
        threading.Thread(
            target=lambda: answers.append(client.post("/api/v1/audits", json={}).status_code)
        )
        for _ in range(LONG + 2)
    ]
    for t in audits:
        t.start()
    try:
        deadline = time.monotonic() + 20
        while inside[0] < LONG and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert inside[0] == LONG  # the rest wait for a slot of their own kind
        gc_answer: list[int] = []
        gc = threading.Thread(
            target=lambda: gc_answer.append(
                client.post("/api/v1/gc", json={"dry_run": True}).status_code
            )
        )
        gc.start()
        gc.join(20)
        assert gc_answer == [200]  # a commit's slot was free while the audits ran
    finally:
        release.set()
        for t in audits:
            t.join(30)
    assert answers == [200] * (LONG + 2)


def test_one_tokens_slow_uploads_leave_slots_for_another_token(served, monkeypatch):
    reg, client = served
    other = reg.tokens.create("team-b", "write").secret
    release, lock, inside = threading.Event(), threading.Lock(), []

    def held_receive(digest, chunks, max_size):
        with lock:
            inside.append(digest)
        release.wait(30)
        return 1

    monkeypatch.setattr(reg, "receive_blob", held_receive)
    answers: list[int] = []

    def upload(i: int, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = client.put(f"/api/v1/blobs/{i:064x}", content=b"x", headers=headers)
        answers.append(answer.status_code)

    slow = [threading.Thread(target=upload, args=(i,)) for i in range(UPLOADS_PER_TOKEN)]
    b = threading.Thread(target=upload, args=(100, other))
    for t in slow:
        t.start()
    try:
        deadline = time.monotonic() + 20
        while len(inside) < UPLOADS_PER_TOKEN and time.monotonic() < deadline:
            time.sleep(0.01)
        extra = client.put(f"/api/v1/blobs/{99:064x}", content=b"x")
        assert extra.status_code == 503 and extra.headers["Retry-After"] == "1"
        assert "uploads in progress" in extra.json()["error"]["message"]
        b.start()
        deadline = time.monotonic() + 20
        while f"{100:064x}" not in inside and time.monotonic() < deadline:
            time.sleep(0.01)
        assert f"{100:064x}" in inside  # another token's upload started at once
    finally:
        release.set()
        for t in [*slow, b]:
            if t.ident is not None:  # started
                t.join(30)
    assert answers == [201] * (UPLOADS_PER_TOKEN + 1)
    assert client.app.state.token_uploads == {}
