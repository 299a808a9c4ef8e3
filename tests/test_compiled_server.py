"""Compiled executables through a registry server (issue 27 §2; ``server/_api_compiled.py``,
``registry/_compiled_http.py``), on SQLite and PostgreSQL: ``compile`` through a server
compiles here and stores the signed set there; a fresh process pulls with
``use_compiled=True`` through the server and its first calls are jax cache hits; a file the
server serves tampered is a fallback with a reason and nothing written; another team's valid
token is refused; the server refuses a set whose bundle does not sign its manifest; the CLI
(``jaxport compile``, ``jaxport run --use-compiled``) does the same against a server."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import test_compiled
from _server import admin_token, serving
from test_compiled import _function, _model

from jaxport import CompiledPolicy, NotFoundError, PermissionDeniedError, Registry, SignatureError
from jaxport._signing import sign_digest
from jaxport.registry import _compiled_seed
from jaxport.registry._compiled_http import HttpCompiledStore
from jaxport.registry._compiled_types import manifest_bytes
from jaxport.registry._wire import to_wire

# test_compiled's fixtures: its signing keys, a verdict cache per test, one compile per archive.
keys = test_compiled.keys
_own_cache = test_compiled._own_cache
_one_compile = test_compiled._one_compile


@pytest.fixture
def served(db_url, tmp_path, keys):
    """A server whose team-a holds ``team-a-f`` and ``team-a-m``, compiled through it."""
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as server:
        with Registry(server.url, token=admin_token(db_url, blobs)) as admin:
            tokens = {t: admin.tokens.create(f"team-{t}", "write", prefixes=[f"team-{t}-"]).secret
                      for t in "ab"}  # fmt: skip
        team = Registry(server.url, token=tokens["a"])
        team.push(_function(), "team-a-f")
        team.push(_model(), "team-a-m")
        key = keys["trusted"][0]
        made = {n: team.compile(n, private_key=key) for n in ("team-a-f", "team-a-m")}
        yield {"server": server, "tokens": tokens, "team": team, "made": made, "blobs": blobs}
        team.close()


def test_compile_through_a_server_and_a_fresh_pull_hits_jax_cache(served, keys, tmp_path):
    made, team = served["made"], served["team"]
    assert [s.status for s in made["team-a-f"]] == ["stored"]
    assert sorted((s.method, s.status) for s in made["team-a-m"]) == [
        ("hidden", "stored"), ("logits", "stored")]  # fmt: skip
    again = team.compile("team-a-f", private_key=keys["trusted"][0])
    assert [s.status for s in again] == ["already stored"]
    listed = team.compiled_sets("team-a-m")
    assert sorted(s.method for s in listed) == ["hidden", "logits"]
    assert {s.signer for s in listed} == {made["team-a-m"][0].signer}
    script = textwrap.dedent(f"""
        import json, warnings
        import jax, numpy as np
        import jaxport
        warnings.simplefilter("error")
        reg = jaxport.Registry({served["server"].url!r}, token={served["tokens"]["a"]!r})
        policy = jaxport.CompiledPolicy([{str(keys["trusted"][1])!r}])
        m = reg.pull_model("team-a-m", use_compiled=policy)
        use = reg.last_compiled_use
        m.logits(np.ones((2, 16), np.float32)); m.hidden(np.ones((2, 16), np.float32))
        model_hits = use.cache_hits
        exp = reg.pull("team-a-f", use_compiled=policy)
        use_f = reg.last_compiled_use
        jax.jit(exp.call)(np.ones(8, np.float32))
        print(json.dumps({{"used": use.used, "methods": sorted(use.methods), "hits": model_hits,
                          "f": use_f.used, "f_hits": use_f.cache_hits}}))
    """)
    env = {**os.environ, "JAXPORT_CACHE": str(tmp_path / "fresh-cache")}
    env.pop("JAXPORT_TOKEN", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["used"] and said["methods"] == ["hidden", "logits"] and said["hits"] == 2
    assert said["f"] and said["f_hits"] == 1


def test_a_tampered_file_served_falls_back_and_writes_nothing(served, keys, monkeypatch):
    team = served["team"]
    first = team.compiled_sets("team-a-f")[0].files[0].sha256
    with Registry(served["server"].db_url, blobs=served["blobs"]) as direct:
        direct.blobs.put(first, b"native code of someone else", replace=True)

    def refuse(*args, **kwargs):
        raise AssertionError("a refused set reached jax's cache directory")

    monkeypatch.setattr(_compiled_seed, "cache_dir", refuse)
    monkeypatch.setattr(_compiled_seed, "_write", refuse)
    use = team.use_compiled("team-a-f", policy=CompiledPolicy([keys["trusted"][1]]))
    assert not use.used and use.skipped, use
    assert any(w in str(use.skipped) for w in ("sha256", "integrity", "corrupt")), use.skipped
    untrusted = team.use_compiled("team-a-f", policy=CompiledPolicy([keys["other"][1]]))
    assert not untrusted.used


def test_another_teams_token_is_refused(served, keys, request):
    other = Registry(served["server"].url, token=served["tokens"]["b"])
    request.addfinalizer(other.close)
    digest = served["made"]["team-a-f"][0].digest
    store = HttpCompiledStore(other._backend._http, "team-a-f", other._backend.lacks)
    with pytest.raises(PermissionDeniedError):
        store.sets_of(digest)
    with pytest.raises(PermissionDeniedError):
        store.read(served["made"]["team-a-f"][0].manifest_digest)
    made = dataclasses.replace(served["made"]["team-a-f"][0], files=())
    manifest = manifest_bytes(made)
    signed = sign_digest(hashlib.sha256(manifest).hexdigest(), keys["trusted"][0])
    with pytest.raises(PermissionDeniedError):
        store.store(made, manifest, signed.bundle, {})


def test_the_server_refuses_a_bundle_that_does_not_sign_the_manifest(served, keys):
    team = served["team"]
    made = served["made"]["team-a-f"][0]
    store = HttpCompiledStore(team._backend._http, "team-a-f", team._backend.lacks)
    wrong = sign_digest("0" * 64, keys["other"][0])
    one = dataclasses.replace(made, signer=wrong.signer, files=())
    with pytest.raises(SignatureError):
        store.store(one, manifest_bytes(one), wrong.bundle, {})
    assert [s.signer for s in team.compiled_sets("team-a-f")] == [made.signer]


def test_the_cli_compiles_and_runs_through_a_server(served, keys, tmp_path):
    """``jaxport compile`` against a server stores the set there; ``jaxport run
    --use-compiled`` through it loads the executable (a jax cache hit)."""
    import numpy as np
    from test_compiled_cli import _run

    np.savez(tmp_path / "in.npz", np.ones(8, np.float32))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "PIP_"))}
    env = {**base, "JAX_PLATFORMS": "cpu", "JAXPORT_HOME": str(tmp_path / "home"),
           "JAXPORT_REGISTRY": served["server"].url,
           "JAXPORT_TOKEN": served["tokens"]["a"]}  # fmt: skip
    served["team"].push(_function(), "team-a-g")
    made = _run(env, "compile", "team-a-g", "--key", str(keys["trusted"][0]), "--json",
                cwd=tmp_path)  # fmt: skip
    (one,) = json.loads(made.stdout)["sets"]
    assert one["status"] == "stored"
    ran = _run(env, "run", "team-a-g", "-i", "in.npz", "--use-compiled", "--trusted-key",
               str(keys["trusted"][1]), "--json", cwd=tmp_path)  # fmt: skip
    compiled = json.loads(ran.stdout)["compiled"]
    assert compiled["used"] and compiled["cache_hits"] == 1 and compiled["reason"] is None


def test_a_set_may_name_only_blobs_its_token_reaches(served, keys, request):
    """Team b cannot store a set of its own name whose file is team a's blob it never
    uploaded (it could then read the blob through its set): 404, nothing stored."""
    other = Registry(served["server"].url, token=served["tokens"]["b"])
    request.addfinalizer(other.close)
    other.push(_model(), "team-b-m")
    mine = other.get("team-b-m").variants[0].digest
    theirs = served["made"]["team-a-f"][0]
    made = dataclasses.replace(theirs, digest=mine, method="logits", status="", reason="")
    signed = sign_digest(hashlib.sha256(manifest_bytes(made)).hexdigest(), keys["other"][0])
    made = dataclasses.replace(made, signer=signed.signer)
    http = other._backend._http
    for data in (manifest_bytes(made), signed.bundle):
        digest = hashlib.sha256(data).hexdigest()
        http.json("PUT", f"/blobs/{digest}", content=data, params={"name": "team-b-m"})
    manifest_digest = hashlib.sha256(manifest_bytes(made)).hexdigest()
    body = {"set": to_wire(made), "manifest_digest": manifest_digest,
            "bundle_digest": hashlib.sha256(signed.bundle).hexdigest()}  # fmt: skip
    with pytest.raises(NotFoundError, match="not uploaded"):
        http.json("POST", "/compiled/team-b-m", json=body)
    assert other.compiled_sets("team-b-m") == []
