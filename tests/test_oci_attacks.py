"""The OCI client, bundles and mirror against a hostile registry (``tests/_oci_fake.py`` made
hostile through its ``overrides``) or a hostile tar: each attack is a typed ``JaxportError``
(or is harmless), in bounded memory and time, storing nothing and naming no credential.
The friendlier hostile answers (wrong digests, oversized manifests, redirect loops) are in
``test_oci_client.py``."""

from __future__ import annotations

import pytest
from _oci_fake import fake_registry

from jaxport import OciError
from jaxport.registry._oci_client import OciRepository

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SECRET = "hunter2-not-to-be-printed"


@pytest.fixture(autouse=True)
def _no_credentials(monkeypatch, tmp_path):
    for name in ("JAXPORT_OCI_USERNAME", "JAXPORT_OCI_PASSWORD", "JAXPORT_OCI_INSECURE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))


def _login(monkeypatch, user="u", password=SECRET):
    monkeypatch.setenv("JAXPORT_OCI_USERNAME", user)
    monkeypatch.setenv("JAXPORT_OCI_PASSWORD", password)


# -- deeply nested JSON -------------------------------------------------------------------

_NESTED = b"[" * 60_000 + b"]" * 60_000


@pytest.mark.parametrize(
    ("route", "answer", "call"),
    [
        (("GET", "/v2/r/manifests/"), (200, {"Content-Type": MANIFEST}, _NESTED), "manifest"),
        (("GET", "/v2/r/manifests/"), (400, {}, _NESTED[:60_000]), "manifest"),
        (("GET", "/v2/r/tags/list"), (200, {}, _NESTED), "tags"),
    ],
)
def test_deeply_nested_json_is_an_oci_error(route, answer, call):
    """A JSON answer nested deeper than Python's recursion limit: an ``OciError``, not a
    ``RecursionError``."""
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        server.overrides[route] = lambda h: answer
        with pytest.raises(OciError):
            repo.fetch_manifest("v1") if call == "manifest" else repo.tags()


def test_deeply_nested_token_answer_and_docker_config(monkeypatch, tmp_path):
    with fake_registry(auth="bearer") as server:
        _login(monkeypatch)
        server.overrides[("GET", "/token")] = lambda h: (200, {}, _NESTED[:60_000])
        with pytest.raises(OciError, match="no token"):
            OciRepository(f"oci://{server.host}/r").tags()
    monkeypatch.delenv("JAXPORT_OCI_USERNAME")
    monkeypatch.delenv("JAXPORT_OCI_PASSWORD")
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    config.write_bytes(_NESTED)
    with pytest.raises(OciError, match="not valid JSON"):
        OciRepository("oci://127.0.0.1:1/r")
