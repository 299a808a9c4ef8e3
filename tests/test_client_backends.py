"""One client suite on three backends: a direct SQLite registry, a direct PostgreSQL registry,
and the HTTP client (``Registry("http://...")``) against a real ``jaxport serve`` process
(on PostgreSQL when ``JAXPORT_TEST_POSTGRES_URL`` is set, else SQLite; blobs on the local S3
server of ``tests/_s3.py`` when moto is installed, else a directory). Same calls, same
results, same typed errors."""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _server import admin_token, serving
from conftest import POSTGRES_URL_ENV, _postgres_url

import jaxport

F32 = jnp.float32


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """One server for the module (its tests use names of their own), on PostgreSQL and the
    local S3 server when they are there."""
    tmp = tmp_path_factory.mktemp("server")
    blobs, env = str(tmp / "blobs"), {}
    try:
        s3 = request.getfixturevalue("s3_server")
        blobs, env = s3.url(), {"JAXPORT_BLOBS_OPTIONS": json.dumps(s3.storage_options())}
    except pytest.skip.Exception:
        pass  # no moto here: a local blob directory
    if os.environ.get(POSTGRES_URL_ENV):
        import sqlalchemy as sa

        schema = f"t_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(os.environ[POSTGRES_URL_ENV])
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        db_url = _postgres_url(schema)
    else:
        admin, db_url = None, f"sqlite:///{tmp / 'server.db'}"
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            with serving(db_url, blobs, tmp / "serve.log", env=env) as s:
                s.admin = admin_token(db_url, blobs)  # type: ignore[attr-defined]
                s.on_s3 = bool(env)  # type: ignore[attr-defined]
                yield s
    finally:
        if admin is not None:
            with admin.begin() as conn:
                conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql", "server"])
def client(request, tmp_path):
    if request.param == "server":
        s = request.getfixturevalue("server")
        reg = jaxport.Registry(s.url, token=s.admin)
    else:
        db_url = f"sqlite:///{tmp_path / 'registry.db'}"
        if request.param == "postgresql":
            if not os.environ.get(POSTGRES_URL_ENV):
                pytest.skip(f"{POSTGRES_URL_ENV} is not set")
            db_url = _pg(request)
        reg = jaxport.Registry(db_url, blobs=tmp_path / "blobs")
    yield reg
    reg.close()


def _pg(request):
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(os.environ[POSTGRES_URL_ENV])
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))

    def drop():
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

    request.addfinalizer(drop)
    return _postgres_url(schema)


def _name() -> str:
    return f"n{uuid.uuid4().hex[:10]}"


def _exported(fn=jnp.sin, shape=(3,)):
    return jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct(shape, F32))


def _model(seed: int = 0, n: int = 4) -> jaxport.Model:
    rng = np.random.default_rng(seed)
    params = {f"l{i}": rng.standard_normal((16, 16)).astype(np.float32) for i in range(n)}

    def apply(p, x):
        for i in range(n):
            x = x @ p[f"l{i}"]
        return x

    return jaxport.Model(params, {"apply": apply}, {"apply": [jax.ShapeDtypeStruct((2, 16), F32)]})


def test_push_pull_roundtrip_byte_exact(client):
    name = _name()
    exp = _exported()
    data = jaxport.dumps(exp)
    ref = client.push(data, name, aliases=["prod"], metadata={"team": "x"})
    assert (ref.name, ref.version, ref.created) == (name, 1, True)
    assert client.push(data, name).created is False  # same content: the same version
    assert client.pull_bytes(f"{name}@prod") == data
    assert client.read_blob(hashlib.sha256(data).hexdigest()) == data
    out = client.pull(name).call(jnp.ones(3, F32))
    np.testing.assert_array_equal(out, exp.call(jnp.ones(3, F32)))
    got = client.get(f"{name}:1")
    assert got.metadata == {"team": "x"} and got.variants[0].fun_name == "sin"


def test_listing_resolve_search_aliases(client):
    name = _name()
    client.push(_exported(jnp.sin), name)
    client.push(_exported(jnp.cos), name)
    assert name in client.names()
    assert [r.version for r in client.list(name)] == [1, 2]
    resolution = client.resolve(name, platform="cpu")
    assert resolution.chosen is not None and resolution.chosen.version == 2
    assert resolution.name == name
    assert {v.version for v in client.search(name=name)} == {1, 2}
    client.alias(name, "prod", 1)
    client.alias(name, "prod", 2)
    assert client.aliases(name) == {"prod": 2}
    moves = client.alias_history(name, "prod")
    assert [(m.from_version, m.to_version) for m in moves] == [(None, 1), (1, 2)]


def test_model_push_pull_and_tensors(client):
    name = _name()
    model = _model()
    ref = client.push(model, name)
    assert ref.kind == "model"
    got = client.pull_model(name)
    assert got.bytes_read == 0  # lazy on every backend: the skeleton only
    np.testing.assert_array_equal(got.tensor("['l2']"), model.params["l2"])
    assert got.bytes_read == 16 * 16 * 4  # that tensor alone
    np.testing.assert_array_equal(np.asarray(got.params["l1"]), model.params["l1"])
    described = client.get(name).variants[0]
    assert [t.path for t in described.tensors] == [f"['l{i}']" for i in range(4)]
    assert client.pull_bytes(name) == model.dumps()


def test_typed_errors(client):
    name = _name()
    with pytest.raises(jaxport.NotFoundError):
        client.pull(name)
    with pytest.raises(jaxport.InvalidNameError):
        client.get("bad name!")
    client.push(_exported(), name)
    with pytest.raises(jaxport.WrongKindError):
        client.pull_model(name)
    client.alias(name, "prod", 1)
    with pytest.raises(jaxport.ConflictError):
        client.delete(name, 1)
    with pytest.raises(jaxport.CorruptArchiveError):
        client.push(b"JAXPORT\x00 not really an archive", name)


def test_delete_gc_verify_events(client):
    name = _name()
    client.push(_exported(jnp.tanh), name)
    client.delete(name)
    assert name not in client.names()
    report = client.gc(min_age=0, temp_age=0)
    assert isinstance(report, jaxport.GcReport) and report.dry_run is False
    assert isinstance(client.verify(), jaxport.VerifyReport)
    kinds = [e.kind for e in client.events(limit=50)]
    assert {"push", "delete", "gc"} <= set(kinds)


def test_audit_and_findings(client):
    name = _name()
    client.push(_exported(jnp.exp), name)
    findings = client.audit(name, level="static")
    assert findings and all(f.name == name for f in findings)
    stored = client.audit_results(name=name)
    assert {f.status for f in stored} <= {"unknown", "incompatible", "not-run"}
    assert stored[0].jax_version == jax.__version__


def test_golden_examples(client):
    """Examples pushed through every backend are stored the same way and re-run by audits;
    outputs not given are computed where the push runs (the client, through a server)."""
    name, x = _name(), np.linspace(0, 1, 3, dtype=np.float32)
    exp = _exported(jnp.sin)
    ref = client.push(exp, name, examples=[jaxport.Example((x,), {})])
    again = client.push(exp, name, examples=[jaxport.Example((x,), {}, exp.call(x))])
    assert (again.version, again.created) == (ref.version, False)  # the same examples blob
    [finding] = client.audit(name, platform="cpu", force=True)
    assert finding.status == "ok" and "1 example(s)" in finding.checks["golden"]
    wrong = client.push(_exported(jnp.cos), name, examples=[jaxport.Example((x,), {}, np.sin(x))])
    [finding] = client.audit(f"{name}:{wrong.version}", platform="cpu", force=True)
    assert finding.status == "mismatch"
    model = _model()
    arg = np.ones((2, 16), np.float32)
    client.push(model, f"{name}-m", examples={"apply": [jaxport.Example((arg,))]})
    [finding] = client.audit(f"{name}-m", platform="cpu", force=True)
    assert finding.status == "ok" and "1 example(s)" in finding.checks["golden"]
    with pytest.raises(jaxport.InvalidNameError, match="methods"):
        client.push(model, f"{name}-m", examples={"nope": [jaxport.Example((arg,))]})
    with pytest.raises(jaxport.InvalidNameError, match="sequence"):
        client.push(exp, name, examples={"apply": []})


def test_a_push_tolerance_reaches_the_audit_through_every_backend(client):
    """The tolerance travels in the examples blob: through a server it is read back from it
    (``examples_from_blob``) and stored as the client made it."""
    name, x = _name(), np.linspace(0, 1, 3, dtype=np.float32)
    exp = _exported(jnp.sin)
    off = [jaxport.Example((x,), {}, np.sin(x) + np.float32(1e-3))]
    client.push(exp, name, examples=off, tolerance={"atol": 2e-3})
    [finding] = client.audit(name, platform="cpu", force=True)
    assert finding.status == "ok" and "(override)" in finding.reason, finding.reason
    again = client.push(exp, name, examples=off, tolerance={"atol": 2e-3})
    assert not again.created


def test_the_server_runs_on_postgresql_and_s3(request):
    """What .ci/run gives the server: PostgreSQL and S3 (a newcomer's machine may lack both)."""
    s = request.getfixturevalue("server")
    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set: the server ran on SQLite")
    assert s.db_url.startswith("postgresql") and s.on_s3 and s.blobs.startswith("s3://")


def test_inspect_reads_the_header_only(client):
    name = _name()
    model = _model(n=3)
    client.push(model, name)
    info = client.inspect(name)
    assert info.kind == "model" and [t.path for t in info.tensors] == ["['l0']", "['l1']", "['l2']"]
    assert info == jaxport.inspect(model.dumps())
    client.push(_exported(jnp.cos), f"{name}-f")
    assert client.inspect(f"{name}-f").fun_name == "cos"
