"""Versions to carry through OCI content (tests/test_oci_mapping.py, test_bundle.py,
test_mirror.py): a multi-platform function, a sharded multi-platform model with VJPs and its
fine-tune (one tensor changed), each with aliases, a signature and audit findings."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import jaxport
from jaxport import Registry

F32 = jnp.float32
X = jax.ShapeDtypeStruct((4, 8), F32)


@functools.cache
def function() -> Any:
    """A function exported for cpu and cuda (made once per process: tests only read it)."""
    f = jax.jit(lambda x: jnp.sin(x) * 2.0)
    return jax.export.export(f, platforms=["cpu", "cuda"])(jax.ShapeDtypeStruct((3,), F32))


@functools.cache
def model(bias: float = 1.0, *, sharded: bool = True) -> jaxport.Model:
    """A model whose kernel is sharded over 2 devices (a NamedSharding), exported for cpu and
    cuda, with its first-order VJP; ``bias`` changes one tensor only (made once per process
    for each argument: tests only push and read it)."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    if sharded:
        mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
        w = jax.device_put(w, NamedSharding(mesh, P("x", None)))
    params = {"w": w, "b": np.full(8, bias, np.float32), "e": np.ones((16, 8), np.float32)}
    return jaxport.Model(
        params, lambda p, x: x @ p["w"] + p["b"], [X], platforms=["cpu", "cuda"], vjp_order=1
    )


def signing_key(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh P-256 private key and its public key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "signer.pem", tmp_path / "signer.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )  # fmt: skip
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def populate(reg: Registry, tmp_path: Path) -> Path:
    """``fn:1`` (alias ``prod``, signed, audited), ``mlp:1`` and ``mlp:2`` (a fine-tune: one
    tensor changed; alias ``prod``, signed); returns the public key."""
    private, public = signing_key(tmp_path)
    reg.push(function(), "fn", aliases=["prod"], metadata={"owner": "team-a"})
    reg.sign("fn:1", private_key=private)
    reg.audit("fn:1", platform="cpu", level="static")
    reg.push(model(1.0), "mlp", metadata={"stage": "base"})
    reg.push(model(2.0), "mlp", aliases=["prod"], metadata={"stage": "tuned"})
    reg.sign("mlp:2", private_key=private)
    reg.audit("mlp:2", platform="cpu", level="static")
    return public


def assert_same_versions(a: Registry, b: Registry, references: list[str]) -> None:
    """Each version has the same archives, byte for byte, and metadata in both."""
    for reference in references:
        ra, rb = a.get(reference), b.get(reference)
        assert ra.digests == rb.digests, reference
        assert ra.metadata == rb.metadata, reference
        for digest in ra.digests:
            assert a.read_blob(digest) == b.read_blob(digest)
