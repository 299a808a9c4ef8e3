"""Audits of artifacts produced by jax 0.4.30 (tests/data/old_jax, made by its make_artifacts.py).

Measured under every supported jax (0.7.0 .. 0.10.2): the QR artifact no longer compiles (its
custom call ``lapack_sgeqrf`` is gone), the bf16 artifact runs with different numbers, and a
plain f32 ``sin`` still matches the producer's outputs exactly.
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

import jaxport
from jaxport.audit._examples import decode_examples

DATA = Path(__file__).with_name("data") / "old_jax"


def _push(registry: jaxport.Registry, name: str) -> None:
    exp = jax.export.deserialize(bytearray((DATA / f"{name}.jaxexport").read_bytes()))
    examples = []
    for ins, outs in decode_examples((DATA / f"{name}.npz").read_bytes()):
        args, kwargs = jax.tree.unflatten(exp.in_tree, ins)
        examples.append(jaxport.Example(args, kwargs, outs))  # the producer's outputs
    registry.push(exp, name.replace("_", "-"), examples=examples)


@pytest.mark.parametrize(
    ("name", "status", "reason"),
    [
        ("qr_f32", "compile-error", "lapack_sgeqrf"),
        ("bf16_ops", "mismatch", "bfloat16"),
        ("sin_f32", "ok", "matches 1 example"),
    ],
)
def test_jax_0_4_30_artifacts(registry, name, status, reason):
    _push(registry, name)
    (finding,) = registry.audit(name.replace("_", "-"), platform="cpu")
    assert finding.status == status, finding
    assert reason in finding.reason
    if status == "compile-error":
        assert "lapack_sgeqrf" in finding.checks["custom calls"]  # flagged statically too
    if status == "mismatch":
        assert "max abs error 0.0625" in finding.checks["golden"]
