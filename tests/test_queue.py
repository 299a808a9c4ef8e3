"""The audit queue (``registry/_queue.py``): ``jaxport audit enqueue`` / ``push --audit`` put
jobs in the registry's PostgreSQL database, ``jaxport audit-worker --platform P`` processes
(subprocesses, standing for the hosts of each platform) take them.

The PostgreSQL tests need ``JAXPORT_TEST_POSTGRES_URL`` (else they skip) and run in a schema of
their own (``search_path``), which ``jaxport db upgrade`` fills with the registry's and
procrastinate's tables. Workers run ``--until-idle`` (a bounded loop) with ``--stalled-after 2``
so that a killed worker's job is back in the queue two seconds after its last heartbeat.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import sqlalchemy as sa

import jaxport
from jaxport.registry._queue_schema import _migrations_after

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
POSTGRES_URL_ENV = "JAXPORT_TEST_POSTGRES_URL"
_SPEC = jax.ShapeDtypeStruct((8,), jnp.float32)


def _export(fn, platform):
    return jax.export.export(jax.jit(fn), platforms=(platform,))(_SPEC)


@pytest.fixture
def pg_registry(tmp_path):
    """``(url, env)``: a PostgreSQL registry in a fresh schema, upgraded by ``jaxport db
    upgrade`` (queue installed), and the environment that names it to ``jaxport``."""
    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set: the audit queue needs PostgreSQL")
    base = os.environ[POSTGRES_URL_ENV]
    schema = f"q_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    env = {
        **os.environ,
        "JAXPORT_REGISTRY": url,
        "JAXPORT_BLOBS": str(tmp_path / "blobs"),
        "COLUMNS": "80",
    }
    try:
        _run(env, "db", "upgrade")
        yield url, env
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def _run(env, *args, code=0):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def _worker(env, *platforms, json_out=True):
    argv = [JAXPORT, "audit-worker", "--until-idle", "--stalled-after", "2"]
    argv += [a for p in platforms for a in ("--platform", p)]
    argv += ["--json"] if json_out else []
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


def _finish(proc):
    out, err = proc.communicate(timeout=600)
    out, err = out.decode(), err.decode()
    assert "Traceback" not in out + err, (out, err)
    assert proc.returncode == 0, (proc.returncode, out, err)
    return json.loads(out)


def _rows(url, query):
    """The rows of a query (committed: it may be an UPDATE ... RETURNING)."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(query))
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _push_fleet(url, tmp_path):
    """Three names: cos and sin with a CPU and a TPU variant each, tanh for CPU only."""
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        reg.push([_export(jnp.cos, "cpu"), _export(jnp.cos, "tpu")], "cos")
        reg.push([_export(jnp.sin, "cpu"), _export(jnp.sin, "tpu")], "sin")
        reg.push(_export(jnp.tanh, "cpu"), "tanh")


@pytest.mark.slow
def test_killed_worker_jobs_complete_once_and_tpu_takes_only_tpu(pg_registry, tmp_path):
    url, env = pg_registry
    _push_fleet(url, tmp_path)
    queued = json.loads(_run(env, "audit", "enqueue", "--json").stdout)
    assert sorted((j["name"], j["platform"]) for j in queued) == [
        ("cos", "cpu"), ("cos", "tpu"), ("sin", "cpu"), ("sin", "tpu"), ("tanh", "cpu"),
    ]  # fmt: skip
    again = json.loads(_run(env, "audit", "enqueue", "--json").stdout)
    assert all(j["job_id"] is None for j in again)  # waiting already: nothing added

    doomed = _worker(env, "cpu", json_out=False)  # a CPU host that dies mid-job
    deadline = time.monotonic() + 300
    while not _rows(url, "SELECT id FROM procrastinate_jobs WHERE status = 'doing'"):
        assert doomed.poll() is None and time.monotonic() < deadline, doomed.communicate()
        time.sleep(0.1)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.communicate()
    killed = _rows(url, "SELECT id, queue_name FROM procrastinate_jobs WHERE status = 'doing'")
    assert len(killed) == 1 and killed[0][1] == "audit-cpu"

    cpu, tpu = _worker(env, "cpu"), _worker(env, "tpu")
    cpu_found, tpu_found = _finish(cpu), _finish(tpu)

    assert {f["finding"]["platform"] for f in tpu_found} == {"tpu"}
    assert sorted(f["finding"]["name"] for f in tpu_found) == ["cos", "sin"]
    assert all(f["finding"]["status"] == "not-run" for f in tpu_found)  # no TPU here
    assert {f["finding"]["platform"] for f in cpu_found} == {"cpu"}
    assert all(f["finding"]["status"] == "ok" for f in cpu_found)
    jobs = _rows(url, "SELECT id, status, queue_name FROM procrastinate_jobs")
    assert len(jobs) == 5 and {s for _, s, _ in jobs} == {"succeeded"}, jobs
    retried = _rows(url, f"SELECT attempts FROM procrastinate_jobs WHERE id = {killed[0][0]}")
    assert retried[0][0] >= 1  # put back once its worker was silent
    per_key = _rows(url, "SELECT digest, platform, count(*) FROM audits GROUP BY 1, 2")
    assert len(per_key) == 5 and {n for _, _, n in per_key} == {1}, per_key
    assert _rows(url, "SELECT count(*) FROM queued_audits") == [(5,)]
    assert {job for (job,) in _rows(url, "SELECT job_id FROM queued_audits")} == {
        job_id for job_id, _, _ in jobs
    }

    # A job run again after its finding was written (its worker killed between the two
    # commits): the finding is not recorded twice.
    _rows(url, f"UPDATE procrastinate_jobs SET status = 'todo' WHERE id = {killed[0][0]}")
    rerun = _finish(_worker(env, "cpu"))
    assert [f["recorded"] for f in rerun] == [False]
    assert _rows(url, "SELECT count(*) FROM audits") == [(5,)]
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        stored = reg.audit_results()
    assert sorted((f.name, f.platform, f.status) for f in stored) == [
        ("cos", "cpu", "ok"), ("cos", "tpu", "not-run"), ("sin", "cpu", "ok"),
        ("sin", "tpu", "not-run"), ("tanh", "cpu", "ok"),
    ]  # fmt: skip


@pytest.mark.slow
def test_push_audit_and_db_upgrade_again(pg_registry, tmp_path):
    url, env = pg_registry
    jaxport.save(_export(jnp.cos, "cpu"), tmp_path / "cos.jaxport")
    pushed = _run(env, "push", str(tmp_path / "cos.jaxport"), "--name", "cos", "--audit")
    assert "queued 1 audit job(s): cpu 1" in pushed.stdout
    assert _run(env, "db", "upgrade").returncode == 0  # the queue is there: left as it is
    assert _rows(url, "SELECT queue_name, status FROM procrastinate_jobs") == [
        ("audit-cpu", "todo")
    ]
    found = _finish(_worker(env, "cpu"))
    assert [(f["finding"]["name"], f["recorded"]) for f in found] == [("cos", True)]


def test_record_once_replaces_only_not_run(pg_registry, tmp_path):
    from jaxport.audit import Finding
    from jaxport.registry._db import create_registry_engine
    from jaxport.registry._queue_jobs import record_once

    url, _ = pg_registry
    _push_fleet(url, tmp_path)
    with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
        digest = reg.get("cos:1").variants[1].digest

    def finding(status):
        return Finding("cos", 1, digest, "0.10.2", "0.10.2", "tpu", status, "", {}, 0.1, 1.0)

    engine = create_registry_engine(url)
    try:
        assert record_once(engine, finding("not-run"), 1, None) is True
        assert record_once(engine, finding("not-run"), 1, None) is False
        assert record_once(engine, finding("ok"), 1, None) is True  # measured replaces not-run
        assert record_once(engine, finding("crash"), 1, None) is False
        assert record_once(engine, finding("ok"), 8, None) is True  # another device count
    finally:
        engine.dispose()
    assert sorted(_rows(url, "SELECT status FROM audits")) == [("ok",), ("ok",)]


@pytest.mark.slow
def test_enqueue_on_sqlite_is_a_typed_error(tmp_path):
    env = {**os.environ, "JAXPORT_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
    env.pop("JAXPORT_REGISTRY", None)
    env.pop("JAXPORT_BLOBS", None)
    (tmp_path / "home").mkdir()
    jaxport.Registry(f"sqlite:///{tmp_path / 'home' / 'registry.db'}").close()  # an empty one
    err = _run(env, "audit", "enqueue", code=1).stderr
    assert err.startswith("UnsupportedFeatureError: the audit queue needs a PostgreSQL registry")
    err = _run(env, "audit-worker", "--platform", "tpu", "--until-idle", code=1).stderr
    assert err.startswith("UnsupportedFeatureError: the audit queue needs a PostgreSQL")
    jaxport.save(_export(jnp.cos, "cpu"), tmp_path / "cos.jaxport")
    _run(env, "push", str(tmp_path / "cos.jaxport"), "--audit", code=1)
    assert json.loads(_run(env, "ls", "--json").stdout) == []  # refused before the push
    usage = _run(env, "audit", "--enqueue", "--no-store", code=2).stderr
    assert "--enqueue takes REFERENCE, --platform and --timeout only" in usage


def test_unknown_queue_platform_is_refused():
    from jaxport.registry._queue import queue_of

    assert queue_of("TPU") == "audit-tpu"
    with pytest.raises(jaxport.InvalidNameError, match="no audit queue for platform 'gpu'"):
        queue_of("gpu")


def test_procrastinate_migrations_after_a_recorded_release(tmp_path):
    names = [
        "02.14.01_01_add_indexes_for_fetch_job.sql",
        "03.00.00_01_pre_cancel_notification.sql",
        "03.00.00_50_post_cancel_notification.sql",
        "03.04.00_01_pre_add_retry_failed_job_procedure.sql",
        "__init__.py",
    ]
    for name in names:
        (tmp_path / name).write_text("")
    chosen = [p.name for p in _migrations_after(tmp_path, "2.15.1", "3.1.0")]
    assert chosen == names[1:3]
    assert _migrations_after(tmp_path, "3.10.0", "3.10.0") == []


def test_batches_fall_back_to_one_by_one_when_a_key_waits(pg_registry, monkeypatch):
    from jaxport.registry import _queue
    from jaxport.registry._db import create_registry_engine

    url, _ = pg_registry
    engine = create_registry_engine(url)
    jobs = [_queue.QueuedJob("m", 1, f"{i:064x}", "tpu", 1, None) for i in range(3)]
    try:
        with _queue._opened(engine) as app:
            first = _queue._defer_all(app, engine, jobs[:1], 120.0)
            monkeypatch.setattr(_queue, "_waiting", lambda *_: set())  # as if enqueued meanwhile
            both = _queue._defer_all(app, engine, jobs, 120.0)
    finally:
        engine.dispose()
    assert first[0].job_id is not None
    assert both[0].job_id is None and None not in (both[1].job_id, both[2].job_id)
    assert _rows(url, "SELECT count(*) FROM procrastinate_jobs") == [(3,)]


def test_stalled_jobs_go_back_until_they_killed_max_attempts_workers(pg_registry):
    import asyncio

    from jaxport.registry import _queue
    from jaxport.registry._db import create_registry_engine

    url, _ = pg_registry
    engine = create_registry_engine(url)
    jobs = [_queue.QueuedJob("m", 1, f"{i:064x}", "tpu", 1, None) for i in range(2)]
    try:
        with _queue._opened(engine) as app:
            ids = [j.job_id for j in _queue._defer_all(app, engine, jobs, 120.0)]
        # Both taken by a worker that is gone (no worker row: as after a prune); one has
        # already killed MAX_ATTEMPTS - 1 workers.
        _rows(url, "UPDATE procrastinate_jobs SET status = 'doing', worker_id = NULL")
        _rows(url, f"UPDATE procrastinate_jobs SET attempts = 4 WHERE id = {ids[1]}")

        async def recover():
            app = _queue._new_app(engine)
            async with app.open_async():
                await _queue._recover_stalled(app, 1.0)

        asyncio.run(recover())
    finally:
        engine.dispose()
    assert _queue.MAX_ATTEMPTS == 5
    assert sorted(_rows(url, "SELECT id, status, attempts FROM procrastinate_jobs")) == [
        (ids[0], "todo", 1),
        (ids[1], "failed", 5),  # five runs, each ended by its worker dying
    ]
