"""``jaxport compile`` and ``jaxport run --use-compiled`` as a user runs them: the installed
command in a subprocess, outside the checkout; exit codes, ``--json``, the fallback reason on
stderr (README "Compiled executables")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.export
import jax.numpy as jnp
import numpy as np
import pytest
from test_compiled import _key

import jaxport

JAXPORT = str(Path(sys.executable).with_name("jaxport"))


def _run(env, *args, code=0, cwd):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, (args, proc.stderr)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def setup(db_url, tmp_path):
    exp = jax.export.export(jax.jit(lambda x: jnp.cos(x) + 1))(
        jax.ShapeDtypeStruct((8,), jnp.float32)
    )
    with jaxport.Registry(db_url, blobs=tmp_path / "blobs") as reg:
        reg.push(exp, "f")
    np.savez(tmp_path / "in.npz", np.ones(8, np.float32))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "PIP_"))}
    env = {**base, "JAX_PLATFORMS": "cpu", "JAXPORT_HOME": str(tmp_path / "home"),
           "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": str(tmp_path / "blobs")}  # fmt: skip
    keys = {"trusted": _key(tmp_path, "trusted"), "other": _key(tmp_path, "other")}
    return env, keys, tmp_path


def test_compile_then_run_with_the_compiled_executable(setup):
    env, keys, where = setup
    private, public = keys["trusted"]
    made = json.loads(_run(env, "compile", "f", "--key", str(private), "--json", cwd=where).stdout)
    (one,) = made["sets"]
    assert one["status"] == "stored" and one["method"] == "" and len(one["files"]) == 1
    again = _run(env, "compile", "f", "--key", str(private), cwd=where).stdout
    assert again.startswith("already stored: f sha256:")
    assert max(len(line) for line in again.splitlines()) <= 80  # a terminal's width
    unsigned = _run(env, "compile", "f", cwd=where).stdout
    assert unsigned.startswith("not stored: f ") and "no key given" in unsigned
    ran = _run(env, "run", "f", "-i", "in.npz", "--use-compiled", "--trusted-key", str(public),
               "--json", cwd=where)  # fmt: skip
    compiled = json.loads(ran.stdout)["compiled"]
    assert compiled["used"] and compiled["cache_hits"] == 1 and compiled["reason"] is None
    text = _run(env, "run", "f", "-i", "in.npz", "--force", "--use-compiled", "--trusted-key",
                str(public), cwd=where)  # fmt: skip
    assert "compiled executables: used (1 file(s)" in text.stderr
    assert "jax cache hits: 1" in text.stderr


def test_run_falls_back_and_says_why(setup):
    env, keys, where = setup
    _run(env, "compile", "f", "--key", str(keys["trusted"][0]), cwd=where)
    ran = _run(env, "run", "f", "-i", "in.npz", "--use-compiled", "--trusted-key",
               str(keys["other"][1]), cwd=where)  # fmt: skip
    assert "compiled executables: not used: signed by " in ran.stderr
    assert "not by a trusted key" in ran.stderr
    assert ran.stderr.count("not by a trusted key") == 1  # said once, not also as a warning
    assert (where / "out.npz").is_file()  # a lambda's outputs
    no_key = _run(env, "run", "f", "-i", "in.npz", "--force", "--use-compiled", cwd=where)
    assert "no trusted key: --trusted-key PEM or $JAXPORT_COMPILED_KEYS" in no_key.stderr


def test_wrong_inputs_are_one_line_errors(setup):
    env, keys, where = setup
    missing = _run(env, "compile", "nothere", "--key", str(keys["trusted"][0]), code=1, cwd=where)
    assert missing.stderr.startswith("NotFoundError: ") and missing.stderr.count("\n") == 1
    jaxport.save(jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((8,), jnp.float32)),
                 where / "a.jaxport")  # fmt: skip
    usage = _run(env, "run", "a.jaxport", "-i", "in.npz", "--use-compiled", code=2, cwd=where)
    assert "--use-compiled needs a registry reference" in usage.stderr
    alone = _run(env, "run", "f", "-i", "in.npz", "--trusted-key", str(keys["trusted"][1]),
                 code=2, cwd=where)  # fmt: skip
    assert "--trusted-key goes with --use-compiled" in alone.stderr
