"""``jaxport.registry.mirror``: registry -> registry (SQLite and PostgreSQL at each end),
registry -> image layout -> registry; only what the destination lacks is copied (counted in
bytes and parts), an interrupted mirror resumes, and a second run copies nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from _oci_versions import assert_same_versions, model, populate

import jaxport.registry._mirror as mirror_module
from jaxport import InvalidNameError, Registry, UnsupportedFeatureError
from jaxport.registry import CopyReport, mirror

ALL = ["fn:1", "mlp:1", "mlp:2"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Registry, Path]:
    root = tmp_path_factory.mktemp("mirror-source")
    reg = Registry(f"sqlite:///{root / 'src.db'}", blobs=root / "blobs")
    public = populate(reg, root)
    yield reg, public
    reg.close()


def _fresh(tmp_path: Path, name: str) -> Registry:
    return Registry(f"sqlite:///{tmp_path / name}.db", blobs=tmp_path / f"{name}-blobs")


def _nothing(report: CopyReport) -> bool:
    return not report.copied_anything and not report.aliases


def test_registry_to_registry_then_nothing(made, registry):
    source, public = made
    first = mirror(source, registry)
    assert first.versions == ALL and sorted(first.aliases) == ["fn@prod", "mlp@prod"]
    assert first.signatures == 2 and first.findings == 2
    assert_same_versions(source, registry, ALL)
    assert registry.aliases("mlp") == {"prod": 2}
    assert all(c.ok for c in registry.verify_signatures("fn:1", [public]))
    again = mirror(source, registry)
    assert _nothing(again) and again.skipped == ALL and again.bytes == 0


def test_from_each_backend(registry, tmp_path):
    populate(registry, tmp_path)
    dst = _fresh(tmp_path, "dst")
    assert mirror(registry, dst, prefix="ml").versions == ["mlp:1", "mlp:2"]
    assert dst.names() == ["mlp"]
    assert_same_versions(registry, dst, ["mlp:1", "mlp:2"])


def test_a_fine_tune_copies_only_its_new_parts(made, tmp_path):
    source, _ = made
    dst = _fresh(tmp_path, "dst")
    mirror(source, dst, names=["mlp"])
    source_tuned = _fresh(tmp_path, "src2")
    mirror(source, source_tuned, names=["mlp"])
    source_tuned.push(model(5.0), "mlp")  # one tensor changed
    tuned = mirror(source_tuned, dst)
    variant = source_tuned.get("mlp:3").variants[0]
    changed = next(t for t in variant.tensors if t.path == "['b']")
    skeleton = variant.size_bytes - sum(t.nbytes for t in variant.tensors)
    assert tuned.versions == ["mlp:3"] and tuned.blobs == 2  # the skeleton and one tensor
    assert tuned.bytes <= skeleton + changed.nbytes
    unchanged = sum(t.nbytes for t in variant.tensors if t.path != "['b']")
    assert tuned.bytes <= variant.size_bytes - unchanged


def test_through_an_image_layout(made, tmp_path):
    source, public = made
    out = mirror(source, f"oci:{tmp_path / 'layout'}")
    assert out.versions == ALL and out.signatures == 2 and out.findings == 2
    assert _nothing(mirror(source, f"oci:{tmp_path / 'layout'}"))
    dst = _fresh(tmp_path, "dst")
    back = mirror(f"oci:{tmp_path / 'layout'}", dst)
    assert back.versions == ALL and sorted(back.aliases) == ["fn@prod", "mlp@prod"]
    assert_same_versions(source, dst, ALL)
    assert all(c.ok for c in dst.verify_signatures("mlp:2", [public]))
    assert _nothing(mirror(f"oci:{tmp_path / 'layout'}", dst))


def test_an_interrupted_mirror_resumes(made, tmp_path, monkeypatch):
    source, _ = made
    dst = _fresh(tmp_path, "dst")
    real = mirror_module._copy_version
    calls = []

    def dies_on_the_third(src, to, ref, report):
        calls.append(str(ref))
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process killed mid-mirror
        return real(src, to, ref, report)

    monkeypatch.setattr(mirror_module, "_copy_version", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        mirror(source, dst)
    monkeypatch.setattr(mirror_module, "_copy_version", real)
    rest = mirror(source, dst)
    assert rest.versions == ["mlp:2"] and rest.skipped == ["fn:1", "mlp:1"]
    assert_same_versions(source, dst, ALL)
    assert _nothing(mirror(source, dst))


def test_between_two_image_layouts(made, tmp_path):
    source, public = made
    mirror(source, f"oci:{tmp_path / 'a'}")
    copied = mirror(f"oci:{tmp_path / 'a'}", f"oci:{tmp_path / 'b'}")
    assert copied.versions == ALL and sorted(copied.aliases) == ["fn@prod", "mlp@prod"]
    assert copied.signatures == 2 and copied.findings == 2
    assert _nothing(mirror(f"oci:{tmp_path / 'a'}", f"oci:{tmp_path / 'b'}"))
    dst = _fresh(tmp_path, "dst")
    mirror(f"oci:{tmp_path / 'b'}", dst)
    assert_same_versions(source, dst, ALL)
    assert all(c.ok for c in dst.verify_signatures("mlp:2", [public]))


def test_places_it_refuses(made, tmp_path):
    source, _ = made
    with pytest.raises(InvalidNameError):
        mirror(f"oci:{tmp_path / 'absent'}", source)
    with pytest.raises(UnsupportedFeatureError, match="name them"):
        mirror("oci://127.0.0.1:9/ns", _fresh(tmp_path, "x"))
