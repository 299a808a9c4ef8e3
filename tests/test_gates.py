"""Protected aliases (issue 26 §1): gates from stored findings, signatures and golden examples,
enforced on every move (``alias``, ``push(aliases=)``, through a server, from the CLI), with
every failed gate listed, and an override for an unprefixed admin only, recorded as an event.

Findings for platforms this machine has no device for (cuda, tpu) and for jax releases not
installed are stored rows of ``audits``, as an audit elsewhere would have recorded them: the
gates read stored findings only. The cpu finding of one test is a real audit's.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid

import httpx
import jax
import jax.numpy as jnp
import pytest
from _server import JAXPORT, admin_token, serving
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import jaxport
from jaxport import GateError, InvalidNameError, NotFoundError, PermissionDeniedError

F32 = jnp.float32
OTHER_JAX = "0.12.0.1"  # a release the tests make up: only stored findings name it


def _exp(fn=jnp.sin, platforms=("cpu", "cuda", "tpu")):
    return jax.export.export(jax.jit(fn), platforms=platforms)(jax.ShapeDtypeStruct((4,), F32))


def _key(tmp_path, name="release"):
    """A fresh EC private key and its public key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
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


def _finding(engine, digest: str, platform: str, jax_version: str, status: str) -> int:
    """Stores a finding as an audit elsewhere would have; returns its row id."""
    from sqlalchemy import insert

    from jaxport.registry._models import AuditRow

    row = {
        "digest": digest, "jax_version": jax_version, "jaxlib_version": jax_version,
        "platform": platform, "status": status, "reason": "", "details_json": "{}",
        "seconds": 0.1, "created_at": time.time(), "level": "full", "devices": 1,
        "examples_digest": None,
    }  # fmt: skip
    with engine.begin() as conn:
        return int(conn.execute(insert(AuditRow).values(**row)).inserted_primary_key[0])


def _all_ok(engine, digest: str, releases=("0.11.2", OTHER_JAX), platforms=("cuda", "tpu")):
    return [_finding(engine, digest, p, r, "ok") for p in platforms for r in releases]


def _protect_all(reg, public):
    return reg.protect(
        "vision", "prod", require_signature=public, require_audit="ok",
        jax=f"0.11.2,{OTHER_JAX}", platforms="cuda,tpu", require_goldens=True,
    )  # fmt: skip


# -- a direct registry: SQLite and PostgreSQL ----------------------------------------------


def test_a_move_is_refused_with_every_failed_gate_until_the_facts_are_stored(registry, tmp_path):
    private, public = _key(tmp_path)
    engine = registry._backend.engine
    registry.push(_exp(), "vision", aliases=["prod"])
    gates = _protect_all(registry, public)
    assert gates.require_signature and len(gates.require_signature) == 64
    assert gates.jax_releases == ("0.11.2", OTHER_JAX) and gates.platforms == ("cuda", "tpu")

    v2 = registry.push(_exp(jnp.cos), "vision")  # no examples, unsigned, never audited
    with pytest.raises(GateError) as refused:
        registry.alias("vision", "prod", v2.version)
    failures = refused.value.failures
    assert [g for g, _ in failures] == ["signature", "audit", "audit", "audit", "audit", "goldens"]
    assert {r.split(":")[0] for g, r in failures if g == "audit"} == {
        "cuda@0.11.2",
        f"cuda@{OTHER_JAX}",
        "tpu@0.11.2",
        f"tpu@{OTHER_JAX}",
    }
    assert refused.value.version == v2.version and "vision@prod is protected" in str(refused.value)
    assert isinstance(refused.value, jaxport.ConflictError)
    assert registry.aliases("vision") == {"prod": 1}

    # Store the facts one by one: the failures shrink to what is still missing.
    v3 = registry.push(_exp(jnp.cos), "vision", examples=[((jnp.ones(4, F32),), {})])
    digest = v3.variants[0].digest
    registry.sign(f"vision:{v3.version}", private_key=private)
    ids = _all_ok(engine, digest, platforms=("cuda",))
    with pytest.raises(GateError) as still:
        registry.alias("vision", "prod", v3.version)
    assert [g for g, _ in still.value.failures] == ["audit", "audit"]  # tpu under both
    ids += _all_ok(engine, digest, platforms=("tpu",))
    registry.alias("vision", "prod", v3.version)
    assert registry.aliases("vision") == {"prod": v3.version}

    # The move's event names the gates and every stored fact it relied on.
    event = registry.events(name="vision", limit=1)[0]
    assert (event.kind, event.version) == ("alias", v3.version)
    assert event.detail["passed"] is True and "override" not in event.detail
    assert sorted(a["id"] for a in event.detail["audits"]) == sorted(ids)
    assert {(a["platform"], a["jax_version"]) for a in event.detail["audits"]} == {
        ("cuda", "0.11.2"),
        ("cuda", OTHER_JAX),
        ("tpu", "0.11.2"),
        ("tpu", OTHER_JAX),
    }
    (signature,) = registry.signatures(f"vision:{v3.version}")
    assert event.detail["signatures"] == [
        {"digest": digest, "signer": signature.signer, "bundle_digest": signature.bundle_digest}
    ]
    assert event.detail["examples"]["count"] == 1
    assert event.detail["gates"]["require_signature"] == signature.signer


def test_the_newest_measured_finding_decides(registry):
    engine = registry._backend.engine
    registry.push(_exp(), "vision")
    registry.protect("vision", "prod", require_audit="ok", jax=OTHER_JAX, platforms=["cuda"])
    digest = registry.get("vision:1").variants[0].digest
    _finding(engine, digest, "cuda", OTHER_JAX, "ok")
    _finding(engine, digest, "cuda", OTHER_JAX, "compile-error")  # a later audit broke
    with pytest.raises(GateError, match="compile-error"):
        registry.alias("vision", "prod", 1)
    _finding(engine, digest, "cuda", OTHER_JAX, "ok")
    _finding(engine, digest, "cuda", OTHER_JAX, "not-run")  # measured nothing: hides nothing
    registry.alias("vision", "prod", 1)
    _finding(engine, digest, "cuda", "0.11.2", "ok")  # another release is not this target
    assert registry.check_gates("vision", "prod", 1).passed


def test_a_real_cpu_audit_meets_an_audit_gate_with_no_release_named(registry):
    registry.push(_exp(platforms=("cpu",)), "vision")
    registry.protect("vision", "prod", require_audit="ok")  # every platform, any jax
    with pytest.raises(GateError, match="cpu@\\*: no finding stored"):
        registry.alias("vision", "prod", 1)
    (finding,) = registry.audit("vision:1", platform="cpu")
    assert finding.status == "ok"
    registry.alias("vision", "prod", 1)
    (audit,) = registry.events(name="vision", limit=1)[0].detail["audits"]
    assert (audit["platform"], audit["jax_version"]) == ("cpu", jax.__version__)


def test_push_keeps_the_version_and_moves_only_the_aliases_whose_gates_pass(registry):
    registry.push(_exp(), "vision")
    registry.protect("vision", "prod", require_goldens=True)
    with pytest.raises(GateError) as refused:
        registry.push(_exp(jnp.cos), "vision", aliases=["prod", "dev"])
    assert refused.value.version == 2 and "vision:2 was pushed" in str(refused.value)
    assert refused.value.failures == (("goldens", "the version holds no golden examples"),)
    assert registry.aliases("vision") == {"dev": 2}
    assert registry.get("vision:2").version == 2
    pushed_event = registry.events(name="vision", limit=1)[0]
    assert pushed_event.kind == "push" and pushed_event.detail["aliases"] == ["dev"]
    assert pushed_event.detail["refused_aliases"] == {
        "prod": [["goldens", refused.value.failures[0][1]]]
    }
    pushed = registry.push(
        _exp(jnp.tan), "vision", aliases=["prod"], examples=[((jnp.ones(4, F32),), {})]
    )
    assert registry.aliases("vision") == {"dev": 2, "prod": pushed.version}
    event = registry.events(name="vision", limit=1)[0]
    assert event.kind == "push" and event.detail["gates"]["prod"]["examples"]["count"] == 1


def test_a_move_waits_for_a_protect_in_flight_and_is_then_refused(registry):
    """Protecting and moving both lock the name's row: a move that starts while a protect's
    transaction is open runs after it commits, and meets the new gates."""
    from sqlalchemy import insert

    from jaxport.registry import _db
    from jaxport.registry._models import AliasGateRow
    from jaxport.registry._queries import model_id_of

    registry.push(_exp(), "vision", aliases=["prod"])
    registry.push(_exp(jnp.cos), "vision")
    outcome: list[BaseException | None] = []

    def move() -> None:
        try:
            registry.alias("vision", "prod", 2)
        except BaseException as e:  # handed to the test's thread
            outcome.append(e)
        else:
            outcome.append(None)

    mover = threading.Thread(target=move)
    with _db.write_transaction(registry._backend.engine) as conn:
        model_id = model_id_of(conn, "vision", lock=True)
        conn.execute(
            insert(AliasGateRow).values(
                model_id=model_id,
                alias="prod",
                require_goldens=True,
                jax_releases="",
                platforms="",
                created_at=time.time(),
                created_by="test",
            )
        )
        mover.start()
        time.sleep(0.3)  # the move queues on the lock (SQLite: on BEGIN IMMEDIATE)
    mover.join(timeout=60)
    (error,) = outcome
    assert isinstance(error, GateError), error
    assert registry.aliases("vision") == {"prod": 1}


def test_override_needs_a_reason_and_is_recorded_with_the_failed_gates(registry):
    registry.push(_exp(), "vision")
    registry.protect("vision", "prod", require_signature="ab" * 32, require_goldens=True)
    with pytest.raises(InvalidNameError, match="reason"):
        registry.alias("vision", "prod", 1, override=True)
    registry.alias("vision", "prod", 1, override=True, reason="incident 42: roll back")
    event = registry.events(name="vision", limit=1)[0]
    override = event.detail["override"]
    assert override["reason"] == "incident 42: roll back" and event.detail["passed"] is False
    assert [g for g, _ in override["failures"]] == ["signature", "goldens"]
    # removing a protected alias is not gated; its gates stay for the next move
    registry.alias("vision", "prod", None)
    with pytest.raises(GateError):
        registry.alias("vision", "prod", 1)


def test_protect_unprotect_and_gates_state(registry, tmp_path):
    registry.push(_exp(), "vision", aliases=["prod"])
    registry.protect("vision", "staging", require_goldens=True)  # an alias not set yet
    registry.protect("vision", "prod", require_goldens=True)
    registry.protect("vision", "prod", require_signature="cd" * 32)  # replaces the gates
    states = registry.gates("vision")
    assert [(c.gates.alias, c.version) for c in states] == [("prod", 1), ("staging", None)]
    prod, staging = states
    assert not prod.passed and [r.gate for r in prod.results] == ["signature"]
    assert not staging.passed and staging.results == ()
    assert prod.gates.describe() == [f"signature by {'cd' * 6}"]
    assert registry.check_gates("vision", "dev", 1) is None
    kinds = [e.kind for e in registry.events(name="vision", limit=5)]
    assert kinds[:3] == ["protect", "protect", "protect"]
    registry.unprotect("vision", "prod")
    assert registry.events(name="vision", limit=1)[0].kind == "unprotect"
    with pytest.raises(NotFoundError, match="not protected"):
        registry.unprotect("vision", "prod")
    registry.push(_exp(jnp.cos), "vision")
    registry.alias("vision", "prod", 2)  # free again
    assert [c.gates.alias for c in registry.gates("vision")] == ["staging"]


@pytest.mark.parametrize(
    "kw, says",
    [
        ({}, "needs a gate"),
        ({"require_signature": "not-hex"}, "fingerprint"),
        ({"require_audit": "mismatch"}, "require_audit"),
        ({"jax": "0.11.2"}, "require_audit"),
        ({"require_audit": "ok", "jax": "latest"}, "jax release"),
        ({"require_audit": "ok", "platforms": "gpu-ish"}, "platform"),
    ],
)
def test_bad_gate_specs_are_refused(registry, kw, says):
    registry.push(_exp(), "vision")
    with pytest.raises(InvalidNameError, match=says):
        registry.protect("vision", "prod", **kw)
    with pytest.raises(NotFoundError):
        registry.protect("nothing", "prod", require_goldens=True)


# -- through a server --------------------------------------------------------------------------


@pytest.fixture
def served(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as s:
        s.admin = admin_token(db_url, blobs)  # type: ignore[attr-defined]
        yield s


def _client(served, scope: str, **kw) -> jaxport.Registry:
    secret = admin_token(served.db_url, served.blobs, f"t{uuid.uuid4().hex[:8]}", scope, **kw)
    client = jaxport.Registry(served.url, token=secret)
    client.secret = secret  # type: ignore[attr-defined]
    return client


def test_gates_through_a_server(served, tmp_path):
    admin = jaxport.Registry(served.url, token=served.admin)
    writer = _client(served, "write")
    team_admin = _client(served, "admin", prefixes=["vision"])
    admin.push(_exp(), "vision", aliases=["prod"])
    writer.push(_exp(jnp.cos), "vision")

    # protecting is for an unprefixed admin only
    with pytest.raises(PermissionDeniedError, match="without prefixes"):
        team_admin.protect("vision", "prod", require_goldens=True)
    with pytest.raises(PermissionDeniedError):
        writer.protect("vision", "prod", require_goldens=True)
    _, public = _key(tmp_path)
    gates = admin.protect(
        "vision", "prod", require_signature=public, require_audit="ok", jax="0.11.2",
        platforms="tpu", require_goldens=True,
    )  # fmt: skip
    assert len(gates.require_signature) == 64 and gates.created_by == "admin"

    # a refused move is 409 with every failed gate, read back as GateError
    with pytest.raises(GateError) as refused:
        writer.alias("vision", "prod", 2)
    assert [g for g, _ in refused.value.failures] == ["signature", "audit", "goldens"]
    assert refused.value.version == 2
    raw = httpx.put(
        f"{served.url}/api/v1/aliases/vision/prod", json={"version": 2},
        headers={"Authorization": f"Bearer {writer.secret}"},
    )  # fmt: skip
    assert raw.status_code == 409
    body = raw.json()["error"]
    assert body["type"] == "GateError" and body["attrs"]["failures"][0][0] == "signature"
    with pytest.raises(GateError):  # a push through the server: stored, alias not moved
        writer.push(_exp(jnp.tan), "vision", aliases=["prod"])
    assert writer.aliases("vision") == {"prod": 1} and writer.get("vision:3").version == 3

    # overriding: neither a writer nor a prefix-limited admin; an unprefixed admin may
    for who in (writer, team_admin):
        with pytest.raises(PermissionDeniedError):
            who.alias("vision", "prod", 2, override=True, reason="hotfix")
    admin.alias("vision", "prod", 2, override=True, reason="hotfix")
    event = admin.events(name="vision", limit=1)[0]
    assert (event.actor, event.kind, event.detail["override"]["reason"]) == (
        "admin",
        "alias",
        "hotfix",
    )

    # the state, by API and on the name's page
    (state,) = writer.gates("vision")
    assert (state.version, state.passed) == (2, False)
    checked = writer.check_gates("vision", "prod", 3)
    assert checked.version == 3 and [g for g, _ in checked.failures] == [
        g for g, _ in state.failures
    ]
    page = httpx.get(
        f"{served.url}/names/vision", headers={"Authorization": f"Bearer {writer.secret}"}
    )
    assert page.status_code == 200
    assert 'id="gates"' in page.text and "FAIL" in page.text and "tpu@0.11.2" in page.text

    with pytest.raises(PermissionDeniedError):
        team_admin.unprotect("vision", "prod")
    admin.unprotect("vision", "prod")
    writer.alias("vision", "prod", 3)
    assert writer.gates("vision") == []


# -- the command line ----------------------------------------------------------------------------


def _cli(env, *args):
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_cli_protect_move_override_and_show(db_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(
        JAX_PLATFORMS="cpu", COLUMNS="100", JAXPORT_HOME=str(tmp_path / "home"),
        JAXPORT_REGISTRY=db_url, JAXPORT_BLOBS=str(tmp_path / "blobs"),
    )  # fmt: skip
    archive = tmp_path / "sin.jaxport"
    jaxport.save(_exp(platforms=("cpu", "tpu")), archive)
    other = tmp_path / "cos.jaxport"
    jaxport.save(_exp(jnp.cos, platforms=("cpu", "tpu")), other)
    assert _cli(env, "push", str(archive), "--name", "vision", "--alias", "prod").returncode == 0
    assert _cli(env, "push", str(other), "--name", "vision").returncode == 0

    made = _cli(
        env, "alias", "protect", "vision", "prod", "--require-signature", "ef" * 32,
        "--require-audit", "ok", "--jax", f"0.11.2,{OTHER_JAX}", "--platforms", "cpu,tpu",
        "--require-goldens", "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["platforms"] == ["cpu", "tpu"]

    refused = _cli(env, "alias", "vision", "prod", "2")
    assert refused.returncode == 1 and refused.stderr.startswith("GateError: vision@prod")
    for words in ("signature gate", "cpu@0.11.2", f"tpu@{OTHER_JAX}", "goldens gate"):
        assert words in refused.stderr, refused.stderr
    as_json = _cli(env, "alias", "vision", "prod", "2", "--json")
    error = json.loads(as_json.stderr)["error"]
    assert as_json.returncode == 1 and error["type"] == "GateError"
    assert [f["gate"] for f in error["failures"]] == ["signature"] + ["audit"] * 4 + ["goldens"]

    shown = _cli(env, "show", "vision", "--json")
    (gate,) = json.loads(shown.stdout)["gates"]
    assert gate["version"] == 1 and gate["gates"]["alias"] == "prod"
    assert [r["passed"] for r in gate["results"]] == [False] * 6 and gate["passed"] is False
    text = _cli(env, "show", "vision").stdout
    assert "FAIL  goldens" in text and "@prod -> 1  FAILS" in text

    third = tmp_path / "tan.jaxport"
    jaxport.save(_exp(jnp.tan, platforms=("cpu", "tpu")), third)
    pushed = _cli(env, "push", str(third), "--name", "vision", "--alias", "prod", "--alias", "dev")
    assert pushed.returncode == 1 and "GateError: vision:3 was pushed" in pushed.stderr
    assert json.loads(_cli(env, "alias", "vision", "--json").stdout)["aliases"] == {
        "dev": 3,
        "prod": 1,
    }
    usage = _cli(env, "alias", "vision", "prod", "2", "--override")
    assert usage.returncode == 2 and "--reason" in usage.stderr
    moved = _cli(env, "alias", "vision", "prod", "2", "--override", "--reason", "rollback")
    assert moved.returncode == 0 and "overridden" in moved.stdout, moved.stderr
    listed = json.loads(_cli(env, "alias", "vision", "--json").stdout)
    assert listed["aliases"] == {"dev": 3, "prod": 2} and listed["gates"][0]["version"] == 2
    assert _cli(env, "alias", "unprotect", "vision", "prod").returncode == 0
    assert _cli(env, "alias", "vision", "prod", "1").returncode == 0
    assert _cli(env, "alias", "unprotect", "vision", "prod").returncode == 1
