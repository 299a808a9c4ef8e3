"""The examples run end to end (small sizes): export, push, move prod, pull, run, compare."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import jaxport

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_main_example_runs_and_matches(tmp_path, capsys):
    sys.path.insert(0, str(EXAMPLES))
    try:
        import main as example
    finally:
        sys.path.remove(str(EXAMPLES))
    with jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "blobs") as reg:
        example.run(reg, small=True)
        assert reg.aliases("convnet") == {"prod": 2}
        lm = reg.get("transformer-lm@prod")
        assert lm.version == 2 and reg.aliases("transformer-lm") == {"prod": 2}
        assert {(v.kind, v.nr_devices) for v in lm.variants} == {("model", 1), ("model", 8)}
        assert [m.name for m in lm.variants[0].methods] == ["embed", "logits"]
        assert reg.get("convnet-train-step").variants[0].vjp_order == 1
    out = capsys.readouterr().out
    assert "done: every pulled model ran and matched" in out
    assert out.count("[serving process] logits[(3, 16)] -> (3, 16, 256): matches") == 2
