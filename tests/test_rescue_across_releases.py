"""Fleet rescue across real jax releases (issue 26 §3), from the user's seat: a function exported
and pushed by jax 0.7.0 (its window ended 2026-01-22) is rescued with ``jaxport rescue
--expiring-before DATE --jax 0.12.0.1 --python …`` (the re-export in jax 0.12.0.1's environment,
checked against its golden example), then pulled and run by jax 0.12.0.1.

Needs the venvs ``scripts/test_jax_versions.sh`` makes (``.jax-venvs/jax-0.7.0`` and
``jax-0.12.0.1``, or ``$JAXPORT_TEST_JAX_VENVS``), as ``.ci/run`` makes them before the slow set;
without them the test skips, naming what is missing.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from _server import JAXPORT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
OLD, NEW = "0.7.0", "0.12.0.1"

PUSH = textwrap.dedent("""
    import sys
    import jax, jax.export, jax.numpy as jnp, numpy as np
    import jaxport
    w = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    spec = jax.ShapeDtypeStruct((2, 4), jnp.float32)
    exp = jax.export.export(jax.jit(lambda x: jnp.tanh(x @ w)))(spec)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    reg = jaxport.Registry(sys.argv[1], blobs=sys.argv[2])
    reg.push(exp, "old-fn", examples=[((x,), {})], aliases=["prod"])
""")
PULL = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import jaxport
    reg = jaxport.Registry(sys.argv[1], blobs=sys.argv[2])
    exp = reg.pull("old-fn@prod", platform="cpu")
    w = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    err = float(np.abs(np.asarray(exp.call(x)) - np.tanh(x @ w)).max())
    ref = reg.get("old-fn@prod")
    print(json.dumps({"jax": jax.__version__, "err": err, "version": ref.version,
                      "writer": [v.jax_version for v in ref.variants]}))
""")


def _python(release: str) -> str:
    root = Path(os.environ.get("JAXPORT_TEST_JAX_VENVS") or ROOT / ".jax-venvs")
    python = root / f"jax-{release}" / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"{python} is missing: scripts/test_jax_versions.sh {release} makes it")
    return str(python)


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    # Run where a user would: outside the checkout, whose `jaxport/` source folder would
    # otherwise shadow the package installed in the release's venv.
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return done.stdout


def test_a_function_written_by_jax_0_7_is_rescued_by_0_12_and_runs_there(tmp_path):
    old, new = _python(OLD), _python(NEW)
    db_url, blobs = f"sqlite:///{tmp_path / 'reg.db'}", str(tmp_path / "blobs")
    env = {**os.environ, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": blobs, "COLUMNS": "80"}
    _run([old, "-c", PUSH, db_url, blobs], env, tmp_path)
    (source,) = json.loads(_run([JAXPORT, "audit", "forecast", "--json"], env, tmp_path))
    assert source["writer"] == OLD
    ended = datetime.date.fromisoformat(source["window_ends"])
    before = (ended + datetime.timedelta(days=1)).isoformat()
    report = json.loads(_run([JAXPORT, "rescue", "--expiring-before", before, "--jax", NEW,
                              "--python", new, "--json"], env, tmp_path))  # fmt: skip
    assert report["rescue"]["refusals"] == [] and len(report["rescue"]["rescued"]) == 1, report
    pulled = json.loads(_run([new, "-c", PULL, db_url, blobs], env, tmp_path))
    assert pulled["jax"] == NEW and pulled["version"] == 2 and pulled["writer"] == [NEW]
    assert pulled["err"] < 1e-6
    forecast = json.loads(_run([JAXPORT, "audit", "forecast", "--json"], env, tmp_path))
    rescued = next(v for v in forecast if v["version"] == 2)
    assert datetime.date.fromisoformat(rescued["window_ends"]) > ended
    lineage = json.loads(_run([JAXPORT, "lineage", "old-fn:2", "--json"], env, tmp_path))
    assert lineage["derivation"] == "rescue"
    assert [(a["name"], a["version"]) for a in lineage["ancestors"]] == [("old-fn", 1)]
