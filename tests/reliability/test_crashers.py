"""Archives that crash the reading process natively, and the isolation that contains them.

``crashers/mlir_portable_artifact_segfault.jaxport`` (found by ``fuzz_reader.py``: a real
archive with module bytes mutated and every digest recomputed) makes MLIR's
``deserialize_portable_artifact`` segfault. ``loads`` parses a module in-process when it must
derive its custom-call targets (``_modules.custom_call_targets``), as jax itself does when the
module is called, so loading it kills the process: a known jaxlib fault (RELIABILITY.md). What
jaxport promises is that the paths meant for untrusted archives, audits and ``verify --deep``,
parse in a worker process, where it is a ``crash`` finding and the caller lives on.
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

import jaxport
from _helpers import skip_unless_it_crashes
from jaxport.audit import AuditJob, run_audits

CRASHERS = sorted(Path(__file__).with_name("crashers").glob("*.jaxport"))


@pytest.mark.parametrize("path", CRASHERS, ids=lambda p: p.stem)
def test_the_worker_turns_a_native_crash_into_a_finding(path: Path) -> None:
    skip_unless_it_crashes(path)
    data = path.read_bytes()
    spec = jax.ShapeDtypeStruct((3,), "float32")
    good = jaxport.dumps(jax.export.export(jax.jit(lambda x: x + 1))(spec))
    _, results = run_audits([AuditJob(data, None), AuditJob(data, "cpu"), AuditJob(good, None)])
    assert [r.status for r in results] == ["crash", "crash", "ok"]
    assert "SIG" in results[0].reason  # the signal is named, e.g. SIGSEGV
