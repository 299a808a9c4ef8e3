"""Retention (issue 26 §4): policies per name prefix, the plan and its reasons, soft deletion
hidden from every read, restore within the period and refused after it, gc purging expired
versions and freeing their blobs; through the CLI, a registry server (prefix-limited admin
tokens) and the audit queue's periodic task (real worker processes on PostgreSQL).

Every registry test runs on SQLite and PostgreSQL (``db_url`` / ``registry`` fixtures); the
findings the plan reads are written as stored audits would write them (no audit runs here).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import jax
import jax.export
import jax.numpy as jnp
import numpy as np
import pytest
import sqlalchemy as sa
from _server import admin_token, serving

import jaxport
from jaxport.registry._models import AliasGateRow, AuditRow, NameRow, VariantRow

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
FUNS = (jnp.sin, jnp.cos, jnp.tanh, jnp.exp, jnp.negative, jnp.abs, jnp.square)


def _exp(fun=jnp.sin):
    return jax.export.export(jax.jit(fun))(jax.ShapeDtypeStruct((4,), jnp.float32))


def _push(reg, name, count, start=0):
    return [reg.push(_exp(FUNS[start + i]), name).version for i in range(count)]


def _finding(reg, name, version, status="ok", level="full", release=None):
    """A stored finding of ``name:version``'s variant on cpu (as ``audit`` records one)."""
    digest = reg.get(f"{name}:{version}").digests[0]
    release = release or jax.__version__
    with reg._backend.engine.begin() as conn:
        conn.execute(
            sa.insert(AuditRow),
            {"digest": digest, "jax_version": release, "jaxlib_version": release,
             "platform": "cpu", "status": status, "reason": "", "details_json": "{}",
             "seconds": 0.1, "created_at": time.time(), "level": level, "devices": 1},
        )  # fmt: skip


def _decisions(plan):
    return (
        {d.version: d.rules for d in plan.deleted},
        {d.version: d.rules for d in plan.kept},
    )


def _versions(reg, name):
    return [r.version for r in reg.list(name)]


# -- policies ----------------------------------------------------------------------------------


def test_policies_set_list_replace_and_remove(registry):
    stored = registry.set_retention_policy("team-a.", keep_last=3, keep_younger_than=86400.0)
    assert stored.prefix == "team-a." and stored.keep_last == 3 and stored.created_at > 0
    assert stored.restore_period == 14 * 86400.0 and stored.keep_ok_per_target
    registry.set_retention_policy("vision", restore_period=60.0, keep_ok_per_target=False)
    registry.set_retention_policy("team-a.", keep_last=5)  # replaces
    listed = registry.retention_policies()
    assert [(p.prefix, p.keep_last, p.keep_younger_than) for p in listed] == [
        ("team-a.", 5, None),
        ("vision", None, None),
    ]
    assert registry.remove_retention_policy("vision").restore_period == 60.0
    with pytest.raises(jaxport.NotFoundError, match="team-a"):
        registry.remove_retention_policy("vision")
    for bad in [
        {"prefix": "a/b"}, {"prefix": ""}, {"prefix": "a", "keep_last": 0},
        {"prefix": "a", "keep_younger_than": -1.0}, {"prefix": "a", "restore_period": float("nan")},
        {"prefix": "a", "keep_ok_per_target": "yes"},
    ]:  # fmt: skip
        with pytest.raises(jaxport.InvalidNameError):
            registry.set_retention_policy(**bad)
    kinds = [(e.kind, e.detail.get("action")) for e in registry.events(limit=10)]
    assert kinds[:4] == [("retention-policy", "remove"), ("retention-policy", "set"),
                         ("retention-policy", "set"), ("retention-policy", "set")]  # fmt: skip


# -- the plan ----------------------------------------------------------------------------------


def test_dry_run_lists_what_goes_and_why_and_what_keeps_the_rest(registry):
    assert _push(registry, "mlp", 6) == [1, 2, 3, 4, 5, 6]
    _push(registry, "other", 2)  # no policy covers it: never touched
    registry.alias("mlp", "prod", 2)
    with registry._backend.engine.begin() as conn:  # a protected alias (``registry/_gates``)
        model_id = conn.execute(sa.select(NameRow.id).where(NameRow.name == "mlp")).scalar()
        conn.execute(
            sa.insert(AliasGateRow),
            {"model_id": model_id, "alias": "prod", "require_audit": "ok", "jax_releases": "",
             "platforms": "", "require_goldens": False, "created_at": 0.0, "created_by": "t"},
        )  # fmt: skip
    _finding(registry, "mlp", 1)  # ok, but 3 is newer
    _finding(registry, "mlp", 3)  # the newest ok for cpu x1 under this jax
    _finding(registry, "mlp", 5)
    _finding(registry, "mlp", 5, status="failed")  # the newest finding speaks
    _finding(registry, "mlp", 4, level="static")  # a static verdict is never ok
    registry.set_retention_policy("m", keep_last=100)  # a shorter prefix: not mlp's
    registry.set_retention_policy("mlp", keep_last=1)

    plan = registry.retain(dry_run=True)
    deleted, kept = _decisions(plan)
    why = ("not among the last 1", "no alias", "newest ok for no supported target")
    assert deleted == {1: why, 4: why, 5: why}
    assert kept == {
        2: ("protected alias @prod",),
        3: (f"newest ok: cpu x1 jax {jax.__version__}",),
        6: ("last 1",),
    }
    assert plan.dry_run and {d.policy for d in plan.deleted + plan.kept} == {"mlp"}
    assert all(d.restorable_until > plan.at + 14 * 86400 - 1 for d in plan.deleted)
    assert _versions(registry, "mlp") == [1, 2, 3, 4, 5, 6]  # nothing deleted
    assert registry.retain("other", dry_run=True).deleted == ()
    assert not [e for e in registry.events(limit=50) if e.kind == "retain"]

    registry.set_retention_policy("mlp", keep_last=1, keep_younger_than=3600.0)
    plan = registry.retain("mlp", dry_run=True)
    assert plan.deleted == () and plan.kept[0].rules[-1] == "younger than 1h"
    with pytest.raises(jaxport.InvalidNameError):
        registry.retain("bad/prefix", dry_run=True)


def test_an_ok_finding_counts_only_inside_the_variants_jax_window(registry):
    _push(registry, "win", 2)
    _finding(registry, "win", 1)
    registry.set_retention_policy("win", keep_last=1)
    assert _decisions(registry.retain(dry_run=True))[0] == {}
    with registry._backend.engine.begin() as conn:  # as if jax 0.4.30 had made it
        conn.execute(
            sa.update(VariantRow)
            .where(VariantRow.digest == registry.get("win:1").digests[0])
            .values(jax_version="0.4.30")
        )
    # jax 0.4.30's window ended 2024-12-18, before this jax was published
    assert list(_decisions(registry.retain(dry_run=True))[0]) == [1]


def test_each_target_platform_device_count_and_release_keeps_its_own_newest_ok(registry):
    """The newest ``ok`` is per (platform, device count, jax release): an older version stays
    while it is the newest ok for a target no newer version is ok for."""
    assert _push(registry, "tgt", 6) == [1, 2, 3, 4, 5, 6]
    now, older = jax.__version__, "0.10.0"
    digests = {v: registry.get(f"tgt:{v}").digests[0] for v in range(1, 7)}
    with registry._backend.engine.begin() as conn:  # as if version 3 were a 2-device export
        conn.execute(
            sa.update(VariantRow).where(VariantRow.digest == digests[3]).values(nr_devices=2)
        )
        for version, platform, release in [(1, "cpu", now), (2, "cpu", older), (3, "cpu", now),
                                           (4, "tpu", now), (5, "cpu", now)]:  # fmt: skip
            conn.execute(
                sa.insert(AuditRow),
                {"digest": digests[version], "jax_version": release, "jaxlib_version": release,
                 "platform": platform, "status": "ok", "reason": "", "details_json": "{}",
                 "seconds": 0.1, "created_at": time.time(), "level": "full", "devices": 1},
            )  # fmt: skip
    registry.set_retention_policy("tgt", keep_last=1)
    deleted, kept = _decisions(registry.retain(dry_run=True))
    assert list(deleted) == [1]  # cpu x1 under this jax: 5 is newer
    assert kept == {
        2: (f"newest ok: cpu x1 jax {older}",),  # another release
        3: (f"newest ok: cpu x2 jax {now}",),  # another device count
        4: (f"newest ok: tpu x1 jax {now}",),  # another platform
        5: (f"newest ok: cpu x1 jax {now}",),
        6: ("last 1",),
    }
    assert [d.version for d in registry.retain().deleted] == [1]
    assert _versions(registry, "tgt") == [2, 3, 4, 5, 6]


# -- soft deletion, restore, gc --------------------------------------------------------------


def test_a_run_hides_what_it_deletes_from_every_read_and_restore_brings_it_back(registry):
    _push(registry, "f", 3)
    _push(registry, "g", 1, start=3)
    old_digest = registry.get("f:1").digests[0]
    registry.set_retention_policy("f", keep_last=1)
    registry.set_retention_policy("g", keep_ok_per_target=False)  # keeps nothing
    plan = registry.retain()
    assert not plan.dry_run
    assert [(d.name, d.version) for d in plan.deleted] == [("f", 1), ("f", 2), ("g", 1)]
    assert all(abs(d.restorable_until - plan.at - 14 * 86400) < 5 for d in plan.deleted)

    assert _versions(registry, "f") == [3] and registry.names() == ["f"]
    for reference in ["f:1", "g", "g:1", f"sha256:{old_digest[:12]}"]:
        with pytest.raises(jaxport.NotFoundError):
            registry.get(reference)
        with pytest.raises(jaxport.NotFoundError):
            registry.resolve(reference)
        with pytest.raises(jaxport.NotFoundError):
            registry.pull(reference)
    assert [v.version for v in registry.search(name="f")] == [3]
    assert registry.search(fun_name="sin") == []
    assert registry.resolve("f").chosen.version == 3
    with pytest.raises(jaxport.NotFoundError):
        registry.alias("f", "prod", 1)  # no alias moves to a deleted version
    retained = [e for e in registry.events(limit=20) if e.kind == "retain"]
    assert {(e.name, e.version) for e in retained} == {("f", 1), ("f", 2), ("g", 1)}
    assert retained[0].detail["policy"] in ("f", "g") and retained[0].detail["rules"]
    assert registry.retain().deleted == ()  # nothing more to do

    report = registry.gc(min_age=0)  # within the restore period: nothing purged
    assert report.purged == () and old_digest not in report.digests
    assert registry.push(_exp(FUNS[0]), "f").version == 4  # same content: a new number

    back = registry.restore("f", 1)
    assert (back.name, back.version, back.digests[0]) == ("f", 1, old_digest)
    assert _versions(registry, "f") == [1, 3, 4]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(registry.pull("f:1").call(x), np.sin(x), rtol=1e-6)
    assert registry.restore("g", 1).version == 1 and registry.names() == ["f", "g"]
    with pytest.raises(jaxport.ConflictError, match="not deleted"):
        registry.restore("f", 1)
    with pytest.raises(jaxport.NotFoundError):
        registry.restore("f", 9)
    with pytest.raises(jaxport.NotFoundError):
        registry.restore("nope", 1)
    assert registry.events(limit=1)[0].kind == "restore"


def test_restore_after_the_period_is_refused_and_gc_purges_and_frees_blobs(registry):
    _push(registry, "h", 3)
    _push(registry, "k", 1, start=1)  # k:1 holds the archive of h:2
    gone, shared = registry.get("h:1").digests[0], registry.get("h:2").digests[0]
    registry.set_retention_policy("h", keep_last=1, restore_period=0.0)
    assert [d.version for d in registry.retain().deleted] == [1, 2]
    with pytest.raises(jaxport.ConflictError, match="restore period ended"):
        registry.restore("h", 1)

    dry = registry.gc(dry_run=True, min_age=0)
    assert dry.purged == ("h:1", "h:2") and dry.digests == (gone,)
    assert registry.blobs.exists(gone)  # a dry run removes nothing
    report = registry.gc(min_age=0)
    assert report.purged == ("h:1", "h:2") and report.digests == (gone,)
    assert not registry.blobs.exists(gone)
    assert registry.blobs.exists(shared) and registry.pull("k:1") is not None
    purges = [e for e in registry.events(limit=10) if e.kind == "purge"]
    assert sorted((e.name, e.version) for e in purges) == [("h", 1), ("h", 2)]
    with pytest.raises(jaxport.NotFoundError):
        registry.restore("h", 1)
    assert registry.gc(min_age=0).purged == ()
    assert registry.push(_exp(FUNS[0]), "h").version == 4  # numbers are never reused
    assert registry.verify().missing == ()


# -- the CLI -----------------------------------------------------------------------------------


def _run(env, *args, code=0):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_cli_retain_policies_dry_run_run_and_restore(db_url, tmp_path):
    blobs = tmp_path / "blobs"
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        _push(reg, "cli.m", 3)
    env = {**os.environ, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": str(blobs),
           "COLUMNS": "200"}  # fmt: skip
    env.pop("JAXPORT_TOKEN", None)
    set_ = _run(env, "retain", "policy", "set", "cli.", "--keep-last", "2", "--keep-younger",
                "0", "--restore-period", "1d", "--json")  # fmt: skip
    policy = json.loads(set_.stdout)
    assert (policy["keep_last"], policy["restore_period"]) == (2, 86400.0)
    assert "keep last 2" in _run(env, "retain", "policy", "ls").stdout
    assert json.loads(_run(env, "retain", "policy", "ls", "--json").stdout)[0]["prefix"] == "cli."

    dry = json.loads(_run(env, "retain", "--dry-run", "--json").stdout)
    assert [(d["name"], d["version"]) for d in dry["deleted"]] == [("cli.m", 1)]
    assert [d["rules"] for d in dry["kept"]] == [["last 2"], ["last 2"]]
    text = _run(env, "retain", "--prefix", "cli.", "--dry-run").stdout
    assert "would delete 1 version(s)" in text and "cli.m:1" in text and "-v lists" in text
    assert "cli.m:3  (cli.) last 2" in _run(env, "retain", "--dry-run", "-v").stdout

    done = json.loads(_run(env, "retain", "--json").stdout)
    until = datetime.datetime.fromisoformat(done["deleted"][0]["restorable_until"])
    assert not done["dry_run"] and until.timestamp() > time.time()  # ISO 8601, as every time
    assert "cli.m:1" not in _run(env, "ls", "cli.m").stdout
    assert json.loads(_run(env, "restore", "cli.m:1", "--json").stdout)["version"] == 1
    assert _run(env, "restore", "cli.m:1", code=1).stderr.startswith("ConflictError: ")
    assert _run(env, "retain", "policy", "rm", "cli.").stdout.strip()
    err = _run(env, "retain", "policy", "rm", "cli.", "--json", code=1).stderr
    assert json.loads(err)["error"]["type"] == "NotFoundError"
    assert "duration" in _run(env, "retain", "policy", "set", "x", "--keep-younger", "soon",
                              code=2).stderr  # fmt: skip
    _run(env, "restore", "cli.m", code=2)  # not NAME:VERSION


# -- through a registry server ---------------------------------------------------------------


def test_through_a_server_admin_only_and_within_the_tokens_prefixes(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    with jaxport.Registry(db_url, blobs=blobs, upgrade=True) as local:
        _push(local, "team-a.m", 2)
        _push(local, "team-b.m", 2, start=2)
    admin = admin_token(db_url, blobs)
    team = admin_token(db_url, blobs, "team-admin", prefixes=["team-a"])
    writer = admin_token(db_url, blobs, "writer", scope="write")
    with serving(db_url, blobs, tmp_path / "server.log") as server:
        root = jaxport.Registry(server.url, token=admin)
        ours = jaxport.Registry(server.url, token=team)
        other = jaxport.Registry(server.url, token=writer)
        root.set_retention_policy("team-a", keep_last=1)
        root.set_retention_policy("team-b", keep_last=1, restore_period=3600.0)
        assert [p.prefix for p in root.retention_policies()] == ["team-a", "team-b"]
        assert [p.prefix for p in ours.retention_policies()] == ["team-a"]
        refused = [
            lambda: ours.set_retention_policy("team-b", keep_last=5),
            lambda: ours.set_retention_policy("team", keep_last=5),
            lambda: ours.remove_retention_policy("team-b"),
            lambda: ours.retain(),
            lambda: ours.retain("team-b", dry_run=True),
            lambda: ours.restore("team-b.m", 1),
            lambda: other.retain(dry_run=True),
            lambda: other.retention_policies(),
        ]
        for call in refused:
            with pytest.raises(jaxport.PermissionDeniedError):
                call()
        plan = ours.retain("team-a", dry_run=True)
        assert [(d.name, d.version) for d in plan.deleted] == [("team-a.m", 1)]
        assert [(d.name, d.version) for d in ours.retain("team-a").deleted] == [("team-a.m", 1)]
        assert _versions(root, "team-a.m") == [2] and _versions(root, "team-b.m") == [1, 2]
        with pytest.raises(jaxport.NotFoundError):
            root.get("team-a.m:1")
        with pytest.raises(jaxport.NotFoundError):
            root.pull("team-a.m:1")
        assert [v.version for v in root.search(name="team-a.m")] == [2]
        assert ours.restore("team-a.m", 1).version == 1
        deleted = root.retain()
        assert [(d.name, d.version) for d in deleted.deleted] == [
            ("team-a.m", 1), ("team-b.m", 1),
        ]  # fmt: skip
        retained = [e for e in root.events(limit=20) if e.kind in ("retain", "restore")]
        assert {e.actor for e in retained} == {"admin", "team-admin"}
        page = root._backend._http._client.get(f"{server.url}/api/v1/versions",
                                               params={"name": "team-b.m"})  # fmt: skip
        assert [r["version"] for r in page.json()] == [2]
        bearer = {"Authorization": f"Bearer {admin}"}
        assert httpx.get(f"{server.url}/names/team-b.m/1", headers=bearer).status_code == 404
        assert httpx.get(f"{server.url}/names/team-b.m/2", headers=bearer).status_code == 200
        for reg in (root, ours, other):
            reg.close()


# -- the audit queue's periodic task ---------------------------------------------------------


def test_audit_workers_run_retention_periodically(tmp_path):
    """A real ``jaxport audit-worker`` on PostgreSQL with retention every second."""
    base = os.environ.get("JAXPORT_TEST_POSTGRES_URL")
    if not base:
        pytest.skip("JAXPORT_TEST_POSTGRES_URL is not set: the audit queue needs PostgreSQL")
    schema = f"r_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    env = {**os.environ, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": str(tmp_path / "blobs"),
           "JAXPORT_RETAIN_CRON": "* * * * * *"}  # fmt: skip
    try:
        _run(env, "db", "upgrade")
        with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
            _push(reg, "q.m", 3)
            reg.set_retention_policy("q.", keep_last=1)
        log = tmp_path / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [JAXPORT, "audit-worker", "--platform", "cpu"], env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            with jaxport.Registry(url, blobs=tmp_path / "blobs") as reg:
                for _ in range(120):  # bounded: 60 s
                    if [e for e in reg.events(limit=20) if e.kind == "retain"]:
                        break
                    assert worker.poll() is None, log.read_text()[-2000:]
                    time.sleep(0.5)
                assert _versions(reg, "q.m") == [3]
                retained = [e for e in reg.events(limit=20) if e.kind == "retain"]
                assert {(e.name, e.version) for e in retained} == {("q.m", 1), ("q.m", 2)}
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
