"""Requests to presigned URLs (``registry/_store_requests.py``) go through the proxy the
environment names, as an ``httpx.Client`` would, and skip it for ``NO_PROXY`` hosts."""

from __future__ import annotations

import http.server
import threading

import httpx
import pytest

from jaxport.registry._store_requests import StoreRequests, _environment_proxy


@pytest.fixture
def proxy():
    """An HTTP proxy on 127.0.0.1 that answers every request itself, recording its target."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_the_environments_proxy_is_used_and_no_proxy_honoured(monkeypatch, proxy):
    url, seen = proxy
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    assert _environment_proxy("http://store.invalid/b/k?X-Amz-Signature=s") is None
    monkeypatch.setenv("HTTP_PROXY", url)
    monkeypatch.setenv("NO_PROXY", "skip.invalid")
    assert _environment_proxy("http://skip.invalid/b/k") is None
    with StoreRequests(httpx.Timeout(5.0)) as requests:
        answer = requests.send("GET", "http://store.invalid/b/k?X-Amz-Signature=s")
        assert answer.status_code == 200 and answer.read() == b"ok"
        answer.close()
    assert seen == ["http://store.invalid/b/k?X-Amz-Signature=s"]
