"""The thin client's JSON answers are bounded (``registry/_http.py``): a server that sends more
than ``MAX_ANSWER_BYTES``, an encoded (compressed) body, or a body that drips in slower than the
client's timeout is refused with a typed error, and the client holds at most the limit."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Iterator

import pytest

import jaxport
from jaxport.registry import _http


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        kind = self.path.rsplit("/", 1)[-1]
        self.server.asked.append(self.headers.get("Accept-Encoding"))  # type: ignore[attr-defined]
        if kind == "ok":
            self._answer(b'{"fine": true}')
        elif kind == "big":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            chunk = b" " * 2**20
            try:
                for _ in range(_http.MAX_ANSWER_BYTES // len(chunk) + 8):
                    self.wfile.write(chunk)
            except OSError:  # the client hung up, as it should
                pass
        elif kind == "gzip":
            self._answer(gzip.compress(b"[" + b"0," * 2**20 + b"0]"), {"Content-Encoding": "gzip"})
        elif kind == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass

    def _answer(self, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.asked = []  # type: ignore[attr-defined]
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _client(server: http.server.ThreadingHTTPServer, timeout: float = 30.0) -> _http.Http:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return _http.Http(url, "s3cret-token", timeout=timeout)


def test_an_answer_is_read_as_sent(server):
    assert _client(server).json("GET", "/ok") == {"fine": True}
    assert server.asked == ["identity"]


def test_an_answer_over_the_limit_is_refused_without_holding_it(server):
    with pytest.raises(jaxport.RegistryError, match="more than 67108864 bytes") as e:
        _client(server).json("GET", "/big")
    assert "s3cret-token" not in str(e.value)


def test_an_encoded_answer_is_refused(server):
    """httpx decoded a compressed body whole before any limit could apply (a 1 MB gzip body
    of 2 GB was 2 GB in the client)."""
    with pytest.raises(jaxport.RegistryError, match="encoded as 'gzip'"):
        _client(server).json("GET", "/gzip")


def test_an_answer_that_drips_is_broken_off(server, monkeypatch):
    """A byte every 50 ms kept each read within httpx's timeout, so a 1,000-byte answer took
    50 s at any timeout; now the whole answer must come within it (retried, then refused)."""
    monkeypatch.setattr(_http, "ATTEMPTS", 2)
    monkeypatch.setattr(_http, "backoff", lambda attempt: None)
    started = time.monotonic()
    with pytest.raises(jaxport.ServerUnavailableError, match="ReadTimeout"):
        _client(server, timeout=1.0).json("GET", "/drip")
    assert time.monotonic() - started < 10
