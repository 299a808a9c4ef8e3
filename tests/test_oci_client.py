"""The OCI distribution client (``registry/_oci_client.py``, ``_oci_auth.py``, ``_oci_url.py``)
against a small fake registry (``tests/_oci_fake.py``): push and pull, the token flow,
credentials from the environment and the Docker config, and hostile answers (wrong digests,
oversized manifests, redirects to other hosts, truncated blobs, bad JSON, error statuses),
each a typed error that stores nothing and names no credential. The real registry
(docker-registry) and an independent client (oras) are in ``test_oci_registry.py``."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
from _oci_fake import fake_registry

from jaxport import (
    AuthenticationError,
    IntegrityError,
    InvalidNameError,
    NotFoundError,
    OciError,
    PermissionDeniedError,
)
from jaxport.registry import _oci_client, _oci_hash, _oci_limits, _oci_transport
from jaxport.registry._oci_auth import Credentials, find_credentials, parse_challenge
from jaxport.registry._oci_client import OciRepository, sha256_digest
from jaxport.registry._oci_url import parse_oci_url

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
SECRET = "hunter2-not-to-be-printed"


@pytest.fixture(autouse=True)
def _no_credentials(monkeypatch, tmp_path):
    for name in ("JAXPORT_OCI_USERNAME", "JAXPORT_OCI_PASSWORD", "JAXPORT_OCI_INSECURE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))


def _login(monkeypatch, user="u", password="p"):
    monkeypatch.setenv("JAXPORT_OCI_USERNAME", user)
    monkeypatch.setenv("JAXPORT_OCI_PASSWORD", password)


def _manifest(config: bytes, layers: list[bytes], subject: dict | None = None) -> bytes:
    doc = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": "application/vnd.jaxport.test+json",
            "digest": sha256_digest(config),
            "size": len(config),
        },
        "layers": [
            {"mediaType": "application/octet-stream", "digest": sha256_digest(x), "size": len(x)}
            for x in layers
        ],
    }
    if subject is not None:
        doc["subject"] = subject
        doc["artifactType"] = "application/vnd.jaxport.signature"
    return json.dumps(doc).encode()


# -- URLs and credentials -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "scheme", "repo", "tag"),
    [
        ("oci://127.0.0.1:5000/team/mlp:v3", "http", "team/mlp", "v3"),
        ("oci://localhost/mlp", "http", "mlp", None),
        ("oci://[::1]:5000/a/b", "http", "a/b", None),
        ("oci://ghcr.io/org/models/mlp:1", "https", "org/models/mlp", "1"),
        ("oci://registry.example:443/a-b/c__d.e@sha256:" + "a" * 64, "https", "a-b/c__d.e", None),
    ],
)
def test_oci_urls(url, scheme, repo, tag):
    parsed = parse_oci_url(url)
    assert (parsed.scheme, parsed.repository, parsed.tag) == (scheme, repo, tag)
    assert str(parsed) == url


def test_plain_http_elsewhere_only_when_insecure(monkeypatch):
    assert parse_oci_url("oci://reg.example/a", insecure=True).scheme == "http"
    monkeypatch.setenv("JAXPORT_OCI_INSECURE", "1")
    assert parse_oci_url("oci://reg.example/a").scheme == "http"


@pytest.mark.parametrize(
    "url",
    [
        "https://ghcr.io/a",
        "oci://ghcr.io",
        "oci://ghcr.io/UPPER",
        "oci://h/a:bad tag",
        "oci://h/a@sha256:12",
        "oci://h/a//b",
    ],
)
def test_bad_oci_urls(url):
    with pytest.raises(InvalidNameError):
        parse_oci_url(url)


def test_url_credentials_refused_without_echo():
    with pytest.raises(InvalidNameError) as e:
        parse_oci_url(f"oci://user:{SECRET}@ghcr.io/a")
    assert SECRET not in str(e.value)


def test_credentials_from_env_and_docker_config(monkeypatch, tmp_path):
    assert find_credentials("reg.example")[0] is None
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    auth = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    config.write_text(
        json.dumps(
            {
                "auths": {
                    "https://reg.example:5000/v1/": {"auth": auth},
                    "other": {"username": "bob", "password": "x"},
                }
            }
        )
    )
    found, _ = find_credentials("reg.example:5000")
    assert (found.username, found.password) == ("alice", SECRET)
    assert SECRET not in repr(found) and SECRET not in str(found)
    assert find_credentials("other")[0].username == "bob"
    _login(monkeypatch, "carol", SECRET)
    assert find_credentials("reg.example:5000")[0] == Credentials(
        "carol", SECRET, "JAXPORT_OCI_USERNAME"
    )
    monkeypatch.delenv("JAXPORT_OCI_PASSWORD")
    with pytest.raises(OciError, match="both"):
        find_credentials("reg.example")


def test_docker_config_helper_and_bad_auth(tmp_path):
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"credsStore": "desktop", "auths": {"reg.example": {}}}))
    found, note = find_credentials("reg.example")
    assert found is None and "'desktop'" in note and "JAXPORT_OCI_USERNAME" in note
    config.write_text(json.dumps({"auths": {"reg.example": {"auth": "!!" + SECRET}}}))
    with pytest.raises(OciError) as e:
        find_credentials("reg.example")
    assert SECRET not in str(e.value)
    config.write_text("{not json " + SECRET)
    with pytest.raises(OciError, match="not valid JSON") as e:
        find_credentials("reg.example")
    assert SECRET not in str(e.value)


def test_parse_challenge():
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull,push"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.example/token",
        "service": "reg",
        "scope": "repository:a/b:pull,push",
    }


# -- push and pull through the fake registry ----------------------------------------------


@pytest.mark.parametrize("auth", [None, "basic", "bearer"])
def test_round_trip(monkeypatch, auth):
    with fake_registry(auth=auth, password=SECRET) as server:
        if auth:
            _login(monkeypatch, "u", SECRET)
        repo = OciRepository(f"oci://{server.host}/r")
        small, config = os.urandom(1000), b"{}"
        for blob in (small, config):
            assert not repo.has_blob(sha256_digest(blob))
            repo.push_blob(sha256_digest(blob), len(blob), [blob[:10], blob[10:]])
            assert repo.has_blob(sha256_digest(blob))
        assert b"".join(repo.fetch_blob(sha256_digest(small), len(small))) == small
        body = _manifest(config, [small])
        digest = repo.push_manifest("v1", MANIFEST, body)
        assert digest == sha256_digest(body)
        assert repo.fetch_manifest("v1") == (MANIFEST, body)
        assert repo.fetch_manifest(digest) == (MANIFEST, body)
        assert repr(repo).startswith("OciRepository(") and SECRET not in repr(repo) + repr(
            repo._auth
        )
        if auth == "bearer":
            assert any(a == f"Bearer {server.token}" for _, _, a in server.seen)
            assert not any(SECRET in (a or "") for _, p, a in server.seen if p.startswith("/v2/"))


def test_chunked_upload(monkeypatch):
    monkeypatch.setattr(_oci_client, "MONOLITHIC_LIMIT", 1000)
    monkeypatch.setattr(_oci_client, "CHUNK_SIZE", 300)
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        blob = os.urandom(1000 * 3 + 7)
        repo.push_blob(
            sha256_digest(blob), len(blob), (blob[i : i + 77] for i in range(0, len(blob), 77))
        )
        assert server.blobs[sha256_digest(blob)] == blob
        patches = [p for m, p, _ in server.seen if m == "PATCH"]
        assert len(patches) == 11  # 3007 bytes in chunks of 300
        assert repo.bytes_sent == len(blob)


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("wrong", ["digest", "short", "long"])
def test_push_of_wrong_bytes_stores_nothing(monkeypatch, chunked, wrong):
    if chunked:
        monkeypatch.setattr(_oci_client, "MONOLITHIC_LIMIT", 10)
        monkeypatch.setattr(_oci_client, "CHUNK_SIZE", 64)
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        blob = os.urandom(500)
        sent = {"digest": os.urandom(500), "short": blob[:-1], "long": blob + b"x"}[wrong]
        with pytest.raises(IntegrityError):
            repo.push_blob(sha256_digest(blob), len(blob), [sent])
        assert server.blobs == {} and server.uploads == {}  # the upload was cancelled
        assert "DELETE" in {m for m, _, _ in server.seen}


def test_tags_paginated():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        assert repo.tags() == []
        body = _manifest(b"{}", [])
        for tag in ("a", "b", "c", "d", "e"):
            repo.push_manifest(tag, MANIFEST, body)
        assert repo.tags() == ["a", "b", "c", "d", "e"]
        assert (
            sum(1 for m, p, _ in server.seen if m == "GET" and "/tags/list" in p) == 4
        )  # empty + 3 pages


def test_referrers_fallback_tag():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        subject_body = _manifest(b"{}", [])
        subject = repo.push_manifest("v1", MANIFEST, subject_body)
        assert repo.referrers(subject) == []
        ref_body = _manifest(
            b"{}", [], {"mediaType": MANIFEST, "digest": subject, "size": len(subject_body)}
        )
        ref = repo.push_manifest(None, MANIFEST, ref_body)
        repo.push_manifest(None, MANIFEST, ref_body)  # twice: listed once
        found = repo.referrers(subject)
        assert [(d["digest"], d["artifactType"]) for d in found] == [
            (ref, "application/vnd.jaxport.signature")
        ]
        assert repo.referrers(subject, "application/other") == []
        assert server.tags["sha256-" + subject[7:]]


def test_referrers_api_when_the_registry_has_it():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        listed = {
            "digest": "sha256:" + "b" * 64,
            "mediaType": MANIFEST,
            "size": 3,
            "artifactType": "x/y",
        }
        index = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [listed]}).encode()
        server.overrides[("GET", "/v2/r/referrers/")] = lambda h: (
            200,
            {"Content-Type": INDEX},
            index,
        )
        assert repo.referrers("sha256:" + "a" * 64) == [listed]
        assert repo.referrers("sha256:" + "a" * 64, "x/z") == []


# -- hostile answers ------------------------------------------------------------------------


def _blob_answer(data: bytes, **headers: str):
    return lambda h: (200, {"Content-Length": str(len(data)), **headers}, data)


def test_wrong_blob_digest_and_size():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        blob = os.urandom(3 << 20)
        digest = sha256_digest(blob)
        server.overrides[("GET", "/v2/r/blobs/")] = _blob_answer(os.urandom(len(blob)))
        got = []
        with pytest.raises(IntegrityError) as e:
            got.extend(repo.fetch_blob(digest, len(blob)))
        assert e.value.expected == digest
        assert sum(map(len, got)) < len(blob)  # the last chunk is held back
        server.overrides[("GET", "/v2/r/blobs/")] = _blob_answer(blob + b"more")
        with pytest.raises(IntegrityError, match="announces"):
            repo.fetch_blob(digest, len(blob))


def test_oversized_blob_without_length():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")

        def chunked(h):
            h.send_response(200)
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for _ in range(3):
                h.wfile.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
            h.wfile.write(b"0\r\n\r\n")
            h.close_connection = True

        server.overrides[("GET", "/v2/r/blobs/")] = chunked
        with pytest.raises(IntegrityError, match="more than its 2048 bytes"):
            b"".join(repo.fetch_blob("sha256:" + "c" * 64, 2048))


def test_truncated_blob():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        blob = os.urandom(100_000)

        def truncated(h):
            h.send_response(200)
            h.send_header("Content-Length", str(len(blob)))
            h.end_headers()
            h.wfile.write(blob[:50_000])
            h.close_connection = True

        server.overrides[("GET", "/v2/r/blobs/")] = truncated
        with pytest.raises(IntegrityError, match="broke off"):
            b"".join(repo.fetch_blob(sha256_digest(blob), len(blob)))
        with pytest.raises(NotFoundError):
            del server.overrides[("GET", "/v2/r/blobs/")]
            repo.fetch_blob(sha256_digest(blob), len(blob))


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (
            (
                200,
                {"Content-Type": MANIFEST},
                b"{" + b" " * (_oci_limits.MANIFEST_LIMIT + 1) + b"}",
            ),
            OciError,
            "limit",
        ),
        ((200, {"Content-Type": MANIFEST}, b"not json"), OciError, "not valid JSON"),
        ((200, {"Content-Type": MANIFEST}, b'{"schemaVersion": 1}'), OciError, "schemaVersion 2"),
        ((200, {"Content-Type": "text/html"}, b'{"schemaVersion": 2}'), OciError, "media type"),
        (
            (
                200,
                {"Content-Type": INDEX},
                json.dumps({"schemaVersion": 2, "mediaType": MANIFEST}).encode(),
            ),
            OciError,
            "mediaType",
        ),
        (
            (
                200,
                {"Content-Type": MANIFEST, "Docker-Content-Digest": "sha256:" + "0" * 64},
                b'{"schemaVersion": 2}',
            ),
            IntegrityError,
            "not sha256:0000",
        ),
        ((404, {}, b""), NotFoundError, "not found"),
        ((403, {}, b""), PermissionDeniedError, "403"),
        (
            (418, {}, b'{"errors":[{"code":"TEAPOT","message":"short and stout"}]}'),
            OciError,
            "TEAPOT short and stout",
        ),
    ],
)
def test_hostile_manifest_answers(answer, error, match):
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        server.overrides[("GET", "/v2/r/manifests/")] = lambda h: answer
        with pytest.raises(error, match=match):
            repo.fetch_manifest("v1")


def test_manifest_by_digest_must_have_it():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        server.overrides[("GET", "/v2/r/manifests/")] = lambda h: (
            200,
            {"Content-Type": MANIFEST},
            b'{"schemaVersion":2}',
        )
        with pytest.raises(IntegrityError):
            repo.fetch_manifest("sha256:" + "1" * 64)


def test_push_manifest_checks():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        with pytest.raises(OciError, match="limit"):
            repo.push_manifest("v1", MANIFEST, b"{" + b" " * _oci_limits.MANIFEST_LIMIT + b"}")
        with pytest.raises(OciError, match="media type"):
            repo.push_manifest("v1", "text/plain", b'{"schemaVersion":2}')
        server.overrides[("PUT", "/v2/r/manifests/")] = lambda h: (
            201,
            {"Docker-Content-Digest": "sha256:" + "2" * 64},
            b"",
        )
        with pytest.raises(IntegrityError):
            repo.push_manifest("v1", MANIFEST, _manifest(b"{}", []))


def test_redirects():
    with fake_registry() as server, fake_registry() as other:
        _login_env = os.environ.copy()
        repo = OciRepository(f"oci://{server.host}/r")
        blob = os.urandom(5000)
        other.blobs[sha256_digest(blob)] = blob
        # a blob read may go to another origin (a store's presigned URL), without credentials
        to_other = f"http://{other.host}/v2/r/blobs/{sha256_digest(blob)}"
        server.overrides[("GET", "/v2/r/blobs/")] = lambda h: (307, {"Location": to_other}, b"")
        assert b"".join(repo.fetch_blob(sha256_digest(blob), len(blob))) == blob
        assert [a for _, _, a in other.seen] == [None]
        # a manifest, an upload or a tag page may not
        server.overrides[("GET", "/v2/r/manifests/")] = lambda h: (
            302,
            {"Location": f"http://{other.host}/v2/r/manifests/v1"},
            b"",
        )
        with pytest.raises(OciError, match="another host"):
            repo.fetch_manifest("v1")
        server.overrides[("POST", "/v2/r/blobs/uploads/")] = lambda h: (
            202,
            {"Location": f"http://{other.host}/v2/r/blobs/uploads/x"},
            b"",
        )
        with pytest.raises(OciError, match="another host"):
            repo.push_blob(sha256_digest(blob), len(blob), [blob])
        server.overrides[("GET", "/v2/r/tags/list")] = lambda h: (
            200,
            {"Link": f'<http://{other.host}/v2/r/tags/list?last=a>; rel="next"'},
            b'{"tags":["a"]}',
        )
        with pytest.raises(OciError, match="another host"):
            repo.tags()
        assert _login_env == os.environ


def test_redirect_loop():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        server.overrides[("GET", "/v2/r/manifests/")] = lambda h: (
            302,
            {"Location": "/v2/r/manifests/v1"},
            b"",
        )
        with pytest.raises(OciError, match="redirected more than"):
            repo.fetch_manifest("v1")


def test_no_secret_in_messages(monkeypatch):
    with fake_registry(auth="bearer", password=SECRET) as server:
        _login(monkeypatch, "u", SECRET)
        repo = OciRepository(f"oci://{server.host}/r")
        assert repo.tags() == []  # logged in: a token
        echo = json.dumps(
            {"errors": [{"code": "DENIED", "message": f"you sent {SECRET} and {server.token}"}]}
        )
        server.overrides[("GET", "/v2/r/manifests/")] = lambda h: (400, {}, echo.encode())
        with pytest.raises(OciError) as e:
            repo.fetch_manifest("v1")
        assert (
            SECRET not in str(e.value)
            and server.token not in str(e.value)
            and "***" in str(e.value)
        )
        _login(monkeypatch, "u", "wrong-" + SECRET)
        with pytest.raises(AuthenticationError) as e:
            OciRepository(f"oci://{server.host}/r").tags()
        assert SECRET not in str(e.value) and "refused these credentials" in str(e.value)


def test_anonymous_refused_names_the_helper(tmp_path):
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    with fake_registry(auth="basic") as server:
        config.write_text(json.dumps({"credHelpers": {server.host: "ecr-login"}}))
        with pytest.raises(AuthenticationError, match="credential helper 'ecr-login'"):
            OciRepository(f"oci://{server.host}/r").tags()


def test_token_realm_must_be_https(monkeypatch):
    with fake_registry(auth="bearer") as server:
        _login(monkeypatch)
        server.overrides[("GET", "/v2/r/tags")] = lambda h: (
            401,
            {"WWW-Authenticate": 'Bearer realm="http://auth.example/token"'},
            b"",
        )
        with pytest.raises(OciError, match="not https"):
            OciRepository(f"oci://{server.host}/r").tags()


def test_hashes_are_sha256():
    assert sha256_digest(b"x") == "sha256:" + hashlib.sha256(b"x").hexdigest()


def test_large_blobs_are_streamed_not_held(monkeypatch):
    """A 64 MiB blob goes up in 4 MiB chunks read from a lazy iterator and comes down in
    pieces: neither direction holds the blob in memory (tracemalloc's peak, the fake
    registry's own copy made before the measurement)."""
    import tracemalloc

    monkeypatch.setattr(_oci_client, "MONOLITHIC_LIMIT", 4 << 20)
    monkeypatch.setattr(_oci_client, "CHUNK_SIZE", 4 << 20)
    piece = os.urandom(1 << 20)
    blob_size = 64 << 20
    digest = "sha256:" + hashlib.sha256(piece * 64).hexdigest()
    with fake_registry() as server:
        server.overrides[("PATCH", "/v2/r/blobs/uploads/")] = lambda h: (
            202,
            {"Location": h.path, "Range": "0-1"},
            b"",
        )  # the bytes are read and dropped
        server.overrides[("PUT", "/v2/r/blobs/uploads/")] = lambda h: (201, {}, b"")
        repo = OciRepository(f"oci://{server.host}/r")
        tracemalloc.start()
        try:
            repo.push_blob(digest, blob_size, (piece for _ in range(64)))
            _, pushed_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert pushed_peak < 16 << 20, pushed_peak
        server.blobs[digest] = piece * 64
        tracemalloc.start()
        try:
            count = sum(len(c) for c in repo.fetch_blob(digest, blob_size))
            _, pulled_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # What a read may hold: the hasher's queue (BATCH x PENDING, 8 MiB), the batch being
        # gathered, the piece held back until the digest matches and the socket's reads (1
        # MiB each): about 17 MB on Python 3.12-3.13, far below the 64 MiB blob.
        bound = _oci_hash.BATCH * (_oci_hash.PENDING + 2) + 8 * _oci_transport.READ_BYTES
        assert count == blob_size and pulled_peak < bound, (pulled_peak, bound)


def test_reads_ask_the_socket_for_a_mib():
    """The client's connections (``registry/_oci_transport.py``) ask for at least
    ``READ_BYTES`` per receive, whatever httpcore asks (64 KiB), also once TLS is started."""
    from jaxport.registry._oci_transport import READ_BYTES, _LargeReads

    asked: list[int] = []

    class Inner:
        def read(self, max_bytes, timeout=None):
            asked.append(max_bytes)
            return b"x"

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return self

    stream = _LargeReads(Inner())
    assert stream.read(65536) == b"x"
    stream.start_tls(None).read(100)
    stream.read(4 * READ_BYTES)
    assert asked == [READ_BYTES, READ_BYTES, 4 * READ_BYTES]


def _certificate(tmp_path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1: (certificate file, key file)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file)


def test_https_goes_through_the_clients_transport_verified(tmp_path, monkeypatch):
    """Over https the client's own transport checks the certificate: a registry whose
    certificate is not trusted is refused before any request reaches it; once trusted, a
    3 MiB blob comes back whole and verified."""
    import ssl

    from jaxport import ServerUnavailableError
    from jaxport.registry._oci_url import OciUrl

    cert_file, key_file = _certificate(tmp_path)
    data = os.urandom(3 << 20)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with fake_registry() as server:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert_file, key_file)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        server.blobs[digest] = data
        url = OciUrl(server.host, "r", None, None, "https")
        with pytest.raises(ServerUnavailableError), OciRepository(url) as repo:
            repo.has_blob(digest)
        assert server.seen == []
        trusted = ssl.create_default_context(cafile=cert_file)
        monkeypatch.setattr(_oci_client, "tls_context", lambda: trusted)
        with OciRepository(url) as repo:
            assert b"".join(repo.fetch_blob(digest, len(data))) == data
