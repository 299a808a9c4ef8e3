"""``jaxport bundle export`` / ``bundle import`` and ``jaxport mirror`` as the README shows
them: the installed ``jaxport`` in a subprocess, outside the checkout; a tampered bundle is one
line on stderr (``Type: message``), exit 1, and imports nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _oci_versions import populate
from test_bundle import _changed_byte, _members, _write

from jaxport import Registry

JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def _run(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300,
                          cwd=env["HOME"])  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == code, (args, proc.stdout, proc.stderr)
    return proc


def _env(tmp_path: Path, name: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    return {**base, "HOME": str(tmp_path), "JAX_PLATFORMS": "cpu",
            "JAXPORT_REGISTRY": f"sqlite:///{tmp_path / name}.db",
            "JAXPORT_BLOBS": str(tmp_path / f"{name}-blobs")}  # fmt: skip


def test_cli_bundle_export_and_import(tmp_path):
    src_env, dst_env = _env(tmp_path, "src"), _env(tmp_path, "dst")
    with Registry(src_env["JAXPORT_REGISTRY"], blobs=src_env["JAXPORT_BLOBS"]) as reg:
        populate(reg, tmp_path)
    out = _run(src_env, "bundle", "export", "fn", "mlp:2", "-o", str(tmp_path / "b.tar"))
    assert "2 version(s) copied" in out.stdout
    report = json.loads(_run(dst_env, "bundle", "import", str(tmp_path / "b.tar"), "--json").stdout)
    assert report["versions"] == ["fn:1", "mlp:1"] and report["signatures"] == 2
    again = json.loads(_run(dst_env, "bundle", "import", str(tmp_path / "b.tar"), "--json").stdout)
    assert again["versions"] == [] and again["bytes"] == 0
    members = _members(tmp_path / "b.tar")
    _changed_byte(members)
    _write(tmp_path / "bad.tar", members)
    fresh = _env(tmp_path, "fresh")
    err = _run(fresh, "bundle", "import", str(tmp_path / "bad.tar"), code=1).stderr
    assert err.startswith("IntegrityError: ") and err.count("\n") == 1, err
    with Registry(fresh["JAXPORT_REGISTRY"], blobs=fresh["JAXPORT_BLOBS"]) as reg:
        assert reg.names() == []


def test_cli_mirror_copies_once(tmp_path):
    src_env, dst_env = _env(tmp_path, "src"), _env(tmp_path, "dst")
    with Registry(src_env["JAXPORT_REGISTRY"], blobs=src_env["JAXPORT_BLOBS"]) as reg:
        populate(reg, tmp_path)
    layout = f"oci:{tmp_path / 'layout'}"
    src_args = [src_env["JAXPORT_REGISTRY"], "--source-blobs", src_env["JAXPORT_BLOBS"]]
    out = _run(src_env, "mirror", *src_args, layout)
    assert "3 version(s) copied" in out.stdout
    dst_args = [dst_env["JAXPORT_REGISTRY"], "--destination-blobs", dst_env["JAXPORT_BLOBS"]]
    first = json.loads(
        _run(dst_env, "mirror", layout, *dst_args, "--prefix", "ml", "--json").stdout
    )
    assert first["versions"] == ["mlp:1", "mlp:2"] and first["aliases"] == ["mlp@prod"]
    again = json.loads(_run(dst_env, "mirror", layout, *dst_args, "--json").stdout)
    assert again["versions"] == ["fn:1"] and again["skipped"] == ["mlp:1", "mlp:2"]
    err = _run(dst_env, "mirror", f"oci:{tmp_path / 'nowhere'}", layout, code=1).stderr
    assert err.startswith("InvalidNameError: ") and err.count("\n") == 1, err


def test_mirror_through_a_real_oci_registry(tmp_path, monkeypatch):
    """Registry -> docker-registry (distribution 2.8, referrers by the tag fallback) ->
    registry, and an image layout -> docker-registry as it is; a second run copies nothing."""
    from _docker_registry import available, docker_registry

    if not available():
        import pytest

        pytest.skip("Debian's docker-registry is not installed (apt-get install docker-registry)")
    from jaxport.registry import mirror

    src = Registry(f"sqlite:///{tmp_path / 'src.db'}", blobs=tmp_path / "src-blobs")
    public = populate(src, tmp_path)
    dst = Registry(f"sqlite:///{tmp_path / 'dst.db'}", blobs=tmp_path / "dst-blobs")
    with docker_registry(tmp_path / "oci") as served:
        monkeypatch.setenv("JAXPORT_OCI_USERNAME", served.user)
        monkeypatch.setenv("JAXPORT_OCI_PASSWORD", served.password)
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
        namespace = f"oci://{served.host}/team"
        out = mirror(src, namespace)
        assert out.versions == ["fn:1", "mlp:1", "mlp:2"] and out.signatures == 2
        again = mirror(src, namespace)
        assert not again.copied_anything and not again.aliases
        back = mirror(namespace, dst, names=["fn", "mlp"])
        assert back.versions == ["fn:1", "mlp:1", "mlp:2"] and back.findings == 2
        assert sorted(back.aliases) == ["fn@prod", "mlp@prod"]
        assert not mirror(namespace, dst, names=["fn", "mlp"]).copied_anything
        layout, copy = f"oci:{tmp_path / 'layout'}", f"oci://{served.host}/copy"
        mirror(src, layout)
        copied = mirror(layout, copy)  # OCI to OCI: as it is, referrers by the tag fallback
        assert copied.versions == ["fn:1", "mlp:1", "mlp:2"] and copied.signatures == 2
        assert not mirror(layout, copy).copied_anything
        third = Registry(f"sqlite:///{tmp_path / 'third.db'}", blobs=tmp_path / "third-blobs")
        assert mirror(copy, third, names=["fn", "mlp"]).signatures == 2
    for ref in ("fn:1", "mlp:1", "mlp:2"):
        assert dst.get(ref).digests == third.get(ref).digests == src.get(ref).digests
    assert all(c.ok for c in dst.verify_signatures("mlp:2", [public]))
    assert all(c.ok for c in third.verify_signatures("mlp:2", [public]))


def test_mirror_to_and_from_a_registry_server(tmp_path):
    """Through ``jaxport serve``: a server as the destination stores versions, aliases,
    signatures and findings (``server/_api_adopt.py``); as the source, everything comes
    back."""
    from _server import admin_token, serving

    from jaxport.registry import bundle_export, bundle_import, mirror

    src = Registry(f"sqlite:///{tmp_path / 'src.db'}", blobs=tmp_path / "src-blobs")
    populate(src, tmp_path)
    db, blobs = f"sqlite:///{tmp_path / 'served.db'}", str(tmp_path / "served-blobs")
    with serving(db, blobs, tmp_path / "serve.log") as server:
        client = Registry(server.url, token=admin_token(db, blobs))
        out = mirror(src, client)
        assert out.versions == ["fn:1", "mlp:1", "mlp:2"]
        assert out.signatures == 2 and out.findings == 2 and not out.notes
        assert client.aliases("mlp") == {"prod": 2}
        assert not mirror(src, client).copied_anything
        dst = Registry(f"sqlite:///{tmp_path / 'dst.db'}", blobs=tmp_path / "dst-blobs")
        back = mirror(client, dst)
        assert back.versions == ["fn:1", "mlp:1", "mlp:2"]
        for ref in ("fn:1", "mlp:1", "mlp:2"):
            assert dst.read_blob(dst.get(ref).digests[0]) == src.read_blob(src.get(ref).digests[0])
        bundle_export(client, ["mlp", "fn"], tmp_path / "served.tar")  # parts split here
        third = Registry(f"sqlite:///{tmp_path / 'third.db'}", blobs=tmp_path / "third-blobs")
        assert bundle_import(third, tmp_path / "served.tar").versions == ["fn:1", "mlp:1", "mlp:2"]
        for ref in ("fn:1", "mlp:1", "mlp:2"):
            assert third.get(ref).digests == src.get(ref).digests
