"""Bundles (``jaxport.registry.bundle_export`` / ``bundle_import``, ``jaxport bundle``): a
round trip on SQLite and PostgreSQL keeps every version byte for byte with its aliases,
signatures and findings; a tampered bundle (a changed byte, a missing blob, an extra file, a
name outside the layout, a link, a duplicate) is a typed error and imports nothing."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from _oci_versions import assert_same_versions, populate

from jaxport import IntegrityError, InvalidNameError, NotFoundError, OciError, Registry
from jaxport.registry import bundle_export, bundle_import


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Registry, Path, Path]:
    """A populated SQLite registry, its bundle of every version, and the signer's public
    key (tests that tamper with the bundle write a copy)."""
    root = tmp_path_factory.mktemp("bundle-source")
    reg = Registry(f"sqlite:///{root / 'src.db'}", blobs=root / "blobs")
    public = populate(reg, root)
    path = root / "site.tar"
    bundle_export(reg, ["fn", "mlp"], path)
    yield reg, path, public
    reg.close()


def _fresh(tmp_path: Path, name: str = "dst") -> Registry:
    return Registry(f"sqlite:///{tmp_path / name}.db", blobs=tmp_path / f"{name}-blobs")


def test_round_trip_keeps_versions_aliases_signatures_findings(exported, registry):
    source, path, public = exported
    dst = registry
    report = bundle_import(dst, path)
    assert report.versions == ["fn:1", "mlp:1", "mlp:2"]
    assert sorted(report.aliases) == ["fn@prod", "mlp@prod"]
    assert report.signatures == 2 and report.findings == 2
    assert_same_versions(source, dst, ["fn:1", "mlp:1", "mlp:2"])
    assert dst.aliases("mlp") == {"prod": 2} and dst.aliases("fn") == {"prod": 1}
    assert all(c.ok for c in dst.verify_signatures("mlp:2", [public]))
    again = bundle_import(dst, path)
    assert (again.versions, again.blobs, again.signatures, again.findings, again.aliases) == (
        [], 0, 0, 0, [],
    )  # fmt: skip


def test_export_is_deterministic_and_one_version_at_a_time(exported, tmp_path):
    source, path, _ = exported
    second = tmp_path / "again.tar"
    bundle_export(source, ["fn", "mlp"], second)
    assert second.read_bytes() == path.read_bytes()
    one = tmp_path / "one.tar"
    report = bundle_export(source, ["mlp@prod"], one)
    assert report.versions == ["mlp:2"]
    dst = _fresh(tmp_path)
    bundle_import(dst, one)
    assert dst.names() == ["mlp"] and dst.get("mlp:1").digests == source.get("mlp:2").digests


def test_export_refuses_what_does_not_exist(exported, tmp_path):
    source, _, _ = exported
    with pytest.raises(NotFoundError):
        bundle_export(source, ["nope"], tmp_path / "x.tar")
    with pytest.raises(InvalidNameError):
        bundle_export(source, [], tmp_path / "x.tar")
    assert not (tmp_path / "x.tar").exists()


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar]


def _write(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _largest_blob(members):
    return max((i for i, (m, _) in enumerate(members) if m.name.startswith("blobs/")),
               key=lambda i: len(members[i][1]))  # fmt: skip


def _changed_byte(members):
    i = _largest_blob(members)
    data = bytearray(members[i][1])
    data[len(data) // 2] ^= 0x01
    members[i] = (members[i][0], bytes(data))


def _missing_blob(members):
    members.pop(_largest_blob(members))


def _extra_file(members):
    members.append((tarfile.TarInfo("README.txt"), b"hello"))


def _extra_blob(members):
    data = b"not referred to"
    import hashlib

    members.append((tarfile.TarInfo(f"blobs/sha256/{hashlib.sha256(data).hexdigest()}"), data))


def _traversal(members):
    members.append((tarfile.TarInfo("../escaped"), b"x"))


def _absolute(members):
    members.append((tarfile.TarInfo("/tmp/escaped"), b"x"))


def _symlink(members):
    i = _largest_blob(members)
    link = tarfile.TarInfo(members[i][0].name)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    members[i] = (link, b"")


def _hardlink(members):
    link = tarfile.TarInfo("blobs/sha256/" + "0" * 64)
    link.type, link.linkname = tarfile.LNKTYPE, "index.json"
    members.append((link, b""))


def _duplicate(members):
    i = _largest_blob(members)
    members.append(members[i])


def _bad_index(members):
    i = next(i for i, (m, _) in enumerate(members) if m.name == "index.json")
    members[i] = (members[i][0], b"{not json")


def _no_layout(members):
    members[:] = [(m, d) for m, d in members if m.name != "oci-layout"]


CASES = {
    "changed byte": (_changed_byte, IntegrityError),
    "missing blob": (_missing_blob, IntegrityError),
    "extra file": (_extra_file, OciError),
    "extra blob": (_extra_blob, OciError),
    "traversal": (_traversal, OciError),
    "absolute path": (_absolute, OciError),
    "symlink": (_symlink, OciError),
    "hard link": (_hardlink, OciError),
    "duplicate": (_duplicate, OciError),
    "bad index": (_bad_index, OciError),
    "no oci-layout": (_no_layout, OciError),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_tampered_bundle_is_a_typed_error_and_imports_nothing(exported, tmp_path, case):
    _, path, _ = exported
    tamper, error = CASES[case]
    members = _members(path)
    tamper(members)
    bad = _write(tmp_path / "bad.tar", members)
    dst = _fresh(tmp_path)
    with pytest.raises(error):
        bundle_import(dst, bad)
    assert dst.names() == []
    assert not (tmp_path / "escaped").exists()


def test_not_a_tar_and_no_file(tmp_path):
    dst = _fresh(tmp_path)
    (tmp_path / "junk.tar").write_bytes(b"\x00junk" * 100)
    with pytest.raises(OciError):
        bundle_import(dst, tmp_path / "junk.tar")
    with pytest.raises(NotFoundError):
        bundle_import(dst, tmp_path / "absent.tar")


def test_a_bundle_over_the_limit_is_refused(exported, tmp_path):
    _, path, _ = exported
    dst = _fresh(tmp_path)
    with pytest.raises(OciError, match="more than 1000 bytes"):
        bundle_import(dst, path, max_size=1000)
    assert dst.names() == []


def test_a_consistent_bundle_whose_archive_is_not_its_digest_imports_nothing(exported, tmp_path):
    """Every blob matches its name, but mlp:2's layers do not make the archive its config
    names: found while staging, before fn (first by name) is pushed."""
    import json

    from jaxport.registry import mirror
    from jaxport.registry._oci_layout import OciLayout, write_bundle
    from jaxport.registry._oci_media import HEADER, IMAGE_INDEX, IMAGE_MANIFEST, canonical

    source, _, _ = exported
    mirror(source, f"oci:{tmp_path / 'layout'}")
    repo = OciLayout(tmp_path / "layout").repository("mlp")
    index = json.loads(repo.fetch_manifest("v2")[1])
    manifest = json.loads(repo.fetch_manifest(index["manifests"][0]["digest"])[1])
    desc = manifest["config"]
    config = json.loads(b"".join(repo.fetch_blob(desc["digest"], desc["size"])))
    config["archive"]["digest"] = "sha256:" + "0" * 64
    body = canonical(config)
    import hashlib

    new_digest = "sha256:" + hashlib.sha256(body).hexdigest()
    repo.push_blob(new_digest, len(body), [body])
    manifest["config"] = {"mediaType": HEADER, "digest": new_digest, "size": len(body)}
    mbody = canonical(manifest)
    mdigest = repo.push_manifest(None, IMAGE_MANIFEST, mbody)
    index["manifests"][0].update(digest=mdigest, size=len(mbody))
    ibody = canonical(index)
    repo.push_manifest("v2", IMAGE_INDEX, ibody)
    repo.push_manifest("prod", IMAGE_INDEX, ibody)
    write_bundle(OciLayout(tmp_path / "layout"), tmp_path / "consistent.tar")
    dst = _fresh(tmp_path)
    with pytest.raises(IntegrityError):
        bundle_import(dst, tmp_path / "consistent.tar")
    assert dst.names() == []
