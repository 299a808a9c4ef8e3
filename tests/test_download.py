"""The client's blob download against a careless or hostile server (a stand-in on 127.0.0.1):
a body longer than allowed is refused unread, a short or wrong body is never returned, 503s
are retried, an error answer is typed, and a proxy named in the environment is used."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

import jaxport
from jaxport.registry._download import download
from jaxport.registry._http import Http

BODY = b"jaxport" * 1000
DIGEST = hashlib.sha256(BODY).hexdigest()


class _Stand(http.server.BaseHTTPRequestHandler):
    """Answers each GET with the next of ``answers``: (status, headers, body)."""

    answers: ClassVar[list[tuple[int, dict[str, str], bytes]]] = []
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        status, headers, body = type(self).answers.pop(0)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def stand(monkeypatch) -> Iterator[type[_Stand]]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):  # the direct path
        monkeypatch.delenv(var.lower(), raising=False)
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("jaxport.registry._http.backoff", lambda attempt: None)
    monkeypatch.setattr("jaxport.registry._download.backoff", lambda attempt: None)
    handler = type("Stand", (_Stand,), {"answers": [], "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


def _ok(body: bytes = BODY, length: int | None = None) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Length": str(len(body) if length is None else length)}, body


def _get(stand: type[_Stand], max_size: int = 1 << 20) -> bytes:
    return download(Http(stand.url, "secret"), f"/blobs/{DIGEST}", DIGEST, max_size)  # type: ignore[attr-defined]


def test_the_body_is_returned_once_it_matches(stand, monkeypatch):
    def not_httpx(*a: object) -> bytes:
        raise AssertionError("read through httpx, not straight from the socket")

    monkeypatch.setattr("jaxport.registry._download._through_httpx", not_httpx)
    stand.answers.append(_ok())
    assert _get(stand) == BODY
    assert stand.seen == [f"/api/v1/blobs/{DIGEST}"]


def test_a_body_longer_than_allowed_is_refused_unread(stand):
    stand.answers.append(_ok(length=10**15))
    with pytest.raises(jaxport.IntegrityError, match="more than the"):
        _get(stand)


def test_a_claim_of_more_than_memory_holds_is_typed(stand):
    stand.answers.append(_ok(BODY, length=60 << 30))  # 60 GiB claimed, 7 kB sent
    with pytest.raises(jaxport.JaxportError, match=r"ended early|do not fit"):
        _get(stand, max_size=64 << 30)


def test_a_short_body_is_never_returned(stand):
    stand.answers.append(_ok(BODY[:-10], length=len(BODY)))
    with pytest.raises(jaxport.IntegrityError, match="ended early"):
        _get(stand)


def test_other_bytes_are_never_returned(stand):
    stand.answers.append(_ok(BODY[::-1]))
    with pytest.raises(jaxport.IntegrityError, match="do not match") as e:
        _get(stand)
    assert e.value.expected == DIGEST


def test_no_length_is_refused(stand):
    stand.answers.append((200, {}, BODY))
    with pytest.raises(jaxport.IntegrityError, match="no length"):
        _get(stand)


def test_a_length_that_only_looks_like_digits_is_refused(stand):
    stand.answers.append((200, {"Content-Length": "\u00b2"}, BODY))  # '²'.isdigit() is True
    with pytest.raises(jaxport.IntegrityError, match="no length"):
        _get(stand)


def test_a_url_with_credentials_goes_through_httpx(stand):
    stand.answers.append(_ok())
    url = stand.url.replace("http://", "http://user:pw@")  # type: ignore[attr-defined]
    assert download(Http(url, "t"), f"/blobs/{DIGEST}", DIGEST, 1 << 20) == BODY


def test_503_is_retried(stand):
    stand.answers += [(503, {"Content-Length": "0"}, b""), _ok()]
    assert _get(stand) == BODY
    assert len(stand.seen) == 2


def test_an_error_answer_is_typed(stand):
    body = b'{"error": {"type": "NotFoundError", "message": "no blob", "attrs": {}}}'
    stand.answers.append((404, {"Content-Length": str(len(body))}, body))
    with pytest.raises(jaxport.NotFoundError, match="no blob"):
        _get(stand)


def test_a_server_that_never_answers_is_unavailable(stand):
    with pytest.raises(jaxport.ServerUnavailableError, match="after 5 tries") as e:
        download(Http("http://127.0.0.1:9", "secret"), "/blobs/x", DIGEST, 10)  # nothing there
    assert "secret" not in str(e.value)


def test_a_proxy_in_the_environment_is_used(stand, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", stand.url)
    stand.answers.append(_ok())
    assert download(Http("http://registry.invalid:8000", "t"), "/blobs/d", DIGEST, 1 << 20) == BODY
    assert stand.seen == ["http://registry.invalid:8000/api/v1/blobs/d"]  # asked as a proxy


def test_no_proxy_bypasses_it(stand, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    stand.answers.append(_ok())
    assert _get(stand) == BODY
