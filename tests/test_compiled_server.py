"""Compiled executables through a registry server (issue 27 §2; ``server/_api_compiled.py``,
``registry/_compiled_http.py``), on SQLite and PostgreSQL: ``compile`` through a server
compiles here and stores the signed set there; a fresh process pulls with
``use_compiled=True`` through the server and its first calls are jax cache hits; a file the
server serves tampered is a fallback with a reason and nothing written; another team's valid
token is refused; the server refuses a set whose bundle does not sign its manifest; the CLI
(``jaxport compile``, ``jaxport run --use-compiled``) does the same against a server. A repeat
compile sends no blob (another signer only its bundle), counted on the client's requests; a
set of 2,000 files is stored, one over ``MAX_SET_FILES`` refused by client and server; ``read``
serves the blobs of any archive listed, whatever was listed after it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import textwrap

import jax
import jax.export
import jax.numpy as jnp
import pytest
import sqlalchemy as sa
import test_compiled
from _server import admin_token, serving
from test_compiled import _function, _model, fresh_process_json

from jaxport import (
    CompiledPolicy,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    Registry,
    SignatureError,
)
from jaxport._signing import sign_digest
from jaxport.registry import _compiled_seed
from jaxport.registry._compiled_http import HttpCompiledStore
from jaxport.registry._compiled_types import MAX_SET_FILES, CompiledFile, manifest_bytes
from jaxport.registry._download import download
from jaxport.registry._wire import to_wire
from jaxport.server._limits import MAX_BODY

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
    said = fresh_process_json(script, tmp_path, env)
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
    manifest_digest = served["made"]["team-a-f"][0].manifest_digest
    path = f"/compiled/team-a-f/{digest}/blobs/{manifest_digest}"
    with pytest.raises(PermissionDeniedError):
        download(other._backend._http, path, manifest_digest, 1 << 20)
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
    blobs = [theirs.manifest_digest, *(f.sha256 for f in theirs.files)]
    asked = http.json("POST", "/blobs/missing", json={"digests": blobs, "name": "team-b-m"})
    assert asked["missing"] == blobs  # team a's set's blobs: not reached, as if absent
    for data in (manifest_bytes(made), signed.bundle):
        digest = hashlib.sha256(data).hexdigest()
        http.json("PUT", f"/blobs/{digest}", content=data, params={"name": "team-b-m"})
    manifest_digest = hashlib.sha256(manifest_bytes(made)).hexdigest()
    body = {"set": to_wire(made), "manifest_digest": manifest_digest,
            "bundle_digest": hashlib.sha256(signed.bundle).hexdigest()}  # fmt: skip
    with pytest.raises(NotFoundError, match="not uploaded"):
        http.json("POST", "/compiled/team-b-m", json=body)
    assert other.compiled_sets("team-b-m") == []


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _counted(monkeypatch, registry):
    """The requests of ``registry``'s server connection that store compiled sets or ask for
    them (method, path; not the archive's own download) and each blob PUT (digest, bytes),
    from now on."""
    http = registry._backend._http
    real = http.json
    calls, sent = [], []

    def json(method, path, **kwargs):
        if path.startswith("/compiled/") or (method != "GET" and path.startswith("/blobs/")):
            calls.append((method, path))
        if method == "PUT":
            sent.append((path.rsplit("/", 1)[1], len(kwargs["content"])))
        return real(method, path, **kwargs)

    monkeypatch.setattr(http, "json", json)
    return calls, sent


def _forget_uploads(served):
    """As if ``UPLOAD_TTL`` had passed since every upload (``registry/_reach.py``)."""
    engine = sa.create_engine(served["server"].db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM uploads"))
    engine.dispose()


def test_a_repeat_compile_sends_no_blob(served, keys, monkeypatch):
    """Compiling again with the same key asks for the archive's sets and sends nothing; with
    another key, a day after the uploads, it sends only the new bundles: the files and the
    manifest are reached through the stored sets of a name the token reads."""
    team, made = served["team"], served["made"]["team-a-m"]
    calls, sent = _counted(monkeypatch, team)
    again = team.compile("team-a-m", private_key=keys["trusted"][0])
    assert [s.status for s in again] == ["already stored"] * 2
    assert sent == []
    assert calls == [("GET", f"/compiled/team-a-m/{made[0].digest}")] * 2
    _forget_uploads(served)
    del calls[:]
    other = team.compile("team-a-m", private_key=keys["other"][0])
    assert [s.status for s in other] == ["stored"] * 2
    assert {s.signer for s in other} != {s.signer for s in made}
    held = {d for s in made for d in (s.manifest_digest, *(f.sha256 for f in s.files))}
    assert len(sent) == 2 and not {d for d, _ in sent} & held  # the two bundles
    assert [m for m, _ in calls].count("PUT") == 2


def test_read_serves_a_blob_of_any_archive_listed(served, keys):
    """Two archives' sets listed, then the first one's blobs read: each from its own
    archive's route (a blob of no listed set is not asked for)."""
    team = served["team"]
    team.push(
        jax.export.export(jax.jit(lambda x: jnp.cos(x) + 1))(
            jax.ShapeDtypeStruct((8,), jnp.float32)
        ),
        "team-a-f",
    )
    team.compile("team-a-f:2", private_key=keys["trusted"][0])
    first, second = (team.get(f"team-a-f:{v}").variants[0].digest for v in (1, 2))
    store = HttpCompiledStore(team._backend._http, "team-a-f", team._backend.lacks)
    (one,) = store.sets_of(first)
    (two,) = store.sets_of(second)
    assert one.made.files != two.made.files
    assert store.read(one.made.manifest_digest) == manifest_bytes(one.made)
    for f in (*one.made.files, *two.made.files):
        assert _sha(store.read(f.sha256)) == f.sha256
    with pytest.raises(NotFoundError, match="no compiled set listed"):
        store.read("0" * 64)


def _many(base, count: int) -> tuple[object, dict[str, bytes]]:
    """``base`` with ``count`` files (ten distinct contents), of a key of its own."""
    contents = {f"jit_f-{i:05d}-cache": b"native %d" % (i % 10) for i in range(count)}
    files = tuple(CompiledFile(n, _sha(d), len(d)) for n, d in contents.items())
    made = dataclasses.replace(base, jax_version="0.0.0.test", files=files, manifest_digest="",
                               signer="", status="", reason=None)  # fmt: skip
    return made, contents


def test_a_set_of_2000_files_is_stored_and_one_over_the_cap_refused(served, keys, monkeypatch):
    team = served["team"]
    store = HttpCompiledStore(team._backend._http, "team-a-f", team._backend.lacks)
    made, contents = _many(served["made"]["team-a-f"][0], 2000)
    manifest = manifest_bytes(made)
    signed = sign_digest(_sha(manifest), keys["trusted"][0])
    made = dataclasses.replace(made, signer=signed.signer)
    body = {"set": to_wire(made), "manifest_digest": _sha(manifest),
            "bundle_digest": _sha(signed.bundle)}  # fmt: skip
    assert len(json.dumps(body)) > MAX_BODY  # over the limit of any other route
    calls, sent = _counted(monkeypatch, team)
    stored = store.store(made, manifest, signed.bundle, contents)
    assert stored.status == "stored" and len(stored.files) == 2000
    assert len(sent) == 12  # the manifest, the bundle, ten distinct files
    (listed,) = [s for s in store.sets_of(made.digest) if s.made.jax_version == "0.0.0.test"]
    assert listed.made.files == made.files
    over, _ = _many(made, MAX_SET_FILES + 1)
    del calls[:]
    with pytest.raises(InvalidNameError, match="at most 4,096 files"):
        store.store(over, b"", b"", {})
    assert calls == []  # refused before anything was sent
    body = {"set": to_wire(over), "manifest_digest": "0" * 64, "bundle_digest": "0" * 64}
    with pytest.raises(InvalidNameError, match="at most 4,096 files"):
        team._backend._http.json("POST", "/compiled/team-a-f", json=body)
