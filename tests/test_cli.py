"""The ``jaxport`` command, through click's CliRunner: every command, --json, exit codes."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

import jaxport
from jaxport._cli import main


@pytest.fixture
def cli(db_url, tmp_path):
    runner = CliRunner()
    base = ["--registry", db_url, "--blobs", str(tmp_path / "blobs")]

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, [*base, *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


@pytest.fixture
def files(tmp_path):
    exp = jax.export.export(jax.jit(jnp.sin), platforms=("cpu", "tpu"))(jnp.zeros(4))
    archive = tmp_path / "sin.jaxport"
    jaxport.save(exp, archive, vjp_order=1)
    native = tmp_path / "cos.jaxexport"
    cos = jax.export.export(jax.jit(jnp.cos))(jnp.zeros(4))
    native.write_bytes(cos.serialize(vjp_order=1))
    return archive, native


def test_push_pull_and_read_commands(cli, files, tmp_path):
    archive, native = files
    out = cli("push", str(archive), "--name", "trig", "--alias", "prod", "--meta", "k=v", "--json")
    ref = json.loads(out.output)
    assert ref["name"] == "trig" and ref["version"] == 1
    assert ref["variants"][0]["metadata"] == {"k": "v"} and ref["variants"][0]["vjp_order"] == 1
    cli("push", str(native), "--name", "trig")  # jax-native bytes, recognised by content

    versions = json.loads(cli("ls", "--json").output)
    assert [(r["name"], r["version"]) for r in versions] == [("trig", 1), ("trig", 2)]
    page2 = json.loads(cli("ls", "trig", "--after", "trig:1", "--json").output)
    assert [r["version"] for r in page2] == [2]
    assert "trig" in cli("ls").output

    found = json.loads(cli("search", "--platform", "tpu", "--json").output)
    assert [v["version"] for v in found] == [1]
    shown = json.loads(cli("show", "trig@prod", "--json").output)
    assert shown["ref"]["version"] == 1 and shown["aliases"] == {"prod": 1}
    assert "trig:2" in cli("show", "trig").output

    pulled = tmp_path / "pulled.jaxport"
    cli("pull", "trig@prod", "--platform", "cpu", "-o", str(pulled))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(jaxport.load(pulled).call(x), np.sin(x), rtol=1e-6)
    as_jax = tmp_path / "pulled.jaxexport"
    cli("pull", "trig:2", "-o", str(as_jax), "--format", "jax")
    np.testing.assert_allclose(
        jax.export.deserialize(bytearray(as_jax.read_bytes())).call(x), np.cos(x), rtol=1e-6
    )

    info = json.loads(cli("inspect", str(archive), "--json").output)
    assert info["platforms"] == ["cpu", "tpu"] and info["in_avals"][0]["shape"] == [4]
    text = cli("inspect", str(archive)).output
    assert "signature" in text and "float32" in text


def test_maintenance_commands(cli, files):
    archive, native = files
    cli("push", str(archive), "--name", "m")
    cli("push", str(native), "--name", "m")
    cli("alias", "m", "prod", "2")
    cli("rm", "m:2", code=1)  # aliased
    cli("alias", "m", "prod", "--remove")
    cli("rm", "m:2")
    report = json.loads(cli("gc", "--dry-run", "--min-age", "0", "--json").output)
    assert len(report["digests"]) == 1 and report["dry_run"]
    cli("gc", "--min-age", "0")
    verified = json.loads(cli("verify", "--json").output)
    assert verified["checked"] == 1 and verified["missing"] == [] and verified["corrupt"] == []
    assert "database:" in cli("db", "current").output
    assert json.loads(cli("db", "current", "--json").output)["database"] is not None


def test_verify_fails_on_a_corrupt_blob(cli, files, tmp_path):
    archive, _ = files
    ref = json.loads(cli("push", str(archive), "--name", "v", "--json").output)
    digest = ref["variants"][0]["digest"]
    blob = tmp_path / "blobs" / "sha256" / digest[:2] / digest
    blob.write_bytes(b"corrupt")
    out = cli("verify", "--json", code=1)
    assert json.loads(out.output)["corrupt"] == [digest]


def test_exit_codes_on_bad_input(cli, tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00" * 100)
    out = cli("push", str(garbage), "--name", "g", code=1)
    assert out.output.startswith("CorruptArchiveError: ") and "Traceback" not in out.output
    cli("push", str(tmp_path / "missing.jaxport"), code=2)
    out = cli("pull", "nosuch", "-o", str(tmp_path / "x"), code=1)
    assert out.output.startswith("NotFoundError: ")
    out = cli("pull", "bad/name", "-o", str(tmp_path / "x"), code=1)
    assert out.output.startswith("InvalidNameError: ")
    out = cli("show", "x:notanumber", code=1)
    assert "InvalidNameError" in out.output
    out = cli("inspect", str(garbage), code=1)
    assert out.output.startswith("CorruptArchiveError: ")
    cli("push", code=2)  # usage
    cli("push", str(garbage), "--meta", "novalue", code=2)
    cli("no-such-command", code=2)


def test_symbolic_shapes_are_printed_literally(cli, tmp_path):
    """Shapes like [b, 8] and paths like ['y'] are data, not rich markup."""
    (b,) = jax.export.symbolic_shape("b")
    exp = jax.export.export(jax.jit(lambda x: {"y": x * 2}))(
        jax.ShapeDtypeStruct((b, 8), jnp.float32)
    )
    path = tmp_path / "poly.jaxport"
    jaxport.save(exp, path)
    cli("push", str(path), "--name", "poly")
    out = cli("show", "poly").output
    assert "float32[b, 8]" in out and "['y']" in out
    assert "(b, 8)" in cli("inspect", str(path)).output


def test_audit_and_diff_commands(cli, files, db_url, tmp_path):
    import sys

    archive, native = files
    cli("push", str(archive), "--name", "a")
    cli("push", str(native), "--name", "a")
    findings = json.loads(cli("audit", "a", "--platform", "cpu", "--json").output)
    assert [f["status"] for f in findings] == ["ok", "ok"]
    assert "ok" in cli("audit", "a:1", "--platform", "cpu").output

    # Another environment (here: the same interpreter, in a subprocess) audits and stores.
    out = cli("audit", "a:2", "--platform", "cpu", "--python", sys.executable, "--json")
    assert [f["status"] for f in json.loads(out.output)] == ["ok"]
    rows = json.loads(cli("audit", "a", "--upgrade-to", sys.executable, "--json").output)
    assert {r["after"] for r in rows} == {"ok"} and not any(r["breaks"] for r in rows)

    # Findings of another jax release, as `jaxport audit` run under it would store them.
    from jaxport.registry import _db
    from jaxport.registry._models import Audit

    with jaxport.Registry(db_url, blobs=tmp_path / "blobs") as reg:
        digest = reg.get("a:2").digests[0]
        with _db.write_transaction(reg._engine) as conn:
            conn.execute(
                Audit.__table__.insert().values(
                    digest=digest, jax_version="9.9.9", jaxlib_version="9.9.9", platform="cpu",
                    status="compile-error", reason="custom call gone", details_json="{}",
                    seconds=0.1, created_at=0.0,
                )
            )  # fmt: skip
    matrix = cli("audit", "--matrix", "--platform", "cpu").output
    assert "9.9.9" in matrix and jax.__version__ in matrix
    rows = json.loads(cli("audit", "--upgrade-to", "9.9.9", "--json", code=1).output)
    breaking = [r for r in rows if r["breaks"]]
    assert [(r["version"], r["after"]) for r in breaking] == [(2, "compile-error")]

    changes = json.loads(cli("diff", "a:1", "a:1", "--json").output)
    assert changes == []
    out = cli("diff", "a:1", "a:2", code=1)  # platforms removed (cpu+tpu -> cpu): breaking
    assert "breaking" in out.output
