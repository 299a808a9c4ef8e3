"""Audits of artifacts produced by jax 0.4.30 (tests/data/old_jax, made by its make_artifacts.py).

Each artifact is audited twice: from jax's own bytes (``.jaxexport``) and from a jaxport archive
of the same Exported (``.jaxport``, made by convert_to_jaxport.py under jax 0.10.2). Measured
under every supported jax (0.7.0 .. 0.12.0.1): the QR artifact no longer compiles (its custom
call ``lapack_sgeqrf`` is gone), the bf16 artifact runs with numbers that differ by rounding only
(0.0625 at most on outputs up to 13.5: under one bfloat16 ulp there, so ``ok`` by the tolerance
per dtype and output magnitude, its finding stating the error; jax's elementwise bf16 rule
called it a mismatch), and a plain f32
``sin`` still matches the producer's outputs exactly. From jax 0.11.1 on, jax's own
``deserialize`` refuses the ``.jaxexport`` bytes (older than its 6-month window): those cases
check that refusal instead, and the jaxport cases show the artifacts still audit the same.
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

import jaxport
from jaxport.audit._examples import decode_examples

DATA = Path(__file__).with_name("data") / "old_jax"


def _push(registry: jaxport.Registry, name: str, source: str) -> None:
    if source == "jaxport":
        path = DATA / f"{name}.jaxport"
        trusted_targets = jaxport.inspect(path).custom_call_targets  # our own test data
        exp = jaxport.load(path, allow_custom_calls=trusted_targets, outside_window="allow")
    else:
        exp = jax.export.deserialize(bytearray((DATA / f"{name}.jaxexport").read_bytes()))
    examples = []
    for ins, outs in decode_examples((DATA / f"{name}.npz").read_bytes()):
        args, kwargs = jax.tree.unflatten(exp.in_tree, ins)
        examples.append(jaxport.Example(args, kwargs, outs))  # the producer's outputs
    registry.push(exp, name.replace("_", "-"), examples=examples)


@pytest.mark.parametrize("source", ["jax-native", "jaxport"])
@pytest.mark.parametrize(
    ("name", "status", "reason"),
    [
        ("qr_f32", "compile-error", "lapack_sgeqrf"),
        ("bf16_ops", "ok", "within bfloat16"),
        ("sin_f32", "ok", "matches 1 example"),
    ],
)
def test_jax_0_4_30_artifacts(registry, name, status, reason, source):
    if source == "jax-native" and jaxport.jax_window("0.4.30", sharded=False).jax_deserialize == (
        "refuses"
    ):
        # jax >= 0.11.1: its deserialize refuses these bytes, as jaxport._window says it does.
        with pytest.raises(ValueError, match="6-month backward-compatibility window"):
            jax.export.deserialize(bytearray((DATA / f"{name}.jaxexport").read_bytes()))
        return
    _push(registry, name, source)
    (finding,) = registry.audit(name.replace("_", "-"), platform="cpu")
    assert finding.status == status, finding
    assert reason in finding.reason
    if status == "compile-error":
        assert "lapack_sgeqrf" in finding.checks["custom calls"]  # flagged statically too
    if name == "bf16_ops":
        assert "max abs error 0.0625" in finding.checks["golden"]
