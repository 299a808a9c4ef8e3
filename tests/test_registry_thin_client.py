"""``Registry("http://...")`` as a thin client (issue 25 §4, the registry's side): its reads,
alias moves, pulls of archive bytes and files, and the push of an archive file import neither
jax nor SQLAlchemy (nor alembic), checked on ``sys.modules`` in a fresh interpreter against a
real ``jaxport serve`` process (``tests/_server.py``). What builds an ``Exported`` (``pull``)
or reads a header in full (``inspect``) imports jax."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from _server import admin_token, serving

import jaxport

pytestmark = pytest.mark.slow

HEAVY = ("jax", "jaxlib", "sqlalchemy", "alembic")

#: The calls, in one process; then the heavy modules imported. ``ARCHIVE``, ``OUT``: paths.
_PROBE = """
import json, os, sys
import jaxport

reg = jaxport.Registry(os.environ["URL"])
pushed = reg.push(os.environ["ARCHIVE"], "thin", aliases=["prod"], metadata={"team": "a"})
reg.alias("thin", "staging", pushed.version)
done = {
    "names": reg.names(),
    "list": [r.version for r in reg.list("thin")],
    "get": reg.get("thin@staging").metadata,
    "search": len(reg.search(name="thin")),
    "resolve": reg.resolve("thin").chosen.version,
    "aliases": reg.aliases("thin"),
    "history": len(reg.alias_history("thin")),
    "events": [e.kind for e in reg.events(name="thin")],
    "tokens": len(reg.tokens.list()),
}
data = reg.pull_bytes("thin@prod")
reg.pull_file("thin", os.environ["OUT"])
pushed_bytes = open(os.environ["ARCHIVE"], "rb").read()
done["same"] = data == pushed_bytes == open(os.environ["OUT"], "rb").read()
heavy = set(os.environ["HEAVY"].split())
done["heavy"] = sorted({m.split(".")[0] for m in sys.modules} & heavy)
if os.environ.get("PULL"):
    done["inspect"] = reg.inspect("thin").fun_name
    reg.pull("thin")
    done["heavy_after_pull"] = sorted({m.split(".")[0] for m in sys.modules} & heavy)
print(json.dumps(done))
"""


@pytest.fixture
def server(tmp_path):
    db, blobs = f"sqlite:///{tmp_path / 'r.db'}", str(tmp_path / "blobs")
    with serving(db, blobs, tmp_path / "serve.log") as s:
        yield s, admin_token(db, blobs)


def _probe(server, tmp_path, **env: str) -> dict[str, object]:
    s, token = server
    archive = tmp_path / "sin.jaxport"
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3)), archive)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    environ.update(
        URL=s.url, JAXPORT_TOKEN=token, JAXPORT_HOME=str(tmp_path / "home"),
        ARCHIVE=str(archive), OUT=str(tmp_path / "out.jaxport"), HEAVY=" ".join(HEAVY), **env,
    )  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(_PROBE)],
        env=environ, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_reads_alias_moves_pulls_and_a_file_push_import_neither_jax_nor_sqlalchemy(
    server, tmp_path
):
    done = _probe(server, tmp_path)
    assert done["heavy"] == []
    assert done["names"] == ["thin"] and done["list"] == [1] and done["get"] == {"team": "a"}
    assert done["search"] == 1 and done["resolve"] == 1
    assert done["aliases"] == {"prod": 1, "staging": 1} and done["history"] == 2
    assert "push" in done["events"] and done["tokens"] >= 1 and done["same"] is True


def test_building_an_exported_imports_jax(server, tmp_path):
    """The probe sees what it claims to: ``inspect`` (an ``ArchiveInfo``, its dtypes and
    pytrees read as jax reads them) and ``pull`` (an ``Exported``) load jax."""
    done = _probe(server, tmp_path, PULL="1")
    assert done["heavy"] == [] and done["inspect"] == "sin" and "jax" in done["heavy_after_pull"]
    assert "sqlalchemy" not in done["heavy_after_pull"]
