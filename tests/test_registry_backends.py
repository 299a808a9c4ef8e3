"""The backend contract below ``Registry`` (``registry/_backend.py``): one facade, two backends
that inherit nothing of each other, and one place that refuses what a backend lacks.

No server is needed: a registry server's client refuses these calls before any request (the
URL below is never connected to)."""

from __future__ import annotations

import inspect

import pytest

import jaxport
import jaxport.export._internal
from jaxport.registry._backend import Backend
from jaxport.registry._http_backend import HttpBackend
from jaxport.registry._sql import SqlBackend

NOWHERE = "http://127.0.0.1:9"

#: What a registry server's client cannot do, and the capability its refusal names.
LACKING = {
    "sign": (lambda r: r.sign("n:1", private_key="k.pem"), "signing"),
    "verify_signatures": (
        lambda r: r.verify_signatures("n:1", [_public_key()]),
        "signature verification",
    ),
    "upgrade_report": (lambda r: r.upgrade_report("0.7.0"), "upgrade reports"),
    "enqueue_audits": (lambda r: r.enqueue_audits(), "the audit queue"),
    "check_audit_queue": (lambda r: r.check_audit_queue(), "the audit queue"),
    "run_audit_worker": (lambda r: r.run_audit_worker(["cpu"]), "audit workers"),
    "blob_stream": (lambda r: r.blob_stream("0" * 64), "blob_stream"),
    "receive_blob": (lambda r: r.receive_blob("0" * 64, [b""]), "receive_blob"),
    "push_parts": (lambda r: r.push_parts([]), "push_parts"),
    "audit(python=)": (lambda r: r.audit(python="/bin/python3"), "audits with another jax"),
    "audit(store=False)": (lambda r: r.audit(store=False), "audits with another jax"),
    "audit(tolerance=)": (lambda r: r.audit(tolerance=1e-3), "an audit tolerance"),
}


def _public_key() -> bytes:
    """A PEM P-256 public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_the_backends_inherit_nothing_of_each_other():
    assert SqlBackend.__mro__[1:] == HttpBackend.__mro__[1:] == (Backend, *Backend.__mro__[1:])
    assert not inspect.isabstract(SqlBackend) and not inspect.isabstract(HttpBackend)


def test_registry_is_one_class_whatever_the_url(tmp_path):
    with (
        jaxport.Registry(NOWHERE) as remote,
        jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "b") as direct,
    ):
        assert type(remote) is type(direct) is jaxport.Registry
        assert remote.blobs is None and direct.blobs is not None
        assert repr(remote) == f"Registry({NOWHERE!r})"


@pytest.mark.parametrize("call", LACKING, ids=list(LACKING))
def test_a_server_client_refuses_what_needs_the_database_in_one_voice(call):
    run, capability = LACKING[call]
    with jaxport.Registry(NOWHERE) as reg, pytest.raises(jaxport.UnsupportedFeatureError) as e:
        run(reg)
    message = str(e.value)
    assert message.startswith(capability), message
    assert f"not available through a registry server ({NOWHERE})" in message
    assert "use a direct registry" in message


def test_a_signature_policy_is_refused_for_a_server():
    policy = jaxport.SignaturePolicy([_public_key()])
    with pytest.raises(jaxport.UnsupportedFeatureError, match="a signature policy"):
        jaxport.Registry(NOWHERE, require_signatures=policy)


@pytest.mark.parametrize(
    "kwargs", [{"blobs": "b/"}, {"storage_options": {}}, {"upgrade": True}], ids=str
)
def test_database_arguments_are_refused_for_a_server(kwargs):
    with pytest.raises(jaxport.InvalidNameError, match="for a database"):
        jaxport.Registry(NOWHERE, **kwargs)


@pytest.mark.parametrize("kwargs", [{"token": "jxp_x"}, {"timeout": 5.0}], ids=str)
def test_server_arguments_are_refused_for_a_database(tmp_path, kwargs):
    with pytest.raises(jaxport.InvalidNameError, match="for a registry server"):
        jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", **kwargs)


def test_the_local_platform_default_is_public():
    from jaxport.registry import LOCAL_PLATFORM
    from jaxport.registry._platforms import chosen_platform

    signature = inspect.signature(jaxport.Registry.pull)
    assert signature.parameters["platform"].default is LOCAL_PLATFORM
    assert repr(LOCAL_PLATFORM) == "LOCAL_PLATFORM"
    assert chosen_platform(LOCAL_PLATFORM) == jaxport.export._internal.local_platform()
    assert chosen_platform(None) is None and chosen_platform("CPU") == "cpu"
