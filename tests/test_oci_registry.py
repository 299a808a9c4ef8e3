"""``Registry.oci_push`` / ``oci_pull`` and ``jaxport oci push`` / ``oci pull`` through a real
OCI registry: Debian's ``docker-registry`` (distribution 2.8, no referrers API: the
``sha256-<hex>`` tag fallback is what runs), started on 127.0.0.1 with htpasswd (bcrypt)
auth (``tests/_docker_registry.py``); ``oras`` (oras-py, an independent client) lists what a
push wrote and pulls its layers with matching digests. Functions (two platforms, VJPs) and
models (a fine-tune pushes one layer), signatures and findings as referrers, byte-identical
archives back. Skipped, saying so, only where the docker-registry binary is absent."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _docker_registry import available, docker_registry

import jaxport
from jaxport import AuthenticationError, IntegrityError, NotFoundError, Registry

pytestmark = pytest.mark.skipif(
    not available(),
    reason="Debian's docker-registry is not installed (apt-get install docker-registry)",
)

X = jax.ShapeDtypeStruct((4, 8), jnp.float32)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with docker_registry(tmp_path_factory.mktemp("oci")) as s:
        yield s


@pytest.fixture(autouse=True)
def _login(monkeypatch, served, tmp_path):
    monkeypatch.setenv("JAXPORT_OCI_USERNAME", served.user)
    monkeypatch.setenv("JAXPORT_OCI_PASSWORD", served.password)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("JAXPORT_OCI_INSECURE", raising=False)


@pytest.fixture
def reg(tmp_path):
    registry = Registry(f"sqlite:///{tmp_path / 'a.db'}", blobs=tmp_path / "blobs-a")
    yield registry
    registry.close()


@pytest.fixture
def other(tmp_path):
    registry = Registry(f"sqlite:///{tmp_path / 'b.db'}", blobs=tmp_path / "blobs-b")
    yield registry
    registry.close()


def _function(platform: str) -> jax.export.Exported:
    return jax.export.export(jax.jit(lambda x: jnp.tanh(x) * 2.0), platforms=[platform])(X)


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"w{i}": rng.normal(size=(256, 256)).astype(np.float32) for i in range(4)}


def _apply(p, x):
    return x @ p["w0"][:8, :8]


def _sign(reg: Registry, ref: str, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    reg.sign(ref, private_key=pem)


def _finding(digest: str) -> dict:
    return {
        "digest": digest,
        "level": "full",
        "jax_version": jax.__version__,
        "jaxlib_version": jax.__version__,
        "platform": "cpu",
        "devices": 1,
        "examples_digest": None,
        "status": "ok",
        "reason": "",
        "details_json": "{}",
        "seconds": 0.5,
        "created_at": 1_700_000_000.0,
    }


def test_function_round_trip_with_signatures_and_findings(reg, other, served, tmp_path):
    pushed = reg.push([_function("cpu"), _function("cuda")], "fn", vjp_order=1, aliases=["prod"])
    _sign(reg, "fn:1", tmp_path)
    reg._backend.adopt_findings("fn", [_finding(pushed.variants[0].digest)])
    url = f"oci://{served.host}/team/fn"
    sent = reg.oci_push("fn:1", url + ":stable")
    assert (
        sent.report.versions == ["fn:1"]
        and sent.report.signatures == 2
        and sent.report.findings == 1
    )
    assert sent.url == f"{url}@{sent.digest}"
    again = reg.oci_push("fn:1", url)  # a second push sends nothing
    assert again.digest == sent.digest and again.report.blobs == 0 and again.report.manifests == 0

    got = other.oci_pull(url + ":v1")
    assert (got.name, got.version, got.digest) == ("fn", 1, sent.digest)
    for variant in pushed.variants:
        assert other.pull_bytes("fn:1", platform=variant.platforms[0]) == reg.pull_bytes(
            "fn:1", platform=variant.platforms[0]
        )
    assert len(other.signatures("fn:1")) == 2
    exp = other.pull("fn:1", platform="cpu")
    np.testing.assert_allclose(
        exp.call(np.ones((4, 8), np.float32)), np.tanh(np.ones((4, 8))) * 2, rtol=1e-6
    )
    assert exp.vjp() is not None

    out = tmp_path / "fn.jaxport"
    written = reg.oci_pull(url + ":prod", out, platform="cuda")
    assert out.read_bytes() == reg.pull_bytes("fn:1", platform="cuda") and written.path == out


def test_second_push_writes_no_manifest(reg, served, tmp_path):
    reg.push(_function("cpu"), "twice")
    _sign(reg, "twice:1", tmp_path)
    url = f"oci://{served.host}/team/twice"
    reg.oci_push("twice:1", url)
    again = reg.oci_push("twice:1", url)
    assert again.report.blobs == 0 and again.report.manifests == 0


def test_model_fine_tune_pushes_one_layer(reg, other, served):
    model = jaxport.Model(_params(), _apply, [X])
    reg.push(model, "mlp")
    url = f"oci://{served.host}/team/mlp"
    first = reg.oci_push("mlp:1", url)
    tuned = _params()
    tuned["w2"] = tuned["w2"] + 1.0
    reg.push(jaxport.Model(tuned, _apply, [X]), "mlp")
    second = reg.oci_push("mlp:2", url)
    # one 256 KiB tensor of four, the skeleton (it names the tensors' digests) and the config
    assert second.report.bytes < 0.3 * first.report.bytes
    tensors = "application/vnd.jaxport.tensor.v1"
    new = {d["digest"] for d in _layers(served, "team/mlp", "v2") if d["mediaType"] == tensors}
    old = {d["digest"] for d in _layers(served, "team/mlp", "v1") if d["mediaType"] == tensors}
    assert len(new - old) == 1 and len(old) == 4  # one tensor changed: one new tensor layer
    got = other.oci_pull(url + ":v2")
    assert other.pull_bytes(f"mlp:{got.version}") == reg.pull_bytes("mlp:2")
    pulled = other.pull_model(f"mlp:{got.version}")
    np.testing.assert_array_equal(np.asarray(pulled.params["w2"]), tuned["w2"])


def _layers(served, repo: str, tag: str) -> list[dict]:
    from jaxport.registry._oci_client import OciRepository

    with OciRepository(f"oci://{served.host}/{repo}") as r:
        index = json.loads(r.fetch_manifest(tag)[1])
        return [
            layer
            for m in index["manifests"]
            for layer in json.loads(r.fetch_manifest(m["digest"])[1])["layers"]
        ]


def test_oras_lists_and_pulls_what_jaxport_pushed(reg, served, tmp_path):
    oras = pytest.importorskip("oras.provider", reason="oras-py is in the dev extra")
    reg.push(jaxport.Model(_params(3), _apply, [X]), "orasm")
    sent = reg.oci_push("orasm:1", f"oci://{served.host}/team/orasm:v1")
    client = oras.Registry(hostname=served.host, insecure=True, auth_backend="basic")
    client.login(username=served.user, password=served.password)
    index = client.get_manifest(f"{served.host}/team/orasm@{sent.digest}")
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert "v1" in client.get_tags(f"{served.host}/team/orasm")
    fetched = 0
    for entry in index["manifests"]:
        manifest = client.get_manifest(f"{served.host}/team/orasm@{entry['digest']}")
        for layer in manifest["layers"]:
            out = tmp_path / layer["digest"].replace(":", "-")
            client.download_blob(f"{served.host}/team/orasm", layer["digest"], str(out))
            assert "sha256:" + hashlib.sha256(out.read_bytes()).hexdigest() == layer["digest"]
            assert out.stat().st_size == layer["size"]
            fetched += 1
    assert fetched == 5  # the skeleton and four tensors


def test_referrers_fallback_on_distribution(reg, served, tmp_path):
    """docker-registry 2.8 answers 404 to the referrers API: the signatures are listed in the
    ``sha256-<hex>`` index, which is what the client reads back."""
    import httpx

    from jaxport.registry._oci_client import OciRepository

    reg.push(_function("cpu"), "sig")
    _sign(reg, "sig:1", tmp_path)
    reg.oci_push("sig:1", f"oci://{served.host}/team/sig")
    with OciRepository(f"oci://{served.host}/team/sig") as repo:
        index = json.loads(repo.fetch_manifest("v1")[1])
        subject = index["manifests"][0]["digest"]
        api = httpx.get(
            f"http://{served.host}/v2/team/sig/referrers/{subject}",
            auth=(served.user, served.password),
        )
        assert api.status_code == 404
        assert "sha256-" + subject[7:] in repo.tags()
        found = repo.referrers(subject)
    assert [d["artifactType"] for d in found] == ["application/vnd.dev.sigstore.bundle.v0.3+json"]


def test_wrong_password_and_absent_tag(reg, served, monkeypatch):
    reg.push(_function("cpu"), "fn")
    monkeypatch.setenv("JAXPORT_OCI_PASSWORD", "wrong-password-xyz")
    with pytest.raises(AuthenticationError) as e:
        reg.oci_push("fn:1", f"oci://{served.host}/team/denied")
    assert "wrong-password-xyz" not in str(e.value)
    monkeypatch.setenv("JAXPORT_OCI_PASSWORD", served.password)
    with pytest.raises(NotFoundError):
        reg.oci_pull(f"oci://{served.host}/team/denied:v9")


def test_corrupted_layer_on_the_registry_stores_nothing(reg, other, served, tmp_path):
    reg.push(jaxport.Model(_params(7), _apply, [X]), "bad")
    reg.oci_push("bad:1", f"oci://{served.host}/team/bad")
    layer = max(_layers(served, "team/bad", "v1"), key=lambda d: d["size"])
    data = (
        served.storage
        / "docker/registry/v2/blobs/sha256"
        / layer["digest"][7:9]
        / layer["digest"][7:]
        / "data"
    )
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError):
        other.oci_pull(f"oci://{served.host}/team/bad:v1")
    assert other.list() == []
    out = tmp_path / "bad.jaxport"
    with pytest.raises(IntegrityError):
        other.oci_pull(f"oci://{served.host}/team/bad:v1", out, platform=None)
    assert [p.name for p in tmp_path.iterdir() if "bad" in p.name] == []  # no temporary left


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("jaxport")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def test_cli_push_and_pull(reg, served, tmp_path):
    reg.push(_function("cpu"), "clifn", aliases=["prod"])
    env = {
        **os.environ,
        "JAXPORT_REGISTRY": f"sqlite:///{tmp_path / 'a.db'}",
        "JAXPORT_BLOBS": str(tmp_path / "blobs-a"),
    }
    url = f"oci://{served.host}/team/clifn"
    pushed = _cli("oci", "push", "clifn:1", url + ":stable", "--json", env=env, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stderr
    report = json.loads(pushed.stdout)
    assert (
        report["digest"].startswith("sha256:")
        and served.password not in pushed.stdout + pushed.stderr
    )
    out = tmp_path / "out.jaxport"
    pulled = _cli(
        "oci", "pull", url + ":stable", "-o", str(out), "--platform", "cpu", env=env, cwd=tmp_path
    )
    assert pulled.returncode == 0, pulled.stderr
    assert out.read_bytes() == reg.pull_bytes("clifn:1")
    assert f"(1 layers, {out.stat().st_size} bytes fetched)" in pulled.stdout  # one archive
    env_b = {
        **env,
        "JAXPORT_REGISTRY": f"sqlite:///{tmp_path / 'c.db'}",
        "JAXPORT_BLOBS": str(tmp_path / "blobs-c"),
    }
    into = _cli("oci", "pull", url + ":prod", env=env_b, cwd=tmp_path)
    assert into.returncode == 0, into.stderr
    assert "clifn:1" in into.stdout
    bad = _cli("oci", "pull", url + ":nope", env=env, cwd=tmp_path)
    assert (
        bad.returncode == 1
        and bad.stderr.startswith("NotFoundError: ")
        and "Traceback" not in bad.stderr
    )
    denied = _cli(
        "oci",
        "push",
        "clifn:1",
        url,
        env={**env, "JAXPORT_OCI_PASSWORD": "not-it-123"},
        cwd=tmp_path,
    )
    assert denied.returncode == 1 and denied.stderr.startswith("AuthenticationError: ")
    assert "not-it-123" not in denied.stderr


def test_cross_repository_mount(served):
    from jaxport.registry._oci_client import OciRepository, sha256_digest

    blob = os.urandom(4096)
    digest = sha256_digest(blob)
    with (
        OciRepository(f"oci://{served.host}/team/a") as a,
        OciRepository(f"oci://{served.host}/team/b") as b,
    ):
        a.push_blob(digest, len(blob), [blob])
        assert not b.has_blob(digest)
        assert b.mount_blob(digest, "team/a") and b.has_blob(digest)
        assert b.bytes_sent == 0
        other = sha256_digest(b"absent")
        assert not b.mount_blob(other, "team/a") and not b.has_blob(other)  # an upload, cancelled


def test_sharded_multi_platform_versions_round_trip(reg, other, served, tmp_path):
    """The OCI tests' versions (``tests/_oci_versions.py``: a two-platform function, a model
    sharded over 2 devices with its VJP, and its fine-tune; aliases, signatures, findings)
    through docker-registry and back into another registry, byte for byte."""
    from _oci_versions import assert_same_versions, model, populate

    public = populate(reg, tmp_path)
    for name, versions in (("fn", [1]), ("mlp", [1, 2])):
        for version in versions:
            reg.oci_push(f"{name}:{version}", f"oci://{served.host}/versions/{name}")
    got = [
        other.oci_pull(f"oci://{served.host}/versions/{n}:v{v}")
        for n, v in (("fn", 1), ("mlp", 1), ("mlp", 2))
    ]
    assert [(g.name, g.version) for g in got] == [("fn", 1), ("mlp", 1), ("mlp", 2)]
    assert_same_versions(reg, other, ["fn:1", "mlp:1", "mlp:2"])
    for reference in ("fn:1", "mlp:2"):
        assert all(c.ok for c in other.verify_signatures(reference, [public]))
    assert {f.digest for f in other.audit_results(name="fn")} == set(reg.get("fn:1").digests)
    pulled = other.pull_model("mlp:2", platform="cpu")
    x = np.ones((4, 8), np.float32)
    (method,) = pulled.methods
    expected = getattr(model(2.0), method)(x)
    np.testing.assert_allclose(
        np.asarray(getattr(pulled, method)(x)), np.asarray(expected), rtol=1e-6
    )
