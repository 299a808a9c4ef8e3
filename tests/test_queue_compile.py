"""Audit workers that make compiled sets (issue 27 §2; ``registry/_queue_compile.py``): a worker
given a signing key (``jaxport audit-worker --compile-key``, ``$JAXPORT_COMPILE_KEY``,
``run_audit_worker(compile_key=...)``) compiles each variant it audited ``ok`` here and stores
the signed sets, which a fresh process's ``pull(use_compiled=...)`` loads as jax cache hits;
a worker without a key, a failing or ``not-run`` audit, a job in another jax release's
environment and a compile that fails store nothing (the last two logged, the job and its
finding standing); a key that cannot be read stops the worker before it takes a job.

PostgreSQL (``JAXPORT_TEST_POSTGRES_URL``, else they skip), each test in a schema of its own
(``test_queue.pg_registry``). The tests that start ``jaxport audit-worker`` processes are slow;
the others run the worker in this process with the audit replaced (no audit process).
"""

from __future__ import annotations

import logging
import subprocess
import textwrap
import time

import jax
import jax.numpy as jnp
import jaxlib.version
import numpy as np
import pytest
import test_queue
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from test_compiled import fresh_process_json
from test_queue import JAXPORT, _export, _finish, _rows, _run

import jaxport
from jaxport import SignatureError, UnsupportedFeatureError
from jaxport._signing import load_trusted
from jaxport.audit import Finding
from jaxport.registry import _compiled_make, _queue
from jaxport.registry._db import create_registry_engine
from jaxport.registry._queue_compile import refusal

pg_registry = test_queue.pg_registry
#: The encrypted key's password: it must appear in no output, log or job argument.
_SECRET = "correct-horse-battery-staple"


def _keys(where, password=None):
    """``(private.pem, public.pem)``: a P-256 key, encrypted with ``password`` if given."""
    key = ec.generate_private_key(ec.SECP256R1())
    encryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password.encode())
    )
    private, public = where / "compile.pem", where / "compile.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def _push_fleet(url, tmp_path):
    """``tanh`` (CPU, audits ok), ``sin`` (a CPU variant ok, a TPU one not-run here) and ``g``
    (golden examples another producer's numerics made: mismatch)."""
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    wrong = jaxport.Example((x,), {}, np.cos(x) + np.float32(0.01))
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        reg.push(_export(jnp.tanh, "cpu"), "tanh")
        reg.push([_export(jnp.sin, "cpu"), _export(jnp.sin, "tpu")], "sin")
        reg.push(_export(jnp.cos, "cpu"), "g", examples=[wrong])
        return {n: reg.get(n).variants for n in ("tanh", "sin", "g")}


def _worker(env, *platforms, extra=()):
    """A bounded ``jaxport audit-worker --json`` process (``test_queue``'s, with ``extra``)."""
    argv = [JAXPORT, "audit-worker", "--until-idle", "--stalled-after", "2", "--json", *extra]
    argv += [a for p in platforms for a in ("--platform", p)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _sets(url, tmp_path, name):
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        return reg.compiled_sets(name)


@pytest.mark.slow
def test_a_worker_with_a_key_stores_signed_sets_of_passing_audits_only(pg_registry, tmp_path):
    """Without a key nothing is compiled; with one (``$JAXPORT_COMPILE_KEY``, an encrypted key
    whose password comes from ``--compile-key-password-env``) the passing audits' variants
    are, once; a fresh process's pull then loads them from jax's cache."""
    url, env = pg_registry
    env = {k: v for k, v in env.items() if k != "JAXPORT_COMPILE_KEY"}
    variants = _push_fleet(url, tmp_path)
    private, public = _keys(tmp_path, _SECRET)
    _run(env, "audit", "enqueue")
    found = _finish(_worker(env, "cpu", "tpu"))
    assert sorted((f["finding"]["name"], f["finding"]["status"]) for f in found) == [
        ("g", "mismatch"), ("sin", "not-run"), ("sin", "ok"), ("tanh", "ok"),
    ]  # fmt: skip
    assert all(_sets(url, tmp_path, n) == [] for n in variants)  # no key: nothing compiled

    # A wrong key stops the worker before it takes a job.
    bad = _run(env, "audit-worker", "--platform", "cpu", "--compile-key", str(tmp_path / "no.pem"),
               code=1)  # fmt: skip
    assert "SignatureError: cannot read the compile key" in bad.stderr

    keyed = {**env, "JAXPORT_COMPILE_KEY": str(private), "KEY_PASSWORD": _SECRET}
    _run(keyed, "audit", "enqueue")
    proc = _worker(keyed, "cpu", "tpu", extra=("--compile-key-password-env", "KEY_PASSWORD"))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (out, err)
    said = out.decode() + err.decode()
    signer = load_trusted(public).fingerprint
    (tanh,) = _sets(url, tmp_path, "tanh")
    assert (tanh.digest, tanh.method, tanh.platform) == (variants["tanh"][0].digest, "", "cpu")
    assert tanh.signer == signer and tanh.files
    (sin,) = _sets(url, tmp_path, "sin")  # the CPU variant's only: the TPU one is not-run
    assert sin.digest == next(v.digest for v in variants["sin"] if v.platforms == ("cpu",))
    assert _sets(url, tmp_path, "g") == []  # mismatch: never compiled
    assert "stored (1 file(s)" in said and "not compiled: the audit found mismatch" in said
    args = "".join(a for (a,) in _rows(url, "SELECT args::text FROM procrastinate_jobs"))
    assert _SECRET not in said + args and str(private) not in args

    # Audited again (a new job for tanh): the stored set is kept, nothing new.
    _run(keyed, "audit", "enqueue", "tanh")
    again = _worker(keyed, "cpu", extra=("--compile-key-password-env", "KEY_PASSWORD"))
    assert "already stored" in again.communicate(timeout=600)[1].decode()
    assert _sets(url, tmp_path, "tanh") == [tanh]

    # A fresh process that trusts the key loads tanh's executable instead of compiling it.
    script = textwrap.dedent(f"""
        import json, warnings
        import jax, numpy as np
        import jaxport
        warnings.simplefilter("error")
        reg = jaxport.Registry({url!r}, blobs={str(tmp_path / "blobs")!r})
        exp = reg.pull("tanh", use_compiled=jaxport.CompiledPolicy([{str(public)!r}]))
        use = reg.last_compiled_use
        jax.jit(exp.call)(np.ones(8, np.float32))
        print(json.dumps({{"used": use.used, "hits": use.cache_hits}}))
    """)
    assert fresh_process_json(script, tmp_path, env) == {"used": True, "hits": 1}


def _one_job(url, tmp_path, monkeypatch, *, jax_release, platform, compile_error):
    """Runs one queued job for ``tanh``'s ``platform`` variant in this process, its audit
    replaced by an ``ok`` finding of ``jax_release`` (None: this jax's); ``compile_error``:
    what the compile raises (None: the real compile child runs)."""
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        digest = reg.push(_export(jnp.tanh, platform), "tanh").variants[0].digest
    job = _queue.QueuedJob("tanh", 1, digest, platform, 1, None, jax=jax_release)
    engine = create_registry_engine(url)
    try:
        _queue.enqueue_jobs(engine, [job], 120.0)
    finally:
        engine.dispose()
    release = jax_release or jax.__version__
    jaxlib_release = jaxlib.version.__version__ if jax_release is None else jax_release

    def audit(*_args, **_kwargs):
        return [Finding("tanh", 1, digest, release, jaxlib_release, platform, "ok", "", {}, 0.1,
                        time.time())]  # fmt: skip

    def compile_archive(*_args, **_kwargs):
        raise compile_error

    if compile_error is not None:
        monkeypatch.setattr(_compiled_make, "compile_archive", compile_archive)
    private, _ = _keys(tmp_path)
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        monkeypatch.setattr(reg, "audit", audit)
        reg.run_audit_worker([platform], until_idle=True, stalled_after=2, compile_key=private)


@pytest.mark.parametrize(
    ("jax_release", "platform", "level", "said"),
    [
        ("0.4.99", "cpu", logging.INFO, "not compiled: the job ran in jax 0.4.99's environment"),
        (None, "cpu", logging.WARNING, "compiling failed, nothing stored: "
                                       "UnsupportedFeatureError: the child crashed"),
        (None, "tpu", logging.INFO, "(function) skipped: this host compiles for cpu, not tpu"),
    ],
    ids=["another jax release", "compile fails", "another platform than the child's"],
)  # fmt: skip
def test_a_job_that_must_not_or_cannot_compile_stores_nothing_and_stands(
    pg_registry, tmp_path, monkeypatch, caplog, jax_release, platform, level, said
):
    """A job in another release's environment never compiles; a compile that fails, or
    whose child compiles for another platform (a TPU job's ok finding on a CPU host), stores
    nothing; the job succeeds once and its finding stands."""
    url, _ = pg_registry
    caplog.set_level(logging.INFO, logger="jaxport.audit_worker")
    error = None
    if jax_release is not None:  # never compiled: a compile would fail the test's log check
        error = AssertionError("compiled a job of another jax release")
    elif platform == "cpu":
        error = UnsupportedFeatureError("the child crashed")
    _one_job(url, tmp_path, monkeypatch, jax_release=jax_release, platform=platform,
             compile_error=error)  # fmt: skip
    assert _rows(url, "SELECT status, attempts FROM procrastinate_jobs") == [("succeeded", 1)]
    assert _rows(url, "SELECT status FROM audits") == [("ok",)]  # the finding stands
    assert _sets(url, tmp_path, "tanh") == []
    records = [(r.levelno, r.getMessage()) for r in caplog.records
               if r.name == "jaxport.audit_worker"]  # fmt: skip
    assert len(records) == 1 and records[0][0] == level and said in records[0][1], records


def test_a_key_that_cannot_be_read_stops_the_worker_before_any_job(
    pg_registry, tmp_path, monkeypatch
):
    url, _ = pg_registry
    private, _ = _keys(tmp_path, _SECRET)
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        reg.push(_export(jnp.tanh, "cpu"), "tanh")
        reg.enqueue_audits("tanh")
        with pytest.raises(SignatureError, match="cannot read the compile key") as missing:
            reg.run_audit_worker(["cpu"], until_idle=True, compile_key=tmp_path / "no.pem")
        assert str(tmp_path / "no.pem") in str(missing.value)
        with pytest.raises(SignatureError, match="cannot sign with") as wrong:
            reg.run_audit_worker(["cpu"], until_idle=True, compile_key=private,
                                 compile_key_password="not-it")  # fmt: skip
        assert "not-it" not in str(wrong.value)
        monkeypatch.setenv("JAXPORT_COMPILE_KEY", str(tmp_path / "no.pem"))
        with pytest.raises(SignatureError, match="cannot read the compile key"):
            reg.run_audit_worker(["cpu"], until_idle=True)
    assert _rows(url, "SELECT status FROM procrastinate_jobs") == [("todo",)]  # none taken


def _finding(status="ok", level="full", jax_version=None, jaxlib_version=None):
    return Finding(
        "m", 1, "0" * 64, jax_version or jax.__version__,
        jaxlib_version or jaxlib.version.__version__, "cpu", status, "", {}, 0.1, 0.0,
        level=level,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("finding", "release", "reason"),
    [
        (_finding(), None, None),
        (_finding(), jax.__version__, None),
        (_finding("not-run"), None, "found not-run (full)"),
        (_finding("mismatch"), None, "found mismatch (full)"),
        (_finding("compile-error"), None, "found compile-error (full)"),
        (_finding("unknown", level="static"), None, "found unknown (static)"),
        (_finding(level="static"), None, "found ok (static)"),
        (_finding(), "0.4.30", "the job ran in jax 0.4.30's environment"),
        (_finding(jaxlib_version="0.4.30"), None, "jaxlib 0.4.30"),
    ],
)
def test_only_a_passing_full_audit_by_this_jax_compiles(finding, release, reason):
    said = refusal(finding, release)
    assert said is None if reason is None else reason in said
