"""A small in-memory OCI registry for the client's tests: enough of the distribution spec
(blobs, uploads by POST/PATCH/PUT, manifests, paginated tags, no referrers API) to push and
pull, optional Basic or Docker token auth, and ``overrides`` through which a test makes it
hostile: ``server.overrides[("GET", "/v2/r/blobs/")] = lambda handler: (status, headers, body)``
answers every request whose path starts with that prefix.

Every request's method, path and ``Authorization`` header is recorded in ``server.seen``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, dict[str, str], bytes]


class FakeRegistry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, auth: str | None = None, user: str = "u", password: str = "p"):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth, self.user, self.password = auth, user, password
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}
        self.tags: dict[str, str] = {}
        self.uploads: dict[str, bytearray] = {}
        self.overrides: dict[tuple[str, str], Callable[[_Handler], Answer | None]] = {}
        self.seen: list[tuple[str, str, str | None]] = []
        self.token = "tok-" + uuid.uuid4().hex
        self.page_size = 2

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeRegistry

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        s = self.server
        path = urlsplit(self.path).path
        s.seen.append((self.command, self.path, self.headers.get("Authorization")))
        for (method, prefix), answer in s.overrides.items():
            if method == self.command and path.startswith(prefix):
                self._body()
                result = answer(self)
                if result is not None:  # None: the override answered itself
                    self._send(*result)
                return
        if path == "/token":
            self._token()
            return
        if not self._authorized():
            return
        body = self._body()
        self._send(*_route(s, self.command, path, parse_qs(urlsplit(self.path).query), body, self))

    def _authorized(self) -> bool:
        s, given = self.server, self.headers.get("Authorization")
        basic = "Basic " + base64.b64encode(f"{s.user}:{s.password}".encode()).decode()
        if s.auth is None or given == (basic if s.auth == "basic" else f"Bearer {s.token}"):
            return True
        self._body()
        if s.auth == "basic":
            challenge = 'Basic realm="fake"'
        else:
            scope = "repository:r:pull,push"
            challenge = f'Bearer realm="http://{s.host}/token",service="fake",scope="{scope}"'
        error = {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}
        self._send(401, {"WWW-Authenticate": challenge}, json.dumps(error).encode())
        return False

    def _token(self) -> None:
        s = self.server
        basic = "Basic " + base64.b64encode(f"{s.user}:{s.password}".encode()).decode()
        if self.headers.get("Authorization") != basic:
            self._send(401, {}, b'{"details":"bad credentials"}')
            return
        self._send(
            200, {"Content-Type": "application/json"}, json.dumps({"token": s.token}).encode()
        )

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


_PATH = re.compile(
    r"/v2/(?P<name>.+?)/(?P<kind>blobs/uploads|blobs|manifests|tags|referrers)/(?P<ref>[^/]*)"
)


def _route(
    s: FakeRegistry, method: str, path: str, query: dict[str, list[str]], body: bytes, h: _Handler
) -> Answer:
    if path == "/v2/":
        return 200, {}, b"{}"
    match = _PATH.fullmatch(path)
    if match is None:
        return 404, {}, b'{"errors":[{"code":"UNSUPPORTED","message":"no such route"}]}'
    name, kind, ref = match["name"], match["kind"], match["ref"]
    if kind == "blobs":
        if ref not in s.blobs:
            return 404, {}, b'{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown"}]}'
        return 200, {"Docker-Content-Digest": ref}, s.blobs[ref]
    if kind == "blobs/uploads":
        return _upload(s, method, ref, query, body, name)
    if kind == "manifests":
        return _manifest(s, method, ref, body, h)
    if kind == "tags" and ref == "list":
        return _tags(s, query, name)
    return 404, {}, b'{"errors":[{"code":"UNSUPPORTED","message":"no such route"}]}'


def _upload(
    s: FakeRegistry, method: str, ref: str, query: dict[str, list[str]], body: bytes, name: str
) -> Answer:
    if method == "POST":
        upload = uuid.uuid4().hex
        s.uploads[upload] = bytearray()
        return 202, {"Location": f"/v2/{name}/blobs/uploads/{upload}"}, b""
    if ref not in s.uploads:
        return 404, {}, b'{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN","message":"no upload"}]}'
    if method == "DELETE":
        del s.uploads[ref]
        return 204, {}, b""
    s.uploads[ref] += body
    if method == "PATCH":
        return (
            202,
            {
                "Location": f"/v2/{name}/blobs/uploads/{ref}",
                "Range": f"0-{len(s.uploads[ref]) - 1}",
            },
            b"",
        )
    data = bytes(s.uploads.pop(ref))
    digest = query.get("digest", [""])[0]
    if _digest(data) != digest:
        return 400, {}, b'{"errors":[{"code":"DIGEST_INVALID","message":"digest mismatch"}]}'
    s.blobs[digest] = data
    return 201, {"Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest}, b""


def _manifest(s: FakeRegistry, method: str, ref: str, body: bytes, h: _Handler) -> Answer:
    if method == "PUT":
        digest = _digest(body)
        s.manifests[digest] = (h.headers.get("Content-Type", ""), body)
        if not ref.startswith("sha256:"):
            s.tags[ref] = digest
        return 201, {"Docker-Content-Digest": digest}, b""
    digest = s.tags.get(ref, ref)
    if digest not in s.manifests:
        return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
    media_type, data = s.manifests[digest]
    return 200, {"Content-Type": media_type, "Docker-Content-Digest": digest}, data


def _tags(s: FakeRegistry, query: dict[str, list[str]], name: str) -> Answer:
    names = sorted(s.tags)
    last = query.get("last", [""])[0]
    page = [t for t in names if t > last][: s.page_size]
    headers = {"Content-Type": "application/json"}
    if page and page[-1] != names[-1]:
        headers["Link"] = f'</v2/{name}/tags/list?n={s.page_size}&last={page[-1]}>; rel="next"'
    return 200, headers, json.dumps({"name": name, "tags": page}).encode()


@contextmanager
def fake_registry(**kwargs: Any) -> Iterator[FakeRegistry]:
    server = FakeRegistry(**kwargs)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
