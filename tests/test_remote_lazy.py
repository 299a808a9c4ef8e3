"""Lazy, bounded reads through a registry server (issue 25 §3; ``registry/_remote_reads.py``):
``pull_model`` reads the skeleton, then each tensor when a method first needs it (an HTTP
range of the archive, or a presigned GET of its part), verified before any array is made;
``pull_file`` streams to disk under a memory bound.

Bytes are counted at the wire, on the server's side: its ``GET /api/v1/transfer`` counts every
HTTP body it sends (``server/_presign.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _server import admin_token, serving

import jaxport
from jaxport.export import _vetting
from jaxport.export._internal import PREAMBLE_LENGTH
from jaxport.registry._blobs import LocalBlobStore

F32 = jnp.float32
SIDE = 512  # a 512 x 512 float32 tensor: 1 MiB


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server over SQLite and a local blob directory, with an admin token."""
    tmp = tmp_path_factory.mktemp("lazy")
    db_url, blobs = f"sqlite:///{tmp / 'registry.db'}", str(tmp / "blobs")
    token = admin_token(db_url, blobs)
    with serving(db_url, blobs, tmp / "serve.log") as s:
        s.admin = token  # type: ignore[attr-defined]
        yield s


def _sent(server) -> int:
    """HTTP body bytes the server has sent so far."""
    headers = {"Authorization": f"Bearer {server.admin}"}
    answer = httpx.get(f"{server.url}/api/v1/transfer", headers=headers, timeout=30)
    return int(answer.json()["http_sent"])


def _two_methods(seed: int, vjp_order: int = 0) -> jaxport.Model:
    """Methods ``f`` and ``g`` that use disjoint tensors (``a``, ``b``: 1 MiB each)."""
    rng = np.random.default_rng(seed)
    params = {k: rng.standard_normal((SIDE, SIDE)).astype(np.float32) for k in ("a", "b")}
    spec = [jax.ShapeDtypeStruct((2, SIDE), F32)]
    fns = {"f": lambda p, x: x @ p["a"], "g": lambda p, x: x @ p["b"]}
    return jaxport.Model(params, fns, {"f": spec, "g": spec}, vjp_order=vjp_order)


def _assert_matmul(actual, expected) -> None:
    """``x @ a`` by XLA against numpy's: 512 float32 products summed in another order differ by
    ~1e-5 absolute (and by more on older jax's CPU dot), a wrong tensor by whole units."""
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-4)


def test_one_method_transfers_its_tensors_only(server):
    reg = jaxport.Registry(server.url, token=server.admin)
    model = _two_methods(0)
    archive = len(model.dumps())
    reg.push(model, "lazy-two")
    x = np.ones((2, SIDE), np.float32)
    before = _sent(server)
    pulled = reg.pull_model("lazy-two", platform="cpu")
    assert pulled.bytes_read == 0
    _assert_matmul(pulled.f(x), x @ model.params["a"])
    moved = _sent(server) - before
    assert moved < 0.55 * archive, (moved, archive)
    assert pulled.bytes_read == SIDE * SIDE * 4  # tensor a, not b
    _assert_matmul(pulled.g(x), x @ model.params["b"])
    assert pulled.bytes_read == 2 * SIDE * SIDE * 4
    assert _sent(server) - before < 1.1 * archive  # each byte once, the JSON besides
    reg.close()


def test_a_corrupt_tensor_is_refused_at_first_use(server, tmp_path):
    reg = jaxport.Registry(server.url, token=server.admin)
    model = _two_methods(1)
    reg.push(model, "lazy-corrupt")
    digest = next(t.sha256 for t in model.tensors if t.path == "['b']")
    path = LocalBlobStore(server.blobs).path(digest)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    pulled = reg.pull_model("lazy-corrupt", platform="cpu")
    x = np.ones((2, SIDE), np.float32)
    _assert_matmul(pulled.f(x), x @ model.params["a"])
    with pytest.raises(jaxport.IntegrityError):
        pulled.g(x)
    with pytest.raises(jaxport.IntegrityError):
        pulled.tensor("['b']")
    with pytest.raises(jaxport.IntegrityError):  # nothing left behind either
        reg.pull_file("lazy-corrupt", tmp_path / "pulled.jxp", platform="cpu")
    assert list(tmp_path.iterdir()) == []
    reg.close()


def _vetted(monkeypatch) -> list[int]:
    """The VJP order of each module vetted from now on (read and checked before jax sees it)."""
    orders: list[int] = []
    vet = _vetting.vet_module

    def counting(*args, **kwargs):
        orders.append(kwargs["order"])
        return vet(*args, **kwargs)

    monkeypatch.setattr(_vetting, "vet_module", counting)
    return orders


def test_vjp_modules_are_read_when_vjp_asks(server, monkeypatch):
    reg = jaxport.Registry(server.url, token=server.admin)
    exp = jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2))(jax.ShapeDtypeStruct((3,), F32))
    reg.push(exp, "lazy-vjp", vjp_order=1)
    reg.push(_two_methods(2, vjp_order=1), "lazy-vjp-model")
    orders = _vetted(monkeypatch)
    pulled = reg.pull("lazy-vjp", platform="cpu")
    assert orders == [0]
    vjp = pulled.vjp()
    assert orders == [0, 1]
    x = jnp.arange(3, dtype=F32)
    (grad,) = vjp.call(x, jnp.ones(3, F32))  # the cotangent of x
    np.testing.assert_allclose(grad, 2 * jnp.cos(x), rtol=1e-6)
    orders.clear()
    m = reg.pull_model("lazy-vjp-model", platform="cpu")
    assert 1 not in orders
    m.exported["f"].vjp()
    assert 1 in orders
    assert m.bytes_read == 0
    reg.close()


@pytest.mark.skipif(
    not os.path.exists("/proc/self/clear_refs"), reason="measures Linux's VmHWM peak RSS"
)
def test_pull_file_streams_under_a_memory_bound(server, tmp_path):
    """96 MiB of tensors pulled into a file by a fresh process: its peak RSS grows by less
    than a sixth of the archive (the archive held whole would grow it by all of it)."""
    reg = jaxport.Registry(server.url, token=server.admin)
    rng = np.random.default_rng(3)
    params = {f"w{i}": rng.standard_normal((2048, 2048)).astype(np.float32) for i in range(6)}
    spec = [jax.ShapeDtypeStruct((2, 2048), F32)]
    model = jaxport.Model(params, lambda p, x: x @ p["w0"], spec)
    data = model.dumps()
    reg.push(model, "lazy-big")
    reg.close()
    del params, model
    target = tmp_path / "big.jxp"
    # VmHWM is this process's own peak (ru_maxrss would start at the forking parent's size);
    # clear_refs 5 resets it to the current RSS.
    script = textwrap.dedent(f"""
        import json, sys
        import jaxport
        def status(key):
            with open("/proc/self/status") as f:
                return next(int(x.split()[1]) * 1024 for x in f if x.startswith(key + ":"))
        reg = jaxport.Registry({server.url!r}, token={server.admin!r})
        reg.resolve("lazy-big", platform="cpu")  # connections and imports warm
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS")
        reg.pull_file("lazy-big", {str(target)!r}, platform="cpu")
        grew = status("VmHWM") - before
        print(json.dumps({{"grew": grew, "jax": "jax" in sys.modules}}))
    """)
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd="/", env=env,
        timeout=300, check=True,
    )  # fmt: skip
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert hashlib.sha256(target.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert measured["grew"] < len(data) / 6, (measured, len(data))
    assert not measured["jax"]


@pytest.fixture
def s3_served(s3, tmp_path, monkeypatch, request):
    """A server over SQLite and an S3 prefix that signs URLs (moto), with an admin token;
    ``request.param``: more environment for the server."""
    db_url = f"sqlite:///{tmp_path / 'registry.db'}"
    options = json.dumps(s3.storage_options())
    monkeypatch.setenv("JAXPORT_BLOBS_OPTIONS", options)
    token = admin_token(db_url, s3.url())
    env = {"JAXPORT_BLOBS_OPTIONS": options, **getattr(request, "param", {})}
    with serving(db_url, s3.url(), tmp_path / "serve.log", env=env) as s:
        s.admin = token  # type: ignore[attr-defined]
        yield s


def test_presigned_parts_are_read_lazily(s3_served, tmp_path):
    """Through a store that signs URLs each tensor is a presigned GET of its part: the server
    sends JSON only, and the model still reads one method's tensors."""
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    model = _two_methods(4)
    reg.push(model, "lazy-s3")
    x = np.ones((2, SIDE), np.float32)
    before = _sent(s3_served)
    pulled = reg.pull_model("lazy-s3", platform="cpu")
    _assert_matmul(pulled.f(x), x @ model.params["a"])
    assert pulled.bytes_read == SIDE * SIDE * 4
    assert _sent(s3_served) - before < 0.05 * len(model.dumps())
    reg.pull_file("lazy-s3", tmp_path / "m.jxp", platform="cpu")
    assert (tmp_path / "m.jxp").read_bytes() == model.dumps()
    reg.close()


def test_ranges_of_a_model_archive_read_the_parts_they_overlap(tmp_path, monkeypatch):
    """The server's ranges of a model archive (``BlobStream``) are the archive's bytes, and
    read only the parts they overlap: one tensor's range reads that tensor's blob alone."""
    from jaxport.registry import _streams

    reg = jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "blobs")
    model = _two_methods(5)
    data = model.dumps()
    digest = reg.push(model, "ranges").variants[0].digest
    read: list[str] = []
    verified = _streams.read_verified
    monkeypatch.setattr(
        _streams, "read_verified", lambda blobs, d: read.append(d) or verified(blobs, d)
    )
    stream = reg.blob_stream(digest)
    n = len(data)
    for start, end in [(0, n), (0, 1), (n - 1, n), (100, n - 100), (n // 2, n // 2 + 7)]:
        assert b"".join(stream.chunks(start, end)) == data[start:end], (start, end)
    read.clear()
    _streams._VERIFIED.clear()  # no part known verified: each read is verified whole
    b = next(t for t in model.tensors if t.path == "['b']")
    tail = b"".join(stream.chunks(n - b.nbytes, n))
    assert hashlib.sha256(tail).hexdigest() == b.sha256
    assert read == [b.sha256]
    reg.close()


@pytest.mark.parametrize("s3_served", [{"JAXPORT_PRESIGN_EXPIRES": "1"}], indirect=True)
def test_an_expired_url_falls_back_to_the_server(s3_served):
    """A model used after its presigned URLs expired reads its tensors through the server."""
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    model = _two_methods(6)
    reg.push(model, "lazy-expired")
    pulled = reg.pull_model("lazy-expired", platform="cpu")
    before = _sent(s3_served)
    time.sleep(2.5)  # the URLs' 1 s is over (the store refuses them: tests/_s3_moto.py)
    np.testing.assert_array_equal(pulled.tensor("['a']"), model.params["a"])
    assert _sent(s3_served) - before >= SIDE * SIDE * 4  # through the server
    reg.close()


def test_compressed_tensors_are_read_lazily_too(server):
    """A zstd tensor section is fetched, checked against its section's digest and
    decompressed when first used (``bytes_read``: its decompressed bytes)."""
    reg = jaxport.Registry(server.url, token=server.admin)
    params = {"a": np.zeros((SIDE, SIDE), np.float32), "b": np.ones((SIDE, SIDE), np.float32)}
    spec = [jax.ShapeDtypeStruct((2, SIDE), F32)]
    fns = {"f": lambda p, x: x @ p["a"], "g": lambda p, x: x @ p["b"]}
    model = jaxport.Model(params, fns, {"f": spec, "g": spec})
    reg.push(model.dumps(compress=True), "lazy-zstd")
    before = _sent(server)
    pulled = reg.pull_model("lazy-zstd", platform="cpu")
    np.testing.assert_array_equal(pulled.tensor("['b']"), params["b"])
    assert pulled.bytes_read == SIDE * SIDE * 4
    assert _sent(server) - before < SIDE * SIDE  # compressed: far less than the 1 MiB
    reg.close()


# -- a function archive's VJP modules, fetched when .vjp() asks (GET .../modules/{index}) ------


def _vjp_heavy(seed: int) -> tuple[jax.export.Exported, np.ndarray]:
    """``sin`` whose custom VJP multiplies the cotangent by a 1 MiB random matrix ``c``: the
    primal module is small, the VJP module carries the constant (a preconditioned gradient)."""
    c = np.random.default_rng(seed).standard_normal((SIDE, SIDE)).astype(np.float32)

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    def fwd(x):
        return jnp.sin(x), x

    def bwd(x, g):
        return ((g * jnp.cos(x)) @ c,)

    f.defvjp(fwd, bwd)
    exp = jax.export.export(jax.jit(f))(jax.ShapeDtypeStruct((2, SIDE), F32))
    return exp, c


def _module_route(server, digest: str, index: int, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{server.url}/api/v1/blobs/{digest}/modules/{index}"
    return httpx.get(url, headers=headers, timeout=60)


def test_a_function_s_vjp_module_is_fetched_when_vjp_asks(server):
    reg = jaxport.Registry(server.url, token=server.admin)
    exp, _ = _vjp_heavy(3)
    archive = jaxport.dumps(exp, vjp_order=1)
    reg.push(exp, "lazy-vjp-heavy", vjp_order=1)
    x = np.linspace(-1, 1, 2 * SIDE, dtype=np.float32).reshape(2, SIDE)
    g = np.ones((2, SIDE), np.float32)
    local = jaxport.loads(archive)
    before = _sent(server)
    pulled = reg.pull("lazy-vjp-heavy", platform="cpu")
    np.testing.assert_allclose(pulled.call(x), np.sin(x), rtol=1e-6)
    moved = _sent(server) - before
    assert moved < 0.1 * len(archive), (moved, len(archive))  # header + primal module
    (grad,) = pulled.vjp().call(x, g)
    (expected,) = local.vjp().call(x, g)
    np.testing.assert_array_equal(grad, expected)
    after = _sent(server) - before
    assert after > SIDE * SIDE * 4  # the VJP module, its constant, came now
    assert after < 1.5 * (SIDE * SIDE * 4) + len(archive) * 0.1, (after, len(archive))
    reg.close()


def test_the_module_route_answers_checked_bytes(server):
    reg = jaxport.Registry(server.url, token=server.admin)
    exp = jax.export.export(jax.jit(lambda x: jnp.cos(x) * 3))(jax.ShapeDtypeStruct((4,), F32))
    reg.push(exp, "lazy-route", vjp_order=1)
    digest = reg.resolve("lazy-route", platform="cpu").chosen.digest
    for index in (0, 1):
        answer = _module_route(server, digest, index, server.admin)
        assert answer.status_code == 200
        said = answer.headers["X-Jaxport-Module-Sha256"]
        assert said == hashlib.sha256(answer.content).hexdigest()
        assert int(answer.headers["Content-Length"]) == len(answer.content)
    assert _module_route(server, digest, 0, server.admin).content == exp.mlir_module_serialized
    missing = _module_route(server, digest, 2, server.admin)
    assert missing.status_code == 404
    assert "modules 0 to 1" in missing.json()["error"]["message"]
    reg.push(_two_methods(4), "lazy-route-model")
    model_digest = reg.resolve("lazy-route-model", platform="cpu").chosen.digest
    wrong = _module_route(server, model_digest, 0, server.admin)
    assert (wrong.status_code, wrong.json()["error"]["type"]) == (409, "WrongKindError")
    other = reg.tokens.create("lazy-other-team", "read", prefixes=["other-team-"]).secret
    refused = _module_route(server, digest, 1, other)
    assert refused.status_code in (403, 404), refused.status_code
    assert "x-jaxport-module-sha256" not in refused.headers
    with (
        jaxport.Registry(server.url, token=other) as theirs,
        pytest.raises((jaxport.NotFoundError, jaxport.PermissionDeniedError)),
    ):
        theirs.pull("lazy-route", platform="cpu")
    reg.close()


def _corrupt_section(server, digest: str) -> None:
    """Flips a byte near the archive's end (in its last section: the VJP module's, format
    version 4)."""
    path = LocalBlobStore(server.blobs).path(digest)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def test_a_corrupt_section_is_refused_at_the_first_read_that_needs_it(server):
    reg = jaxport.Registry(server.url, token=server.admin)
    exp, _ = _vjp_heavy(5)
    reg.push(exp, "lazy-vjp-corrupt", vjp_order=1)
    digest = reg.resolve("lazy-vjp-corrupt", platform="cpu").chosen.digest
    pulled = reg.pull("lazy-vjp-corrupt", platform="cpu")  # the primal read, intact
    _corrupt_section(server, digest)
    with pytest.raises(jaxport.IntegrityError):  # the VJP module's section: checked first
        pulled.vjp()
    again = reg.pull("lazy-vjp-corrupt", platform="cpu")  # the primal's section is intact
    with pytest.raises(jaxport.IntegrityError):  # the VJP's is not, at every read
        again.vjp()
    assert _module_route(server, digest, 1, server.admin).json()["error"]["type"] == (
        "IntegrityError"
    )
    exp, _ = _vjp_heavy(8)  # a header that does not match the digest in the preamble
    reg.push(exp, "lazy-vjp-bad-header", vjp_order=1)
    digest = reg.resolve("lazy-vjp-bad-header", platform="cpu").chosen.digest
    path = LocalBlobStore(server.blobs).path(digest)
    data = bytearray(path.read_bytes())
    data[PREAMBLE_LENGTH + 40] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    with pytest.raises(jaxport.IntegrityError):
        reg.pull("lazy-vjp-bad-header", platform="cpu")
    reg.close()


def test_a_server_without_the_module_route_sends_the_archive_whole(server, monkeypatch):
    """An older server's answer (its framework's 404 for an unknown path, a plain
    ``RegistryError``) makes the client read the archive whole, as before the route."""
    from jaxport.registry import _remote_function

    reg = jaxport.Registry(server.url, token=server.admin)
    exp, _ = _vjp_heavy(6)
    archive = jaxport.dumps(exp, vjp_order=1)
    reg.push(exp, "lazy-vjp-old-server", vjp_order=1)
    real = _remote_function.RemoteModules.fetch
    asked: list[int] = []

    def older(self, index, length):
        asked.append(index)
        with self._http.stream(f"/blobs/{self.archive.digest}/no-such-route/{index}"):
            pass  # raises: a 404 of the framework
        return real(self, index, length)

    monkeypatch.setattr(_remote_function.RemoteModules, "fetch", older)
    x = np.linspace(-1, 1, 2 * SIDE, dtype=np.float32).reshape(2, SIDE)
    before = _sent(server)
    pulled = reg.pull("lazy-vjp-old-server", platform="cpu")
    assert asked == [0]
    assert _sent(server) - before >= len(archive)  # the whole archive
    np.testing.assert_allclose(pulled.call(x), np.sin(x), rtol=1e-6)
    (grad,) = pulled.vjp().call(x, np.ones((2, SIDE), np.float32))
    (expected,) = jaxport.loads(archive).vjp().call(x, np.ones((2, SIDE), np.float32))
    np.testing.assert_array_equal(grad, expected)
    assert asked == [0]  # no module route asked after the fallback
    reg.close()


def test_a_primal_that_holds_most_of_the_archive_is_read_whole(server):
    """``x @ w``: both modules hold ``w``, which the archive stores once (one zstd section):
    the archive is read whole, once, and ``.vjp()`` then moves nothing more."""
    reg = jaxport.Registry(server.url, token=server.admin)
    w = np.random.default_rng(7).standard_normal((SIDE, SIDE)).astype(np.float32)
    exp = jax.export.export(jax.jit(lambda x: x @ w))(jax.ShapeDtypeStruct((2, SIDE), F32))
    archive = jaxport.dumps(exp, vjp_order=1)
    reg.push(exp, "lazy-vjp-shared", vjp_order=1)
    x = np.ones((2, SIDE), np.float32)
    before = _sent(server)
    pulled = reg.pull("lazy-vjp-shared", platform="cpu")
    _assert_matmul(pulled.call(x), x @ w)
    moved = _sent(server) - before
    assert len(archive) <= moved < 1.1 * len(archive), (moved, len(archive))
    (grad,) = pulled.vjp().call(x, x)
    _assert_matmul(grad, x @ w.T)
    assert _sent(server) - before < moved + 1000  # the answer of _sent itself, no module
    reg.close()


def test_a_module_that_does_not_match_the_sha256_sent_is_refused(server, monkeypatch):
    """Bytes changed on the way (after the server hashed them) never reach jax."""
    from jaxport.registry import _remote_function

    reg = jaxport.Registry(server.url, token=server.admin)
    exp, _ = _vjp_heavy(9)
    reg.push(exp, "lazy-vjp-tampered", vjp_order=1)
    pulled = reg.pull("lazy-vjp-tampered", platform="cpu")
    real = _remote_function.RemoteModules.fetch

    def tampered(self, index, length):
        data, said = real(self, index, length)
        return data[:-1] + bytes([data[-1] ^ 1]), said

    monkeypatch.setattr(_remote_function.RemoteModules, "fetch", tampered)
    orders = _vetted(monkeypatch)
    with pytest.raises(jaxport.IntegrityError):
        pulled.vjp()
    assert orders == []  # refused before it was vetted or parsed
    reg.close()


def test_a_signing_store_s_function_archive_stays_off_the_server(s3_served):
    """Where the store signs URLs, a function archive is read whole from the store (its bytes
    never through the server); the module route reads the S3 blob as well."""
    reg = jaxport.Registry(s3_served.url, token=s3_served.admin)
    exp, _ = _vjp_heavy(10)
    archive = jaxport.dumps(exp, vjp_order=1)
    reg.push(exp, "lazy-vjp-s3", vjp_order=1)
    x = np.ones((2, SIDE), np.float32)
    before = _sent(s3_served)
    pulled = reg.pull("lazy-vjp-s3", platform="cpu")
    (grad,) = pulled.vjp().call(x, x)
    (expected,) = jaxport.loads(archive).vjp().call(x, x)
    np.testing.assert_array_equal(grad, expected)
    assert _sent(s3_served) - before < 0.05 * len(archive)
    digest = reg.resolve("lazy-vjp-s3", platform="cpu").chosen.digest
    answer = _module_route(s3_served, digest, 1, s3_served.admin)
    assert answer.status_code == 200
    said = answer.headers["X-Jaxport-Module-Sha256"]
    assert said == hashlib.sha256(answer.content).hexdigest()
    assert answer.content == bytes(jaxport.loads(archive).vjp().mlir_module_serialized)
    reg.close()
