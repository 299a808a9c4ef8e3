"""Compiled executables as signed side artifacts (issue 27 §2; README "Compiled executables"):
``Registry.compile`` stores, per method, the files jax's persistent compilation cache wrote,
signed; ``use_compiled`` writes them into jax's cache only when a trusted key signed them and
they match this host, every file checked against the signed manifest. Every refusal is a
fallback with a reason and nothing written (tampered file, tampered manifest, an untrusted
signer, another device kind, another jaxlib, a row that lies about its host).

The real compile child runs once per archive for the module (``_one_compile``); a fresh
process shows that a pulled model's and function's first calls are jax cache hits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.export
import jax.numpy as jnp
import numpy as np
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import jaxport
from jaxport import CompiledFallbackWarning, CompiledPolicy, UnsupportedFeatureError
from jaxport._compiled_host import host_key
from jaxport.registry import _compiled_make, _compiled_seed
from jaxport.registry._compiled_types import CompiledFile

_CACHE: dict[str, object] = {}


def _key(where, name):
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = where / f"{name}.pem", where / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    where = tmp_path_factory.mktemp("keys")
    return {"trusted": _key(where, "trusted"), "other": _key(where, "other")}


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    """Signature verdicts (``registry/_compiled_verdicts.py``) under the test's directory."""
    monkeypatch.setenv("JAXPORT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def _one_compile(monkeypatch):
    """The compile child runs once per archive in this module (its result reused)."""
    real = _CACHE.setdefault("real", _compiled_make.compile_archive)

    def cached(path, variant, allowed, timeout):
        if variant.digest not in _CACHE:
            _CACHE[variant.digest] = real(path, variant, allowed, timeout)
        return _CACHE[variant.digest]

    monkeypatch.setattr(_compiled_make, "compile_archive", cached)


@pytest.fixture
def nothing_written(monkeypatch):
    """Fails the test if anything would be written into jax's cache directory."""

    def refuse(*args, **kwargs):
        raise AssertionError("a refused set reached jax's cache directory")

    monkeypatch.setattr(_compiled_seed, "cache_dir", refuse)
    monkeypatch.setattr(_compiled_seed, "_write", refuse)


def _function():
    return jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2))(
        jax.ShapeDtypeStruct((8,), jnp.float32)
    )


def _model():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((16, 4), np.float32), "b": np.zeros(4, np.float32)}
    specs = {"logits": [jax.ShapeDtypeStruct((2, 16), jnp.float32)],
             "hidden": [jax.ShapeDtypeStruct((2, 16), jnp.float32)]}  # fmt: skip

    def logits(p, x):
        return x @ p["w"] + p["b"]

    def hidden(p, x):
        return jax.nn.relu(x @ p["w"])

    return jaxport.Model(params, {"logits": logits, "hidden": hidden}, specs)


@pytest.fixture
def compiled(registry, keys):
    """A function ``f`` and a model ``m``, compiled and signed by the trusted key."""
    registry.push(_function(), "f")
    registry.push(_model(), "m")
    private = keys["trusted"][0]
    return {
        "f": registry.compile("f", private_key=private),
        "m": registry.compile("m", private_key=private),
    }


def _policy(keys, which="trusted"):
    return CompiledPolicy([keys[which][1]])


def test_compile_stores_one_signed_set_per_method_and_keeps_it_when_run_again(
    registry, keys, compiled
):
    here = host_key()
    (f,) = compiled["f"]
    assert (f.status, f.method, f.platform, f.device_kind) == (
        "stored",
        "",
        "cpu",
        here.device_kind,
    )
    assert (f.jaxlib_version, f.options) == (here.jaxlib_version, here.options)
    assert len(f.files) == 1 and f.files[0].name.endswith("-cache") and f.size > 0
    assert sorted(s.method for s in compiled["m"]) == ["hidden", "logits"]
    assert {s.status for s in compiled["m"]} == {"stored"}
    again = registry.compile("m", private_key=keys["trusted"][0])
    assert {s.status for s in again} == {"already stored"}
    unsigned = registry.compile("m")
    assert {s.status for s in unsigned} == {"not stored"}
    assert "no key" in unsigned[0].reason
    stored = registry.compiled_sets("m")
    assert len(stored) == 2 and {s.signer for s in stored} == {compiled["m"][0].signer}


def test_other_platform_compiles_nothing(registry, compiled):
    (skipped,) = registry.compile("f", platform="tpu")
    assert skipped.status == "skipped" and "compiles for cpu, not tpu" in skipped.reason


def test_a_verified_set_is_used_and_the_first_calls_hit_jax_cache(
    registry, keys, compiled, db_url, tmp_path
):
    """In a fresh process: the model's two methods and the function load, not compile; gc
    before keeps every blob of the sets."""
    assert not registry.gc(min_age=0).digests
    script = textwrap.dedent(f"""
        import json, warnings
        import jax, numpy as np
        import jaxport
        warnings.simplefilter("error")
        reg = jaxport.Registry({db_url!r}, blobs={str(tmp_path / "blobs")!r},
                               compiled=jaxport.CompiledPolicy([{str(keys["trusted"][1])!r}]))
        m = reg.pull_model("m")
        use = reg.last_compiled_use
        m.logits(np.ones((2, 16), np.float32)); m.hidden(np.ones((2, 16), np.float32))
        model_hits = use.cache_hits
        exp = reg.pull("f")
        use_f = reg.last_compiled_use
        jax.jit(exp.call)(np.ones(8, np.float32))
        print(json.dumps({{"used": use.used, "methods": sorted(use.methods), "hits": model_hits,
                          "f": use_f.used, "f_hits": use_f.cache_hits, "dir": use.cache_dir}}))
    """)
    env = {**os.environ, "JAXPORT_CACHE": str(tmp_path / "cache")}
    said = fresh_process_json(script, tmp_path, env)
    assert said["used"] and said["methods"] == ["hidden", "logits"] and said["hits"] == 2
    assert said["f"] and said["f_hits"] == 1
    assert said["dir"].startswith("/") and "jaxport-jax-cache-" in said["dir"]


def fresh_process_json(script: str, cwd: Path, env: dict[str, str]) -> Any:
    """Runs ``script`` in a new Python process (nothing compiled or cached in memory) and
    returns the JSON document its last line of output holds; a failure shows its stderr."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _first_file_digest(registry, name):
    return registry.compiled_sets(name)[0].files[0].sha256


def _tamper_file(registry, keys):
    registry.blobs.put(
        _first_file_digest(registry, "f"), b"native code of someone else", replace=True
    )


def _tamper_manifest(registry, keys):
    """A manifest naming other bytes, stored properly and pointed at by the row: its old
    signature does not sign it."""
    import hashlib

    (row,) = registry.compiled_sets("f")
    evil = b"native code of someone else"
    body = json.loads(registry.read_blob(row.manifest_digest))
    body["files"][0]["sha256"] = hashlib.sha256(evil).hexdigest()
    body["files"][0]["size"] = len(evil)
    forged = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(forged).hexdigest()
    now = 0.0
    with registry._backend.engine.begin() as conn:
        for d, data in ((digest, forged), (body["files"][0]["sha256"], evil)):
            registry.blobs.put(d, data)
            conn.execute(sa.text("INSERT INTO blobs (digest, size, created_at) VALUES "
                                 "(:d, :s, :t)"), {"d": d, "s": len(data), "t": now})  # fmt: skip
        conn.execute(sa.text("UPDATE compiled SET manifest_digest = :d"), {"d": digest})


def _host(**changes):
    def patched():
        return dataclasses.replace(host_key(), **changes)

    return patched


def _row_lies(registry, keys, monkeypatch):
    """The row claims the host's device kind; the signed manifest says cpu."""
    monkeypatch.setattr("jaxport._compiled_host.host_key", _host(device_kind="TPU v9"))
    with registry._backend.engine.begin() as conn:
        conn.execute(sa.text("UPDATE compiled SET device_kind = 'TPU v9'"))


@pytest.mark.parametrize(
    ("attack", "reason"),
    [
        ("tampered file", "IntegrityError"),
        ("tampered manifest", "SignatureError"),
        ("untrusted signer", "not by a trusted key"),
        ("other device kind", "device kind TPU v9 here != "),
        ("other jaxlib", "jaxlib 0.11.0 here != "),
        ("other options", "compile options"),
        ("row lies", "its signed manifest: device kind TPU v9 here != "),
    ],
)
def test_refused_sets_fall_back_with_a_reason_and_write_nothing(
    registry, keys, compiled, monkeypatch, nothing_written, attack, reason
):
    policy = _policy(keys)
    if attack == "tampered file":
        _tamper_file(registry, keys)
    elif attack == "tampered manifest":
        _tamper_manifest(registry, keys)
    elif attack == "untrusted signer":
        policy = _policy(keys, "other")
    elif attack == "other device kind":
        monkeypatch.setattr("jaxport._compiled_host.host_key", _host(device_kind="TPU v9"))
    elif attack == "other jaxlib":
        monkeypatch.setattr("jaxport._compiled_host.host_key", _host(jaxlib_version="0.11.0"))
    elif attack == "other options":
        options = {**host_key().options, "jax_enable_x64": "True"}
        monkeypatch.setattr("jaxport._compiled_host.host_key", _host(options=options))
    else:
        _row_lies(registry, keys, monkeypatch)
    use = registry.use_compiled("f", policy=policy)
    assert not use.used and reason in use.reason and use.cache_dir is None
    with pytest.warns(CompiledFallbackWarning, match="compiled executables not used"):
        registry.pull("f", use_compiled=policy)
    assert reason in registry.last_compiled_use.reason


def test_never_by_default_and_true_without_keys_says_so(registry, keys, compiled, nothing_written):
    registry.pull("f")
    assert registry.last_compiled_use is None
    registry.pull("f", use_compiled=False)
    with pytest.warns(CompiledFallbackWarning, match="no trusted key"):
        registry.pull("f", use_compiled=True)
    with pytest.raises(jaxport.InvalidNameError):
        registry.pull("f", use_compiled="yes")


def test_the_environment_policy(registry, keys, compiled, monkeypatch, nothing_written):
    monkeypatch.setenv("JAXPORT_USE_COMPILED", "1")
    with pytest.raises(jaxport.SignatureError, match="JAXPORT_COMPILED_KEYS"):
        registry.pull("f")
    monkeypatch.setenv("JAXPORT_COMPILED_KEYS", str(keys["other"][1]))
    with pytest.warns(CompiledFallbackWarning, match="not by a trusted key"):
        registry.pull("f")


def test_a_variant_without_sets_says_so(registry, keys, nothing_written):
    registry.push(_function(), "g")
    use = registry.use_compiled("g", policy=_policy(keys))
    assert not use.used and "no compiled executables stored" in use.reason


def test_gc_forgets_the_sets_of_deleted_versions(registry, keys, compiled):
    stored = registry.compiled_sets("f")[0]
    registry.delete("f", 1)
    removed = set(registry.gc(min_age=0).digests)
    assert stored.files[0].sha256 in removed and stored.manifest_digest in removed


def test_a_registry_server_without_the_routes_lacks_compiled_executables(monkeypatch):
    """A server older than ``server/_api_compiled.py`` answers 404 (an untyped
    ``RegistryError``): an ``UnsupportedFeatureError`` naming compiled executables."""
    from jaxport.registry._compiled_http import HttpCompiledStore

    def not_found(*args, **kwargs):
        raise jaxport.RegistryError("HTTP 404: Not Found")

    reg = jaxport.Registry("http://127.0.0.1:9", token="jxp_x")
    store = HttpCompiledStore(reg._backend._http, "f", reg._backend.lacks)
    monkeypatch.setattr(reg._backend._http, "json", not_found)
    with pytest.raises(UnsupportedFeatureError, match="compiled executables"):
        store.sets_of("0" * 64)


def test_a_pull_through_a_server_falls_back(registry, keys, monkeypatch):
    """A pull that asks for compiled sets where the backend has none goes on, saying why."""
    registry.push(_function(), "f")
    lacks = registry._backend.lacks  # what a registry server's backend says
    monkeypatch.setattr(
        registry, "_compiled_store", lambda name=None: lacks("compiled executables")
    )
    with pytest.warns(CompiledFallbackWarning, match="compiled executables"):
        registry.pull("f", use_compiled=_policy(keys))


def test_a_host_remembers_a_verified_signature_owned_by_its_user_only(
    registry, keys, compiled, monkeypatch, tmp_path
):
    """The first use verifies the bundle (model-signing) and records the verdict; the next
    reads it; a verdict file others may write is not believed."""
    from jaxport.registry import _compiled_verdicts

    written = tmp_path / "jax-cache"
    written.mkdir()
    monkeypatch.setattr(_compiled_seed, "cache_dir", lambda: (str(written), None))
    xla_caches = jax.config.jax_persistent_cache_enable_xla_caches
    try:
        assert registry.use_compiled("f", policy=_policy(keys)).used
        (stored,) = registry.compiled_sets("f")
        with registry._backend.engine.connect() as conn:
            query = sa.text("SELECT bundle_digest FROM compiled WHERE method = ''")
            bundle = conn.execute(query).scalar_one()
        assert _compiled_verdicts.verified(stored.signer, stored.manifest_digest, bundle)

        def no_library(*args, **kwargs):
            raise AssertionError("verified again")

        monkeypatch.setattr(_compiled_seed, "verify_digest", no_library)
        use = registry.use_compiled("f", policy=_policy(keys))
        assert (
            use.used
            and use.files == 1
            and [p.name for p in written.iterdir()] == [stored.files[0].name]
        )
        marker = tmp_path / "cache" / "compiled-signatures" / stored.signer
        (marker / f"{stored.manifest_digest}-{bundle}").chmod(0o666)
        with pytest.raises(AssertionError, match="verified again"):
            registry.use_compiled("f", policy=_policy(keys))
    finally:
        jax.config.update("jax_persistent_cache_enable_xla_caches", xla_caches)


def _with_files(made, count, name_length=20):
    names = [f"{i:05d}".ljust(name_length, "a") for i in range(count)]
    files = tuple(CompiledFile(n, "f" * 64, 1) for n in names)
    return dataclasses.replace(made, files=files)


def test_the_most_files_a_set_may_have_fit_the_routes_body_and_one_more_is_refused(
    registry, keys, compiled
):
    """A set of ``MAX_SET_FILES`` files of the longest names fits ``POST /compiled/NAME``'s
    body limit; its manifest reads; one file more is an ``InvalidNameError`` of the store
    (a direct registry here; ``test_compiled_server`` for client and server)."""
    from jaxport.registry._compiled_types import MAX_SET_FILES, manifest_bytes, parse_manifest
    from jaxport.registry._wire import to_wire
    from jaxport.server._limits import MAX_COMPILED_BODY, body_limit

    most = _with_files(compiled["f"][0], MAX_SET_FILES, name_length=255)
    body = {"set": to_wire(most), "manifest_digest": "0" * 64, "bundle_digest": "0" * 64}
    assert len(json.dumps(body)) <= MAX_COMPILED_BODY
    assert body_limit("POST", "/api/v1/compiled/f", 1) == MAX_COMPILED_BODY
    assert len(parse_manifest(manifest_bytes(most)).files) == MAX_SET_FILES
    over = _with_files(compiled["f"][0], MAX_SET_FILES + 1)
    with pytest.raises(jaxport.InvalidNameError, match="at most 4,096 files"):
        registry._compiled_store().store(over, manifest_bytes(over), b"", {})
    with pytest.raises(jaxport.CorruptArchiveError, match="files"):
        parse_manifest(manifest_bytes(over))
    assert [s.files for s in registry.compiled_sets("f")] == [compiled["f"][0].files]
