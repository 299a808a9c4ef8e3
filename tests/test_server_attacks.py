"""The registry server against hostile clients: path traversal, out-of-range numbers, hostile
``Range`` headers, lying or oversized bodies, commits of parts never sent, deep and large JSON,
tokens where they must not count, a prefix-limited token probing other names, slow bodies and
concurrent uploads. Each attack gets a typed 4xx (the body of ``server/_errors.py``), never a
500 and never a hang; after each test the server still answers, and no secret (a token) nor
a traceback is in any answer or in the server's log.

One ``jaxport serve`` process (SQLite, ``--max-upload 100000``) serves the whole module: ``sin``
(versions 1 and 2), ``team-cos`` (version 1 holds the same archive as ``sin:2``) and the model
``mlp``; tokens ``admin``, ``team`` (write, prefix ``team-``) and ``reader`` (read).

Several of these were found by schemathesis against the same server's OpenAPI document, which
runs for minutes and is not part of the tests::

    schemathesis run http://127.0.0.1:PORT/api/v1/openapi.json -H "Authorization: Bearer $T" \\
        -c not_a_server_error,response_schema_conformance,status_code_conformance -n 200
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _server import Server, admin_token, serving, start

import jaxport
from jaxport.audit import encode_model_examples
from jaxport.registry._uploads import MAX_PARTS
from jaxport.registry._workdirs import commit_dir, workdir_root
from jaxport.server._connections import BODY_TIMEOUT, HEADER_TIMEOUT, LOG_BURST
from jaxport.server._limits import (
    MAX_BODY,
    MAX_DIGESTS,
    MAX_JSON_STRING,
    MAX_JSON_VALUES,
    MemoryBudget,
)

MAX_UPLOAD = 100_000
F32 = jnp.float32


@dataclasses.dataclass
class Target:
    server: Server
    admin: str
    team: str
    reader: str
    sin1: str  # the archive of sin:1 (hidden from team)
    shared: str  # the archive of sin:2 and team-cos:1
    mlp: str  # the model's archive
    parts: list[str]  # the model's part digests

    @property
    def api(self) -> str:
        return f"{self.server.url}/api/v1"

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.admin}"}

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.admin, self.team, self.reader)


def _exported(fn):
    return jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((3,), F32))


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attacks")
    db, blobs = f"sqlite:///{tmp / 'registry.db'}", str(tmp / "blobs")
    rng = np.random.default_rng(0)
    params = {f"l{i}": rng.standard_normal((8, 8)).astype(np.float32) for i in range(3)}
    model = jaxport.Model(params, {"f": lambda p, x: x @ p["l0"]},
                          {"f": [jax.ShapeDtypeStruct((2, 8), F32)]})  # fmt: skip
    with jaxport.Registry(db, blobs=blobs, upgrade=True) as reg:
        sin1 = reg.push(_exported(jnp.sin), "sin", aliases=["prod"]).variants[0].digest
        shared = reg.push(_exported(jnp.cos), "sin").variants[0].digest
        reg.push(_exported(jnp.cos), "team-cos")
        mlp = reg.push(model, "mlp").variants[0].digest
        with reg._backend.engine.connect() as conn:  # the model's part digests, from the rows
            from jaxport.registry._model_parts import parts_of

            variant = reg.get("mlp:1").variants[0]
            parts = [p.digest for p in parts_of(conn, variant.variant_id)]
    admin = admin_token(db, blobs)
    team = admin_token(db, blobs, "team", "write", prefixes=["team-"])
    reader = admin_token(db, blobs, "reader", "read")
    extra = ("--max-upload", str(MAX_UPLOAD))
    with serving(db, blobs, tmp / "serve.log", extra=extra) as server:
        yield Target(server, admin, team, reader, sin1, shared, mlp, parts)


@pytest.fixture
def t(target):
    """The module's server; afterwards it must still answer, with a clean log."""
    start = target.server.log.stat().st_size
    yield target
    r = httpx.get(f"{target.api}/names", headers=target.auth(), timeout=10)
    assert r.status_code == 200 and "sin" in r.json()["names"]
    log = target.server.log.read_bytes()[start:].decode("utf-8", "replace")
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    assert not any(secret in log for secret in target.secrets)


def _typed(r: httpx.Response, *statuses: int) -> dict:
    """The error of a typed 4xx answer (one of ``statuses``)."""
    assert r.status_code in statuses, (r.status_code, r.text[:500])
    error = r.json()["error"]
    assert set(error) == {"type", "message", "attrs"}
    return error


def _raw(t: Target, request: bytes, *, hang_up: bool = True, wait: float = 10.0) -> bytes:
    """What the server answers to hand-written request bytes within ``wait`` seconds;
    ``hang_up``: the client closes its side after them (else it sends nothing more)."""
    port = int(t.server.url.rsplit(":", 1)[1])
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(request)
        if hang_up:
            s.shutdown(socket.SHUT_WR)
        try:
            while not _complete(out) and (chunk := s.recv(65536)):
                out += chunk
        except TimeoutError:
            pass
    return out


def _complete(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole answer: its head and ``Content-Length`` bytes."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    return bool(sep) and length is not None and len(body) >= int(length.group(1))


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


# -- paths and parameters -------------------------------------------------------------------

TRAVERSALS = [
    "/blobs/..%2F..%2Fregistry.db", "/blobs/%2e%2e%2f%2e%2e%2fregistry.db", "/blobs/..",
    "/blobs/sha256%2F..%2F..%2Fregistry.db", "/blobs/" + "%D9%A0" * 64,  # Arabic-Indic zeros
    "/blobs/" + "\uff10" * 64, "/blobs/" + "A" * 64, "/blobs/" + "0" * 63 + "%00",
    "/blobs/" + "0" * 65, "/aliases/..%2F..%2Fetc", "/aliases/%2e%2e/history",
    "/aliases/sin%00", "/aliases/s%D1%96n", "/aliases/" + "a" * 5000,
    "/ref?reference=..%2F..%2Fetc%2Fpasswd", "/ref?reference=sha256:..%2F..%2F",
    "/ref?reference=sin%3A1%00", "/ref?reference=%EF%BC%B3in", "/resolve?reference=sin@..%2F",
    "/versions?name=..%2Fsin", "/signatures?reference=sin:1/../2", "/diff?a=sin:1&b=..",
    "/events?name=%2e%2e", "/findings?name=sin%2F..%2Fmlp",
]  # fmt: skip


@pytest.mark.parametrize("path", TRAVERSALS)
def test_path_traversal_in_digests_and_names(t, path):
    for method in ("GET", "HEAD"):
        r = httpx.request(method, t.api + path, headers=t.auth())
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text[:300])
        if method == "GET":
            _typed(r, r.status_code)
            assert b"SQLite format" not in r.content
    r = httpx.put(t.api + "/blobs/..%2F..%2Fregistry.db", content=b"x", headers=t.auth())
    _typed(r, 400, 404)


NUMBERS = [
    ("/versions", {"limit": 10**12}), ("/versions", {"limit": 0}), ("/versions", {"limit": -1}),
    ("/versions", {"after_name": "sin", "after_version": 0}), ("/versions", {"after_name": "sin"}),
    ("/versions", {"after_version": 1}),
    ("/versions", {"after_name": "sin", "after_version": 2**40}),
    ("/events", {"before": -1}), ("/events", {"before": 0}), ("/events", {"before": 2**64}),
    ("/events", {"limit": 10**6}), ("/search", {"after": 2**64}), ("/search", {"after": -1}),
    ("/search", {"limit": 10**12}), ("/search", {"nr_devices": 2**40}),
    ("/search", {"calling_convention_version": 2**70}), ("/findings", {"limit": 10**12}),
    ("/resolve", {"reference": "sin", "nr_devices": -1}), ("/ref", {"reference": "sin:0"}),
    ("/ref", {"reference": "sin:99999999999999999999"}), ("/ref", {"reference": "sin:-1"}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "params"), NUMBERS, ids=lambda x: str(x)[:40])
def test_huge_and_negative_numbers(t, path, params):
    _typed(httpx.get(t.api + path, params=params, headers=t.auth()), 400, 404, 422)


@pytest.mark.parametrize("path", ["/events?before=18446744073709551616", "/events?before=-1",
                                  "/names/sin/99999999999999999999", "/names/sin/-1",
                                  "/?page=10000000", "/names/sin?page=0"])  # fmt: skip
def test_pages_refuse_numbers_out_of_range(t, path):
    r = httpx.get(t.server.url + path, cookies={"jaxport_token": t.reader})
    assert 400 <= r.status_code < 500 and "<html" in r.text


# -- ranges ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "status", "span"), [
    ("bytes=-0", 400, None), ("bytes=5-1", 400, None), ("bytes=-", 400, None),
    ("bytes=0-0", 206, (0, 1)), ("bytes=-1", 206, (-1, None)), ("items=0-1", 400, None),
    ("bytes=" + ",".join(["0-1"] * 1000), 200, (0, None)), ("bytes=0-1,2-3", 200, (0, None)),
    ("bytes=99999999999999999999999999999-", 400, None),
    ("bytes=" + "9" * 5000 + "-", 400, None), ("bytes=0-" + "9" * 5000, 206, (0, None)),
    ("bytes=-" + "9" * 5000, 206, (0, None)), ("bytes=" + "0" * 5000 + "1-2", 206, (1, 3)),
])  # fmt: skip
@pytest.mark.parametrize("which", ["function", "model"])
def test_ranges(t, header, status, span, which):
    digest = t.sin1 if which == "function" else t.mlp
    whole = httpx.get(f"{t.api}/blobs/{digest}", headers=t.auth()).content
    r = httpx.get(f"{t.api}/blobs/{digest}", headers={**t.auth(), "Range": header})
    if status >= 400:
        _typed(r, status)
        return
    assert r.status_code == status
    assert r.content == whole[span[0] : span[1]]
    head = httpx.head(f"{t.api}/blobs/{digest}", headers={**t.auth(), "Range": header})
    assert head.status_code == status and int(head.headers["content-length"]) == len(r.content)


# -- uploads and commits --------------------------------------------------------------------


def test_upload_whose_content_length_lies(t):
    data = b"eleven byte"
    digest = hashlib.sha256(data).hexdigest()
    head = f"PUT /api/v1/blobs/{digest} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.admin}\r\n"
    request = f"{head}Content-Length: 5\r\nConnection: close\r\n\r\n".encode() + data
    short = _raw(t, request, hang_up=False)
    assert _status(short) == 422 and b"IntegrityError" in short  # 5 bytes: another digest
    cut = _raw(t, f"{head}Content-Length: 100\r\n\r\n".encode() + data)  # then the client hangs up
    assert cut == b"" or _status(cut) == 400
    assert _status(_raw(t, f"{head}Content-Length: -5\r\n\r\n".encode() + data)) == 400
    r = httpx.post(f"{t.api}/blobs/missing", json={"digests": [digest]}, headers=t.auth())
    assert r.json()["missing"] == [digest]  # nothing stored


def test_upload_over_max_upload(t):
    data = os.urandom(MAX_UPLOAD + 1)
    digest = hashlib.sha256(data).hexdigest()
    head = f"PUT /api/v1/blobs/{digest} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.admin}\r\n"
    declared = _raw(t, f"{head}Content-Length: {len(data)}\r\n\r\n".encode(), hang_up=False)
    assert _status(declared) == 413 and b"InvalidNameError" in declared

    def chunked():
        yield from (data[i : i + 4096] for i in range(0, len(data), 4096))

    r = httpx.put(f"{t.api}/blobs/{digest}", content=chunked(), headers=t.auth())  # no length
    assert f"at most {MAX_UPLOAD}" in _typed(r, 400)["message"]
    r = httpx.post(f"{t.api}/blobs/missing", json={"digests": [digest]}, headers=t.auth())
    assert r.json()["missing"] == [digest]


def _commit(t: Target, parts: object, size: int, **kw: object) -> httpx.Response:
    body = {"name": "team-x", "archives": [{"digest": "1" * 64, "size": size, "parts": parts}]}
    body.update(kw)
    return httpx.post(f"{t.api}/versions", json=body, headers=t.auth(), timeout=120)


def test_commits_of_hostile_parts(t):
    data = b"a part"
    d = hashlib.sha256(data).hexdigest()
    httpx.put(f"{t.api}/blobs/{d}", content=data, headers=t.auth()).raise_for_status()
    never = "2" * 64
    err = _typed(_commit(t, [{"position": 0, "digest": never, "offset": 0, "size": 6}], 6), 422)
    assert err["type"] == "IntegrityError" and err["attrs"]["expected"] == never
    overlapping = [{"position": i, "digest": d, "offset": i, "size": 6} for i in range(2)]
    assert "overlaps" in _typed(_commit(t, overlapping, 7), 400)["message"]
    negative = [{"position": 0, "digest": d, "offset": -6, "size": 6}]
    _typed(_commit(t, negative, 0), 400)
    start = time.monotonic()  # a part 1 TiB in: the zeros before it would be written
    far = [{"position": 0, "digest": d, "offset": 1 << 40, "size": 6}]
    assert "padding" in _typed(_commit(t, far, (1 << 40) + 6), 400)["message"]
    assert time.monotonic() - start < 10
    for malformed in ([{"digest": d}], [None], "parts", [{"position": "0", "digest": d,
                                                          "offset": 0, "size": 6}]):  # fmt: skip
        err = _typed(_commit(t, malformed, 6), 400, 422)
        assert "server" not in err["message"]  # the request is wrong, not an answer
    _typed(_commit(t, [{"position": 0, "digest": d, "offset": 0, "size": 6}], 6, vjp_order=-1),
           400, 422)  # fmt: skip
    with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
        assert "team-x" not in direct.names()


def _put(t: Target, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    httpx.put(f"{t.api}/blobs/{digest}", content=data, headers=t.auth()).raise_for_status()
    return digest


def test_commits_of_hostile_examples(t):
    """Golden examples are read back with np.load (no pickles) and never run on the server."""
    archive = jaxport.dumps(_exported(jnp.cos))
    d = _put(t, archive)
    parts = [{"position": 0, "digest": d, "offset": 0, "size": len(archive)}]

    def commit(examples: object) -> httpx.Response:
        body = {"name": "team-x", "examples": examples,
                "archives": [{"digest": d, "size": len(archive), "parts": parts}]}  # fmt: skip
        return httpx.post(f"{t.api}/versions", json=body, headers=t.auth(), timeout=120)

    never = "5" * 64
    err = _typed(commit({"digest": never, "kind": "function"}), 422)
    assert err["type"] == "IntegrityError" and err["attrs"]["expected"] == never
    assert _typed(commit({"digest": d, "kind": "function"}), 422)["type"] == "CorruptArchiveError"
    buf = io.BytesIO()
    np.savez(buf, meta=np.array([{"os.system": "echo pwned"}], dtype=object))  # a pickle inside
    err = _typed(commit({"digest": _put(t, buf.getvalue()), "kind": "function"}), 422)
    assert err["type"] == "CorruptArchiveError" and "meta.npy" in err["message"]  # unread
    for malformed in ({"digest": "../x", "kind": "function"}, {"digest": never, "kind": "x"}, 7):
        _typed(commit(malformed), 400, 422)
    for hostile in _hostile_npz():  # each a few hundred bytes
        err = _typed(commit({"digest": _put(t, hostile), "kind": "function"}), 422)
        assert err["type"] == "CorruptArchiveError", err
    model = encode_model_examples({"apply": [([np.ones(3, np.float32)], [np.ones(3)])]})
    err = _typed(commit({"digest": _put(t, model), "kind": "model"}), 400, 422)
    assert "sequence" in err["message"]  # a model's examples for a function archive
    with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
        assert "team-x" not in direct.names()


def _npz(entries: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array)
    return buf.getvalue()


def _hostile_npz() -> list[bytes]:
    """Examples blobs that once made the server answer 500 or hold gigabytes."""
    ok = _npy(np.frombuffer(b"{}", np.uint8))
    eight = _npy(np.zeros(8, np.uint8))
    lying = _npy(np.zeros(10, np.uint8)).replace(b"(10,)", b"(99999999999,)")  # a 1e11 claim

    def meta(m: object) -> bytes:
        return _npy(np.frombuffer(json.dumps(m).encode(), np.uint8))

    def leaf(dtype: str, shape: list[int]) -> bytes:
        return _npz({"meta.npy": meta([["0_in_0", dtype, shape]]), "0_in_0.npy": eight})

    return [
        b"PK\x03\x04 not a zip at all",
        _npz({"meta.npy": meta([[1, "float32", [1]]])}),  # a key that is not text
        _npz({"meta.npy": _npy(np.frombuffer(b"[" * 50_000, np.uint8))}),  # nested too deep
        _npz({"meta.npy": ok, "0_in_0.npy": lying}),
        _npz({"meta.npy": ok, "0_in_0.npy": _npy(np.zeros(1 << 21))}, zipfile.ZIP_DEFLATED),
        leaf("object", [1]),
        leaf("__class__", [1]),
        leaf("float32", [3]),  # 12 bytes asked of 8
    ]


def test_commit_of_a_million_parts(t):
    part = '{"position":0,"digest":"' + "3" * 64 + '","offset":0,"size":0}'

    def body(n: int) -> str:
        return ('{"name":"team-x","archives":[{"digest":"' + "4" * 64 + '","size":0,"parts":['
                + ",".join([part] * n) + "]}]}")  # fmt: skip

    headers = {**t.auth(), "Content-Type": "application/json"}
    r = httpx.post(f"{t.api}/versions", content=body(10**6), timeout=120, headers=headers)
    assert "at most" in _typed(r, 413)["message"]  # by its length, before it is read
    r = httpx.post(f"{t.api}/versions", content=body(MAX_PARTS + 1), timeout=120, headers=headers)
    assert f"1 to {MAX_PARTS} parts" in _typed(r, 400)["message"]


def test_deep_and_large_json_bodies(t):
    json_headers = {**t.auth(), "Content-Type": "application/json"}
    for path in ("/blobs/missing", "/versions", "/tokens", "/gc"):
        deep = b"[" * 100_000 + b"]" * 100_000  # 413 where a body is at most 64 KiB
        _typed(httpx.post(t.api + path, content=deep, headers=json_headers), 400, 413, 422)
        nested = b'{"digests": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}"
        _typed(httpx.post(t.api + path, content=nested, headers=json_headers), 400, 413, 422)
        shallow = b"[" * 9 + b"]" * 9  # within every limit of size, one level too deep
        error = _typed(httpx.post(t.api + path, content=shallow, headers=json_headers), 400)
        assert "deeper than 8" in error["message"]
    fifty = json.dumps({"name": "x" * (50 << 20), "archives": [{}]}).encode()
    r = httpx.post(f"{t.api}/versions", content=fifty, headers=json_headers, timeout=60)
    _typed(r, 413)
    long = json.dumps({"name": "x" * (MAX_JSON_STRING + 1), "archives": [{}]}).encode()
    r = httpx.post(f"{t.api}/versions", content=long, headers=json_headers, timeout=60)
    assert "characters" in _typed(r, 400)["message"]
    many = json.dumps({"digests": ["0" * 64] * MAX_DIGESTS}).encode()  # ~9 MB, each valid
    r = httpx.post(f"{t.api}/blobs/missing", content=many, headers=json_headers, timeout=60)
    assert r.status_code == 200 and r.json()["missing"] == ["0" * 64]
    head = (f"POST /api/v1/versions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.admin}\r\n"
            f"Content-Type: application/json\r\n")  # fmt: skip
    too_large = _raw(t, f"{head}Content-Length: {1 << 30}\r\n\r\n".encode(), hang_up=False)
    assert _status(too_large) == 413

    def endless():
        yield b'{"digests": ["'
        for _ in range(140):
            yield b"0" * (1 << 20)

    r = httpx.post(f"{t.api}/blobs/missing", content=endless(), headers=json_headers, timeout=60)
    _typed(r, 413)


def test_unauthenticated_writes_are_refused_before_their_body(t):
    for path in ("/versions", "/blobs/missing", "/blobs/" + "0" * 64, "/gc", "/tokens"):
        method = "PUT" if path.startswith("/blobs/0") else "POST"
        for auth in ("", "Authorization: Bearer jxp_unknown\r\n"):
            request = (f"{method} /api/v1{path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: "
                       f"application/json\r\nContent-Length: 1000000000\r\n\r\n{{")  # fmt: skip
            answer = _raw(t, request.encode(), hang_up=False)  # the 1 GB never comes
            assert _status(answer) == 401 and b"jxp_unknown" not in answer


# -- tokens ---------------------------------------------------------------------------------


def test_tokens_count_only_in_the_authorization_header(t):
    for params in ({"token": t.admin}, {"access_token": t.admin}, {"jaxport_token": t.admin}):
        _typed(httpx.get(f"{t.api}/names", params=params), 401)
        _typed(httpx.post(f"{t.api}/gc", params=params, json={"dry_run": True}), 401)
    cookie = {"jaxport_token": t.admin}  # reads only (the pages): never a write
    for method, path, body in (("POST", "/gc", {"dry_run": True}), ("POST", "/tokens",
                               {"name": "evil", "scope": "admin"}), ("DELETE", "/names/sin", None),
                               ("PUT", "/aliases/sin/evil", {"version": 1})):  # fmt: skip
        r = httpx.request(method, t.api + path, json=body, cookies=cookie)
        _typed(r, 401)
    assert httpx.get(f"{t.api}/aliases/sin", headers=t.auth()).json() == {"prod": 1}
    for header in (f"Basic {t.admin}", f"Token {t.admin}", "Bearer", f"Bearer {t.admin}x",
                   "Bearer " + "x" * 20_000):  # fmt: skip
        r = httpx.get(f"{t.api}/names", headers={"Authorization": header})
        assert t.admin not in _typed(r, 401)["message"]


def test_unknown_and_revoked_tokens(t):
    admin = jaxport.Registry(t.server.url, token=t.admin)
    made = admin.tokens.create(f"gone-{time.monotonic_ns()}", "read")
    admin.tokens.revoke(made.info.name)
    unknown = "jxp_" + "A" * 43
    times: dict[str, list[float]] = {"revoked": [], "unknown": []}
    for _ in range(15):
        for label, secret in (("revoked", made.secret), ("unknown", unknown)):
            begin = time.perf_counter()
            r = httpx.get(f"{t.api}/names", headers={"Authorization": f"Bearer {secret}"})
            times[label].append(time.perf_counter() - begin)
            assert secret not in r.text and _typed(r, 401)["type"] == "AuthenticationError"
    # one lookup by the secret's sha256 either way: no oracle worth the name (a loose bound,
    # the machine is shared)
    ratio = statistics.median(times["revoked"]) / statistics.median(times["unknown"])
    assert 0.25 < ratio < 4
    r = httpx.post(f"{t.server.url}/login", data={"token": made.secret})
    assert r.status_code == 401 and made.secret not in r.text
    r = httpx.post(f"{t.server.url}/login", data={"token": t.reader})  # read without a thread
    assert r.status_code == 303 and "httponly" in r.headers["set-cookie"].lower()
    assert t.reader not in r.headers["location"]
    for bad in ("&".join(f"f{i}=1" for i in range(50)), "token=" + "x" * 9000, "token=%ff%00"):
        r = httpx.post(f"{t.server.url}/login", content=bad,
                       headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert 400 <= r.status_code < 500


def test_limits_of_time_and_expiry(t):
    for path, body in (("/verify", '{"deep": true, "timeout": %s}'),
                       ("/audits", '{"reference": "sin:1", "timeout": %s}'),
                       ("/tokens", '{"name": "far", "expires_in": %s}')):  # fmt: skip
        for value in ("NaN", "Infinity", "-1", "0", "1e300"):
            r = httpx.post(t.api + path, content=body % value, timeout=60,
                           headers={**t.auth(), "Content-Type": "application/json"})  # fmt: skip
            _typed(r, 400, 422)


# -- a prefix-limited token -----------------------------------------------------------------

HIDDEN = re.compile(r"\b(sin|mlp)\b")  # the names outside the team token's prefix


def test_prefix_limited_token_learns_no_other_name(t):
    team = t.auth(t.team)
    for ref in ("sin", "sin:1", "sin@prod", "mlp"):  # named: refused before any lookup
        for path, params in _reference_reads(ref):
            _typed(httpx.get(t.api + path, params=params, headers=team), 403)
    for ref in (f"sha256:{t.sin1[:12]}", f"sha256:{t.sin1}", f"sha256:{t.mlp}"):
        for path, params in _reference_reads(ref):  # reached: as if no archive had it
            error = _typed(httpx.get(t.api + path, params=params, headers=team), 404)
            assert not HIDDEN.search(error["message"]), (path, ref, error)
    for path in ("/versions", "/search", "/findings", "/events", "/names",
                 "/search?fun_name=sin", "/versions?after_name=a&after_version=1"):  # fmt: skip
        r = httpx.get(t.api + path, headers=team)
        assert r.status_code == 200 and not HIDDEN.search(r.text), (path, r.text[:300])
        assert not any(d in r.text for d in (t.sin1, t.mlp, *t.parts))
    for name in ("sin", "mlp"):
        for path in (f"/aliases/{name}", f"/aliases/{name}/history", f"/versions?name={name}",
                     f"/events?name={name}", f"/findings?name={name}"):  # fmt: skip
            _typed(httpx.get(t.api + path, headers=team), 403)
    for digest in (t.sin1, t.mlp, *t.parts):  # content-addressed, and still not readable
        for method in ("GET", "HEAD"):
            r = httpx.request(method, f"{t.api}/blobs/{digest}", headers=team)
            assert r.status_code == 404 and not HIDDEN.search(r.text), method
    r = httpx.get(f"{t.api}/blobs/{t.shared}", headers=team)  # team-cos:1 holds it too
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == t.shared
    audit = {"reference": f"sha256:{t.sin1[:12]}", "level": "static"}
    _typed(httpx.post(f"{t.api}/audits", json=audit, headers=team, timeout=120), 404)
    client = jaxport.Registry(t.server.url, token=t.team)
    assert hashlib.sha256(client.pull_bytes("team-cos")).hexdigest() == t.shared


def _reference_reads(ref: str) -> list[tuple[str, dict[str, str]]]:
    return [("/ref", {"reference": ref}), ("/resolve", {"reference": ref}),
            ("/signatures", {"reference": ref}), ("/diff", {"a": ref, "b": "team-cos:1"}),
            ("/diff", {"a": "team-cos:1", "b": ref})]  # fmt: skip


# -- slow and concurrent clients ------------------------------------------------------------


def test_slow_bodies_do_not_starve_other_clients(t):
    """More stalled bodies than the server has threads: uploads (a write token), sign-in forms
    and unauthenticated writes (none), each sending a few bytes of what it announced."""
    port = int(t.server.url.rsplit(":", 1)[1])
    digest = "5" * 64
    stalled = [
        f"PUT /api/v1/blobs/{digest} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.team}\r\n"
        "Content-Length: 1000\r\n\r\nxxxxx",
        "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        "Content-Length: 1000\r\n\r\ntoken=",
        "POST /api/v1/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{",
    ]
    sockets = []
    try:
        for i in range(150):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(stalled[i % 3].encode())
            sockets.append(s)
        time.sleep(1.0)
        begin = time.monotonic()
        assert httpx.get(f"{t.api}/names", headers=t.auth(), timeout=10).status_code == 200
        assert httpx.get(t.server.url + "/", cookies={"jaxport_token": t.reader},
                         timeout=10).status_code == 200  # fmt: skip
        assert httpx.get(f"{t.api}/blobs/{t.mlp}", headers=t.auth(), timeout=10).is_success
        assert time.monotonic() - begin < 10
    finally:
        for s in sockets:
            s.close()


def test_many_concurrent_uploads_of_one_part(t):
    data = os.urandom(MAX_UPLOAD // 2)
    digest = hashlib.sha256(data).hexdigest()

    def upload(_: int) -> int:
        for _attempt in range(200):  # past 8 uploads of one token: 503, retried as the client does
            r = httpx.put(f"{t.api}/blobs/{digest}", content=data, headers=t.auth(), timeout=60)
            if r.status_code != 503:
                break
            time.sleep(0.05)
        return r.status_code

    with ThreadPoolExecutor(24) as pool:
        assert set(pool.map(upload, range(48))) == {201}
    r = httpx.get(f"{t.api}/blobs/{digest}", headers=t.auth())
    assert r.content == data
    shard = Path(t.server.blobs) / "sha256" / digest[:2]
    # no temporary file left beside it (the shard may hold other blobs whose digest starts alike)
    names = [p.name for p in shard.iterdir()]
    assert digest in names and all(re.fullmatch("[0-9a-f]{64}", n) for n in names), names


def test_an_error_after_the_answer_started_cuts_it_short_quietly(t):
    admin = jaxport.Registry(t.server.url, token=t.admin)
    data = jaxport.dumps(_exported(jnp.tanh))
    digest = admin.push(data, "victim").variants[0].digest
    with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
        path = Path(direct.blobs.path(digest))
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    start = t.server.log.stat().st_size
    with pytest.raises(jaxport.IntegrityError):
        admin.pull_bytes("victim")
    with httpx.stream("GET", f"{t.api}/blobs/{digest}", headers=t.auth()) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.HTTPError):  # fewer bytes than announced
            r.read()
    time.sleep(0.2)
    log = t.server.log.read_bytes()[start:].decode()
    assert "cut short: IntegrityError" in log and str(t.server.blobs) not in log
    admin.delete("victim", force=True)


# -- resources: bodies, commits, connections, memory, temporaries (issue 24) ---------------


def test_json_bodies_are_bounded_per_route(t):
    """F3: a 127 MiB metadata body stalled every other request for 40 s; bodies are now
    bounded by route (413 before a byte is read) and parsed off the event loop within limits
    of values, depth and string length."""
    head = (f"POST /api/v1/versions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.admin}\r\n"
            "Content-Type: application/json\r\n")  # fmt: skip
    declared = _raw(t, f"{head}Content-Length: {127 << 20}\r\n\r\n{{".encode(), hang_up=False)
    assert _status(declared) == 413 and b"at most" in declared
    json_headers = {**t.auth(), "Content-Type": "application/json"}
    zeros = b'{"digests": [' + b",".join([b"0"] * (MAX_JSON_VALUES + 1)) + b"]}"  # ~2 MB
    r = httpx.post(f"{t.api}/blobs/missing", content=zeros, headers=json_headers, timeout=60)
    assert "values" in _typed(r, 400)["message"]
    keys = {"name": "team-x", "archives": [{}], "metadata": {str(i): "" for i in range(2000)}}
    r = httpx.post(f"{t.api}/versions", json=keys, headers=t.auth(), timeout=60)
    assert "metadata" in _typed(r, 422)["message"]
    r = httpx.post(f"{t.api}/gc", content=b" " * (MAX_BODY + 1), headers=json_headers)
    assert _typed(r, 413)


def _split(archive: bytes) -> list[dict[str, object]]:
    from jaxport.export import inspect
    from jaxport.export._internal import split_archive
    from jaxport.export._parts import ArchiveChunks

    parts = split_archive(ArchiveChunks([archive]), inspect(archive))
    return [{"position": p.position, "digest": p.digest, "offset": p.offset, "size": p.size}
            for p in parts]  # fmt: skip


def test_commit_parts_are_the_archive_layout(t):
    """F4: one part named 1,024 times wrote 1 GiB to the temporary directory. A commit's
    parts must be what its archive's header lays out, before a byte is written."""
    archive = jaxport.dumps(_exported(jnp.exp))
    d, n = _put(t, archive), len(archive)
    repeated = [{"position": i, "digest": d, "offset": i * n, "size": n} for i in range(8)]
    err = _typed(_commit(t, repeated, 8 * n), 400)
    assert "lays out" in err["message"]
    params = {"w": np.ones((64, 64), np.float32), "b": np.zeros(64, np.float32)}
    model = jaxport.Model(params, {"f": lambda p, x: x @ p["w"] + p["b"]},
                          {"f": [jax.ShapeDtypeStruct((2, 64), F32)]})  # fmt: skip
    data = model.dumps()
    parts = _split(data)
    for p in parts:
        _put(t, data[p["offset"] : p["offset"] + p["size"]])  # type: ignore[operator]
    w = parts[1]
    twice = [*parts, {**w, "position": len(parts), "offset": len(data)}]
    body = {"name": "team-x", "archives": [{"digest": hashlib.sha256(data).hexdigest(),
                                            "size": len(data) + int(w["size"]),  # type: ignore[call-overload]
                                            "parts": twice}]}  # fmt: skip
    r = httpx.post(f"{t.api}/versions", json=body, headers=t.auth(), timeout=120)
    assert "lays out" in _typed(r, 400)["message"]
    big = [{"position": 0, "digest": d, "offset": 0, "size": MAX_UPLOAD + 1}]
    assert "bytes together" in _typed(_commit(t, big, MAX_UPLOAD + 1), 400)["message"]
    with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
        assert "team-x" not in direct.names()
        root = workdir_root(direct.blobs)
    assert not root.exists() or not any(root.iterdir())  # every commit's directory removed


def test_slow_heads_and_bodies_are_cut_off(t):
    """F5: a client sending its head, or a sign-in form, a byte at a time was never timed
    out. Heads get ``HEADER_TIMEOUT`` seconds, bodies ``BODY_TIMEOUT``."""
    port = int(t.server.url.rsplit(":", 1)[1])
    slow = {
        "head": b"GET /api/v1/names HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        "body": b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-url"
        b"encoded\r\nContent-Length: 1000\r\n\r\ntoken=",
    }
    sockets = {k: socket.create_connection(("127.0.0.1", port), timeout=5) for k in slow}
    answers: dict[str, bytes] = {}
    try:
        for s, start in zip(sockets.values(), slow.values(), strict=True):
            s.sendall(start)
        for _ in range(int(BODY_TIMEOUT + HEADER_TIMEOUT) + 30):  # a byte a second
            for key, s in sockets.items():
                if key in answers:
                    continue
                try:
                    s.sendall(b"a")
                    s.settimeout(1.0 / len(sockets))
                    chunk = s.recv(65536)
                except TimeoutError:
                    continue
                except OSError:  # reset: closed by the server
                    chunk = b""
                answers[key] = chunk
            if len(answers) == len(sockets):
                break
    finally:
        for s in sockets.values():
            s.close()
    assert set(answers) == set(slow), answers  # both cut off
    assert answers["head"] == b""  # closed, no answer
    assert answers["body"] == b"" or _status(answers["body"]) == 400


@pytest.mark.parametrize("head", [
    b"POST /api/v1/gc HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n",  # 401 first
    b"GET /login HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n",  # never read
], ids=["refused-write", "unread-body"])  # fmt: skip
def test_a_body_left_unread_after_the_answer_is_cut_off(t, head):
    """F5: after an answer that did not read the body (an unauthenticated write's 401, a page),
    a client without a token sending a byte now and then held the connection forever
    (uvicorn's keep-alive timer restarts on every byte). It ends ``BODY_TIMEOUT`` seconds
    after the answer."""
    port = int(t.server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        answer = b""
        while not _complete(answer):
            answer += s.recv(65536)
        assert _status(answer) in (200, 401)
        closed = False
        for _ in range(int(BODY_TIMEOUT + HEADER_TIMEOUT) + 30):  # a byte a second
            try:
                s.sendall(b"a")
                s.settimeout(1.0)
                closed = s.recv(65536) == b""
            except TimeoutError:
                continue
            except OSError:  # reset: closed by the server
                closed = True
            if closed:
                break
    assert closed


def test_a_fifo_in_the_blob_store_is_refused_not_waited_on(t):
    """F9: a FIFO planted in the blob store made pull and verify block forever."""
    admin = jaxport.Registry(t.server.url, token=t.admin)
    digest = admin.push(jaxport.dumps(_exported(jnp.arctan)), "fifo-victim").variants[0].digest
    with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
        path = Path(direct.blobs.path(digest))
    data = path.read_bytes()
    path.unlink()
    os.mkfifo(path)
    try:
        r = httpx.get(f"{t.api}/blobs/{digest}", headers=t.auth(), timeout=30)
        _typed(r, 404, 422)
        outcome: list[BaseException] = []

        def pull() -> None:  # a direct pull, which opened the FIFO and waited for a writer
            with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
                try:
                    direct.pull_bytes("fifo-victim")
                except BaseException as error:
                    outcome.append(error)

        puller = threading.Thread(target=pull, daemon=True)
        puller.start()
        puller.join(timeout=60)
        assert not puller.is_alive() and isinstance(outcome[0], jaxport.IntegrityError)
        report = admin.verify()  # through the server: every blob read
        assert digest in {p.digest for p in report.problems}
    finally:
        path.unlink()
        path.write_bytes(data)
    admin.delete("fifo-victim", force=True)


def test_an_aborted_push_says_what_it_left_and_gc_frees_it(t, monkeypatch):
    """F8: a push stopped by Ctrl-C left its parts for an hour, while the README said gc
    freed them: it now says what it left and how to free it, and ``gc --min-age 0`` does."""
    client = jaxport.Registry(t.server.url, token=t.admin)
    data = jaxport.dumps(_exported(jnp.cosh))
    real = client._backend._http.json

    def interrupted(method: str, path: str, **kw: object) -> object:
        if path == "/versions":
            raise KeyboardInterrupt  # after the part arrived, before the commit
        return real(method, path, **kw)

    monkeypatch.setattr(client._backend._http, "json", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        client.push(data, "team-aborted")
    note = " ".join(getattr(caught.value, "__notes__", ()))
    assert f"{len(data):,} bytes" in note and "jaxport gc --min-age 0" in note
    monkeypatch.undo()
    digest = hashlib.sha256(data).hexdigest()
    kept = client.gc(dry_run=True)
    assert digest in kept.kept_young  # as the README says: kept for --min-age
    assert digest in client.gc(min_age=0).digests


def _killed_commit_dir(blobs: str) -> Path:
    """A commit directory whose process was killed with SIGKILL mid-commit."""
    code = ("import sys, time; from jaxport.registry._blobs import LocalBlobStore; "
            "from jaxport.registry._workdirs import commit_dir\n"
            "with commit_dir(LocalBlobStore(sys.argv[1])) as d:\n"
            "    (d / 'x.jaxport').write_bytes(b'0' * 4096)\n"
            "    print(d, flush=True); time.sleep(600)")  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", code, blobs], stdout=subprocess.PIPE,
                             cwd=Path(blobs).parent)  # fmt: skip
    assert child.stdout is not None
    with child.stdout:
        path = Path(child.stdout.readline().decode().strip())
    child.kill()
    child.wait(timeout=30)
    assert (path / "x.jaxport").exists()
    return path


def test_killed_commits_are_swept_by_gc_and_server_start(t, tmp_path):
    """F8: ``kill -9`` of the server during a commit left ``jaxport-commit-*`` directories
    that gc never removed. They live under one root per blob store, locked while in use."""
    dead = _killed_commit_dir(t.server.blobs)
    with jaxport.Registry(t.server.db_url, blobs=t.server.blobs) as direct:
        assert dead.parent == workdir_root(direct.blobs)
        with commit_dir(direct.blobs) as live:  # a commit in flight: never touched
            report = jaxport.Registry(t.server.url, token=t.admin).gc(dry_run=True)
            assert str(dead) in report.temp_files and dead.exists()
            report = jaxport.Registry(t.server.url, token=t.admin).gc()
            assert str(dead) in report.temp_files and str(live) not in report.temp_files
            assert not dead.exists() and live.exists()
    dead = _killed_commit_dir(t.server.blobs)
    with serving(t.server.db_url, t.server.blobs, tmp_path / "second.log"):
        assert not dead.exists()  # swept as the server started


@pytest.fixture(scope="module")
def strict(tmp_path_factory, target):
    """A second server over the module's registry: ``--memory-budget 16 MiB``, started with
    a soft limit of 256 open files (macOS's default, which the server raises)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
    try:
        extra = ("--memory-budget", str(BUDGET), "--max-upload", str(64 << 20))
        server = start(target.server.db_url, target.server.blobs,
                       tmp_path_factory.mktemp("strict") / "serve.log", extra=extra)  # fmt: skip
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    yield dataclasses.replace(target, server=server)
    server.kill()


BUDGET = 16 << 20


def test_crowds_of_connections_and_log_floods(strict):
    """F5: 300 idle connections made reads time out at a 256-file limit, and asyncio wrote
    28 MB of tracebacks in 35 s; the server raises its open-file limit and rate-limits logs."""
    limits = Path(f"/proc/{strict.server.process.pid}/limits").read_text()
    soft, hard = re.search(r"Max open files\s+(\d+)\s+(\d+)", limits).groups()  # type: ignore[union-attr]
    assert soft == hard
    port = int(strict.server.url.rsplit(":", 1)[1])
    idle = []
    try:
        for _ in range(300):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        r = httpx.get(f"{strict.api}/names", headers=strict.auth(), timeout=30)
        assert r.status_code == 200
    finally:
        for s in idle:
            s.close()
    start_at = strict.server.log.stat().st_size
    for _ in range(200):  # each one a warning of uvicorn's
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            with contextlib.suppress(OSError):
                s.recv(1024)
    time.sleep(0.5)
    log = strict.server.log.read_bytes()[start_at:].decode("utf-8", "replace")
    assert 0 < log.count("Invalid HTTP request") <= LOG_BURST + 5, log[-2000:]


def _ratio_bomb(decompressed: int) -> bytes:
    """A model archive of a few hundred KB whose one tensor decompresses to
    ``decompressed`` bytes (within the reader's default ratio of 1,000)."""
    a = np.zeros(decompressed, np.uint8)
    a[::2048] = np.random.default_rng(0).integers(1, 255, len(a[::2048]), dtype=np.uint8)
    model = jaxport.Model({"t": a.view(np.float32)}, {"f": lambda p, x: x + p["t"][:3]},
                          {"f": [jax.ShapeDtypeStruct((3,), F32)]})  # fmt: skip
    return model.dumps(compress=True)


def test_memory_budget(strict):
    """F6: four 1.1 MB ratio-bomb archives committed at once took the server to 4.3 GiB. A
    commit's memory is known from its headers before it is allocated, and all requests
    together stay within ``--memory-budget``."""
    bomb = _ratio_bomb(2 * BUDGET)
    assert len(bomb) < BUDGET // 16
    client = jaxport.Registry(strict.server.url, token=strict.admin)
    with pytest.raises(jaxport.InvalidNameError, match="server memory"):
        client.push(bomb, "bomb")
    assert "bomb" not in client.names()
    json_headers = {**strict.auth(), "Content-Type": "application/json"}
    large = json.dumps({"digests": ["0" * 64] * (BUDGET // 8 // 66 + 10)}).encode()
    r = httpx.post(f"{strict.api}/blobs/missing", content=large, headers=json_headers)
    assert "server memory" in _typed(r, 400)["message"]  # 8x its size does not fit
    port = int(strict.server.url.rsplit(":", 1)[1])
    head = (f"POST /api/v1/blobs/missing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{strict.admin}\r\nContent-Type: application/json\r\n")  # fmt: skip
    holding = (BUDGET * 3 // 4) // 8  # its share: 3/4 of the budget, held while it is read
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"{head}Content-Length: {holding}\r\n\r\n{{".encode())
        time.sleep(2.0)  # its share is taken (an order, not a timing, is asserted)
        other = json.dumps({"digests": ["0" * 64] * 2000}).ljust(BUDGET // 16)  # 1/2 of it
        r = httpx.post(
            f"{strict.api}/blobs/missing", content=other, headers=json_headers, timeout=60
        )  # it waits BUDGET_WAIT seconds first
        assert _typed(r, 503)["type"] == "ServerUnavailableError"
        assert r.headers["retry-after"] == "1"
    budget = MemoryBudget(100, wait=0.1)
    with budget.reserve(60, "one"), pytest.raises(jaxport.ServerUnavailableError, match="busy"):
        budget.acquire(60, "another")
    with budget.reserve(60, "another"):
        assert budget.held == 60
