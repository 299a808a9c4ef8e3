"""The OCI mapping (schema/OCI.md) through an image layout, on SQLite and PostgreSQL: a version
written as OCI content reads back byte for byte into another registry (functions, sharded
multi-platform models with VJPs, signatures, findings, aliases); a fine-tune sends one tensor;
a second push sends nothing; every malformed, oversized or tampered piece of content is a
typed error and stores nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _oci_versions import assert_same_versions, function, model, populate

from jaxport import ConflictError, IntegrityError, NotFoundError, OciError, Registry
from jaxport.registry._oci_layout import OciLayout
from jaxport.registry._oci_mapping import pull_version, push_version, read_version, write_variant
from jaxport.registry._oci_media import (
    ARCHIVE,
    HEADER,
    IMAGE_INDEX,
    MAX_MANIFEST_BYTES,
    SIGNATURE,
    SKELETON,
    TENSOR,
    VARIANT,
    VERSION,
    canonical,
    sha256_of,
)
from jaxport.registry._oci_report import CopyReport


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Registry, Path]:
    """A populated SQLite registry and the image layout its versions were pushed to (tests
    that change the layout copy it: ``_layout``)."""
    root = tmp_path_factory.mktemp("oci-source")
    reg = Registry(f"sqlite:///{root / 'src.db'}", blobs=root / "blobs")
    populate(reg, root)
    layout = OciLayout(root / "layout")
    for ref in ("fn:1", "mlp:1", "mlp:2"):
        push_version(reg, ref, layout.repository(ref.split(":")[0]), CopyReport())
    yield reg, layout.root
    reg.close()


@pytest.fixture
def source(made) -> Registry:
    return made[0]


def _layout(made, tmp_path: Path) -> OciLayout:
    """A copy of the module's layout, to change."""
    copy = tmp_path / "layout"
    shutil.copytree(made[1], copy)
    return OciLayout(copy)


def _other(tmp_path: Path, name: str = "dst") -> Registry:
    return Registry(f"sqlite:///{tmp_path / name}.db", blobs=tmp_path / f"{name}-blobs")


def test_push_from_each_backend_reads_back_the_same(registry, tmp_path):
    populate(registry, tmp_path)
    layout = OciLayout(tmp_path / "layout")
    for ref in ("fn:1", "mlp:1", "mlp:2"):
        push_version(registry, ref, layout.repository(ref.split(":")[0]), CopyReport())
    dst = _other(tmp_path)
    for name, tag in (("fn", "v1"), ("mlp", "v1"), ("mlp", "v2")):
        pull_version(layout.repository(name), tag, dst, CopyReport())
    assert_same_versions(registry, dst, ["fn:1", "mlp:1", "mlp:2"])


def test_a_version_maps_to_the_documented_manifests(made):
    source, layout = made[0], OciLayout(made[1])
    repo = layout.repository("mlp")
    assert repo.tags() == sorted(["v1", "v2", "prod", *_fallback_tags(repo)])
    media_type, body = repo.fetch_manifest("v2")
    index = json.loads(body)
    assert media_type == IMAGE_INDEX and index["artifactType"] == VERSION
    assert index["annotations"]["dev.jaxport.name"] == "mlp"
    assert json.loads(index["annotations"]["dev.jaxport.metadata"]) == {"stage": "tuned"}
    (entry,) = index["manifests"]
    variant = source.get("mlp:2").variants[0]
    assert entry["annotations"]["dev.jaxport.platforms"] == "cpu,cuda"
    assert entry["annotations"]["dev.jaxport.nr_devices"] == "2"
    assert entry["annotations"]["dev.jaxport.archive.digest"] == "sha256:" + variant.digest
    manifest = json.loads(repo.fetch_manifest(entry["digest"])[1])
    assert manifest["artifactType"] == VARIANT and manifest["config"]["mediaType"] == HEADER
    kinds = [layer["mediaType"] for layer in manifest["layers"]]
    assert kinds == [SKELETON, TENSOR, TENSOR, TENSOR]
    assert [t.sha256 for t in source.get("mlp:2").variants[0].tensors] == [
        layer["digest"][7:] for layer in manifest["layers"][1:]
    ]
    config = json.loads(b"".join(repo.fetch_blob(manifest["config"]["digest"],
                                                 manifest["config"]["size"])))  # fmt: skip
    assert config["archive"] == {"digest": "sha256:" + variant.digest, "size": variant.size_bytes}
    assert [p["digest"] for p in config["parts"]] == [x["digest"] for x in manifest["layers"]]
    fn = json.loads(_pushed_manifest(layout.repository("fn"), "v1"))
    assert [layer["mediaType"] for layer in fn["layers"]] == [ARCHIVE]
    assert fn["layers"][0]["annotations"]["org.opencontainers.image.title"] == "fn.jaxport"


def _fallback_tags(repo) -> list[str]:
    return [t for t in repo.tags() if t.startswith("sha256-")]


def _pushed_manifest(repo, tag: str) -> bytes:
    index = json.loads(repo.fetch_manifest(tag)[1])
    return repo.fetch_manifest(index["manifests"][0]["digest"])[1]


def test_signatures_and_findings_are_referrers_of_the_variant(made):
    repo = OciLayout(made[1]).repository("fn")
    index = json.loads(repo.fetch_manifest("v1")[1])
    subject = index["manifests"][0]["digest"]
    found = repo.referrers(subject)
    kinds = sorted(d["artifactType"] for d in found)
    assert kinds == sorted([SIGNATURE, "application/vnd.jaxport.findings.v1+json"])
    assert [d["artifactType"] for d in repo.referrers(subject, SIGNATURE)] == [SIGNATURE]
    assert "sha256-" + subject[7:] in repo.tags()  # the tag schema fallback holds them


def test_round_trip_is_byte_identical_and_loads(made, registry):
    source, layout, dst = made[0], OciLayout(made[1]), registry
    for name, tag in (("fn", "v1"), ("mlp", "v1"), ("mlp", "v2")):
        pull_version(layout.repository(name), tag, dst, CopyReport())
    assert_same_versions(source, dst, ["fn:1", "mlp:1", "mlp:2"])
    assert dst.get("fn:1").metadata == {"owner": "team-a"}
    exp = dst.pull("fn:1", platform="cpu")
    np.testing.assert_allclose(exp.call(np.ones(3, np.float32)), 2 * np.sin(np.ones(3)), 1e-6)
    tuned = dst.pull_model("mlp:2", platform="cpu")
    x = np.ones((4, 8), np.float32)
    expected = source.pull_model("mlp:2", platform="cpu").apply(x)
    np.testing.assert_allclose(tuned.apply(x), expected)
    signers = [s.signer for s in source.signatures("fn:1")]
    assert [s.signer for s in dst.signatures("fn:1")] == signers
    assert {f.digest for f in dst.audit_results(name="mlp")} == set(source.get("mlp:2").digests)


def test_a_fine_tune_sends_one_tensor_and_a_second_push_nothing(source, tmp_path):
    layout = OciLayout(tmp_path / "layout")
    repo = layout.repository("mlp")
    push_version(source, "mlp:1", repo, CopyReport())
    tuned = CopyReport()
    push_version(source, "mlp:2", repo, tuned)
    variant = source.get("mlp:2").variants[0]
    changed = [t for t in variant.tensors if t.path == "['b']"]
    # config, skeleton and the changed tensor; the signature's and the findings' layers and
    # their empty config (sent once); the two unchanged tensors are there already
    assert (tuned.blobs, tuned.blobs_present) == (6, 3)
    unchanged = sum(t.nbytes for t in variant.tensors if t.path != "['b']")
    assert tuned.bytes < variant.size_bytes - unchanged + 8192
    assert changed and all(layout.repository("mlp").has_blob("sha256:" + t.sha256) for t in changed)
    again = CopyReport()
    push_version(source, "mlp:2", repo, again)
    assert (again.blobs, again.bytes, again.manifests, again.signatures, again.findings) == (
        0, 0, 0, 0, 0,
    )  # fmt: skip
    assert again.skipped == ["mlp:2"]


def test_write_variant_chooses_and_verifies(made, tmp_path):
    source, repo = made[0], OciLayout(made[1]).repository("mlp")
    out = tmp_path / "m.jaxport"
    chosen = write_variant(repo, "v2", out, platform="cpu", nr_devices=2)
    assert chosen.digest == source.get("mlp:2").digests[0]
    assert out.read_bytes() == source.pull_bytes("mlp:2", platform="cpu")
    with pytest.raises(NotFoundError, match="no variant runs on tpu"):
        write_variant(repo, "v2", tmp_path / "x", platform="tpu")


def test_write_variant_counts_and_a_wrong_archive_digest_leaves_the_file_as_it_was(made, tmp_path):
    """Every layer verifies but the assembled archive is not the digest the manifest names:
    an IntegrityError before the rename, so the file already at the path is untouched and no
    temporary file is left; a good write counts the layers fetched and their bytes."""
    import dataclasses

    from jaxport.registry._oci_mapping import assemble

    repo = OciLayout(made[1]).repository("mlp")
    variant = read_version(repo, "v2").variants[0]
    report = CopyReport()
    write_variant(repo, "v2", tmp_path / "m.jaxport", platform="cpu", report=report)
    assert report.blobs == len(variant.parts)
    assert report.bytes == sum(p.size for p in variant.parts)
    out = tmp_path / "old.jaxport"
    out.write_bytes(b"the file that was there")
    wrong = dataclasses.replace(variant, digest="0" * 64)
    with pytest.raises(IntegrityError, match="the layers make an archive"):
        assemble(repo, wrong, out, CopyReport())
    assert out.read_bytes() == b"the file that was there"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jaxport", "old.jaxport"]


def test_a_changed_layer_is_an_integrity_error_and_stores_nothing(made, source, registry, tmp_path):
    layout = _layout(made, tmp_path)
    tensor = source.get("mlp:2").variants[0].tensors[0].sha256
    blob = layout.root / "blobs" / "sha256" / tensor
    data = bytearray(blob.read_bytes())
    data[0] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        pull_version(layout.repository("mlp"), "v2", registry, CopyReport())
    assert registry.names() == []


def _rewrite_index(repo, tag: str, change) -> None:
    """Re-tags ``tag`` with its index changed by ``change(doc)`` (a hostile producer)."""
    doc = json.loads(repo.fetch_manifest(tag)[1])
    change(doc)
    repo.push_manifest(tag, IMAGE_INDEX, canonical(doc))


def _rewrite_variant(repo, tag: str, change) -> None:
    index = json.loads(repo.fetch_manifest(tag)[1])
    manifest = json.loads(repo.fetch_manifest(index["manifests"][0]["digest"])[1])
    change(manifest)
    body = canonical(manifest)
    digest = sha256_of(body)
    repo.layout.blob_path(digest).write_bytes(body)  # as a hostile producer wrote it
    index["manifests"][0].update(digest=digest, size=len(body))
    repo.push_manifest(tag, IMAGE_INDEX, canonical(index))


def _drop_layer(m):
    m["layers"].pop()


def _swap_layers(m):
    m["layers"][1], m["layers"][2] = m["layers"][2], m["layers"][1]


def _huge_layer(m):
    m["layers"][0]["size"] = 1 << 50


def _bad_digest(m):
    m["layers"][0]["digest"] = "sha256:../../etc/passwd"


def _not_jaxport(m):
    m["artifactType"] = "application/vnd.other.thing"


@pytest.mark.parametrize(
    "change", [_drop_layer, _swap_layers, _huge_layer, _bad_digest, _not_jaxport]
)
def test_malformed_variant_manifests_are_refused(made, tmp_path, change):
    layout = _layout(made, tmp_path)
    repo = layout.repository("mlp")
    _rewrite_variant(repo, "v2", change)
    dst = _other(tmp_path)
    with pytest.raises(OciError):
        pull_version(repo, "v2", dst, CopyReport())
    assert dst.names() == []


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(artifactType="application/vnd.other"),
        lambda d: d["annotations"].update({"dev.jaxport.name": "../etc"}),
        lambda d: d["annotations"].update({"dev.jaxport.metadata": "[1]"}),
        lambda d: d.update(manifests=[]),
        lambda d: d.update(schemaVersion=1),
    ],
)
def test_malformed_indexes_are_refused(made, tmp_path, change):
    repo = _layout(made, tmp_path).repository("fn")
    _rewrite_index(repo, "v1", change)
    with pytest.raises(OciError):
        read_version(repo, "v1")


def test_an_oversized_manifest_is_refused(made, tmp_path):
    repo = _layout(made, tmp_path).repository("fn")
    body = canonical({"schemaVersion": 2, "pad": "x" * MAX_MANIFEST_BYTES})
    blob = repo.layout.blob_path(sha256_of(body))
    blob.write_bytes(body)
    with pytest.raises(OciError, match="over"):
        repo.fetch_manifest(sha256_of(body))


def test_a_model_pushed_unsharded_round_trips_too(registry, tmp_path):
    registry.push([model(3.0, sharded=False)], "plain")
    repo = OciLayout(tmp_path / "l").repository("plain")
    push_version(registry, "plain:1", repo, CopyReport())
    dst = _other(tmp_path)
    pull_version(repo, "v1", dst, CopyReport())
    assert_same_versions(registry, dst, ["plain:1"])
    registry.push(function(), "f2")
    assert registry.names() == ["f2", "plain"]


def test_another_registrys_version_n_is_not_overwritten(source, registry, tmp_path):
    repo = OciLayout(tmp_path / "l").repository("mlp")
    push_version(source, "mlp:1", repo, CopyReport())
    registry.push(model(7.0), "mlp")  # this registry's mlp:1 is another archive
    before = repo.fetch_manifest("v1")
    with pytest.raises(ConflictError, match="tag v1 holds other archives"):
        push_version(registry, "mlp:1", repo, CopyReport())
    assert repo.fetch_manifest("v1") == before


def test_writers_in_two_processes_keep_each_others_tags(tmp_path):
    """``index.json`` is read and written again under the layout's lock: no tag is lost."""
    import subprocess
    import sys

    OciLayout(tmp_path / "shared")
    code = (
        "import sys\nfrom jaxport.registry._oci_layout import OciLayout\n"
        "repo = OciLayout(sys.argv[1]).repository(sys.argv[2])\n"
        "for i in range(30):\n"
        "    repo.push_manifest(f'v{i}', 'application/vnd.oci.image.index.v1+json',\n"
        '                       (\'{"schemaVersion":2,"manifests":[],"n":%d}\' % i).encode())\n'
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "shared"), name], cwd=tmp_path)
        for name in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    layout = OciLayout(tmp_path / "shared")
    assert len(layout.repository("a").tags()) == len(layout.repository("b").tags()) == 30


def test_a_malformed_signature_referrer_stores_nothing(made, registry, tmp_path):
    repo = _layout(made, tmp_path).repository("fn")
    index = json.loads(repo.fetch_manifest("v1")[1])
    subject = index["manifests"][0]["digest"]
    (sig,) = repo.referrers(subject, SIGNATURE)
    doc = json.loads(repo.fetch_manifest(sig["digest"])[1])
    doc["annotations"]["dev.jaxport.signature.signer"] = "../not-a-fingerprint"
    repo.push_manifest(None, "application/vnd.oci.image.manifest.v1+json", canonical(doc))
    with pytest.raises(OciError, match="signer or kind"):
        pull_version(repo, "v1", registry, CopyReport())
    assert registry.names() == []
