"""Reports a release manager can act on, and the CLI gaps a new user met (issue 16, part c).

Measured as a user would: the installed ``jaxport`` command in a subprocess (exit codes, JSON,
tables in 80 columns), on each backend of ``db_url``. The pure parts (which rows an upgrade
report or a matrix has) are checked in process, on hand-made findings.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re

import click
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import pytest
from test_cli import base_env, fits, run

import jaxport
from jaxport.audit import Finding, compare_findings, matrix_cells, matrix_releases

D1, D2 = "1" * 64, "2" * 64


def _finding(name, version, digest, release, status="ok", platform="cpu", at=0.0):
    return Finding(name, version, digest, release, release, platform, status, "", {}, 0.1, at)


@pytest.fixture
def env(db_url, tmp_path):
    return {
        **base_env(tmp_path),
        "JAXPORT_REGISTRY": db_url,
        "JAXPORT_BLOBS": str(tmp_path / "blobs"),
    }


def _save(tmp_path, name, fun, platforms=("cpu",), *args):
    path = tmp_path / f"{name}.jaxport"
    exp = jax.export.export(jax.jit(fun), platforms=platforms)(*(args or (jnp.zeros(4),)))
    jaxport.save(exp, path)
    return path


def _made_here(doc):
    """The report names the jax and jaxlib that made it, and when (ISO 8601, UTC)."""
    assert (doc["jax_version"], doc["jaxlib_version"]) == (jax.__version__, jaxlib.__version__)
    when = datetime.datetime.fromisoformat(doc["generated_at"])
    assert when.utcoffset() == datetime.timedelta(0)
    assert abs(when.timestamp() - datetime.datetime.now(datetime.UTC).timestamp()) < 3600


# -- which rows, in process ---------------------------------------------------------------


def test_upgrade_rows_are_one_per_name_version_variant_and_platform():
    # one archive (D1) held by a:1 and b:1; b:1 also has D2; findings under both releases
    findings = [
        _finding("a", 1, D1, "0.10.2", at=3),
        _finding("b", 1, D1, "0.10.2", at=3),
        _finding("b", 1, D2, "0.10.2", at=3),
        _finding("a", 1, D1, "0.7.0", "compile-error", at=2),
        _finding("b", 1, D1, "0.7.0", "compile-error", at=2),
        _finding("a", 1, D1, "0.7.0", "ok", at=1),  # older: the newest counts
    ]
    rows = compare_findings(findings, "0.10.2", "0.7.0")
    keys = [(r.name, r.version, r.digest, r.platform) for r in rows]
    assert keys == [("a", 1, D1, "cpu"), ("b", 1, D1, "cpu"), ("b", 1, D2, "cpu")]
    assert [(r.now, r.after, r.breaks) for r in rows] == [
        ("ok", "compile-error", True),
        ("ok", "compile-error", True),
        ("ok", "not audited", False),
    ]
    assert rows[0].short_digest == "sha256:" + "1" * 12
    assert (rows[0].current, rows[0].target) == ("0.10.2", "0.7.0")


def test_matrix_cells_are_rows_times_releases_with_the_newest_finding():
    findings = [  # newest first
        _finding("a", 1, D1, "0.10.2", "mismatch", at=5),
        _finding("a", 1, D1, "0.10.2", "ok", at=4),
        _finding("a", 1, D1, "0.9.2", "ok", platform="tpu", at=3),
        _finding("b", 2, D2, "0.7.0", "incompatible", at=2),
    ]
    releases = matrix_releases(findings)
    assert releases == ["0.7.0", "0.9.2", "0.10.2"]  # release order, not text order
    cells = matrix_cells(findings)
    rows = [("a", 1, D1, "cpu"), ("a", 1, D1, "tpu"), ("b", 2, D2, "cpu")]
    assert len(cells) == len(rows) * len(releases)
    assert [(c.name, c.version, c.digest, c.platform) for c in cells[::3]] == rows
    by_key = {(c.name, c.platform, c.jax_version): c for c in cells}
    assert by_key["a", "cpu", "0.10.2"].status == "mismatch"  # the newest
    assert by_key["a", "cpu", "0.10.2"].finding == findings[0]
    assert by_key["a", "cpu", "0.7.0"].status == "not audited"
    assert by_key["a", "cpu", "0.7.0"].finding is None


# -- the audit reports through the command --------------------------------------------------

#: A jax release no test audits under (not the running one, whatever CI runs).
_OTHER = "0.4.30"


def test_reports_have_a_row_per_variant_and_say_what_made_them(env, tmp_path):
    sin = _save(tmp_path, "sin", jnp.sin, ("cpu", "tpu"))
    cos = _save(tmp_path, "cos", jnp.cos)
    run(env, "push", str(sin), "--name", "a")
    run(env, "push", str(sin), "--name", "b")  # the same archive under another name
    run(env, "push", str(cos), "--name", "b")
    audit = run(env, "audit", "run", "--json").json()
    _made_here(audit)
    keys = [(f["name"], f["version"], f["short_digest"], f["platform"]) for f in audit["findings"]]
    assert len(keys) == len(set(keys)) == 5  # a:1 x2 platforms, b:1 x2, b:2
    assert {(n, v) for n, v, _, _ in keys} == {("a", 1), ("b", 1), ("b", 2)}
    table = fits(run(env, "audit").out, "variant", "platform", "status", "reason")
    assert table.startswith(f"audited with jax {jax.__version__}, jaxlib {jaxlib.__version__}, ")
    for name, version, short, _ in keys:
        assert re.search(rf"{name}:{version}\s+(│[^\n]*\n│\s+)?{short}", table), table

    matrix = run(env, "audit", "matrix", "--json").json()
    _made_here(matrix)
    assert matrix["releases"] == [jax.__version__]
    cells = matrix["cells"]
    assert len(cells) == 5 and all(c["finding"]["status"] == c["status"] for c in cells)
    assert {(c["name"], c["version"], c["platform"]) for c in cells} == {
        (n, v, p) for n, v, _, p in keys
    }
    text = fits(run(env, "audit", "matrix").out, "variant", "platform", jax.__version__)
    assert len(re.findall(r"│ (cpu|tpu) +│ (ok|not-run) +│", text)) == len(cells)
    one = run(env, "audit", "matrix", "b:2", "--json").json()["cells"]
    assert [(c["name"], c["version"]) for c in one] == [("b", 2)]

    upgrade = run(env, "audit", "upgrade", _OTHER, "--json").json()
    _made_here(upgrade)
    assert (upgrade["current"], upgrade["target"]) == (jax.__version__, _OTHER)
    rows = [(r["name"], r["version"], r["short_digest"], r["platform"]) for r in upgrade["rows"]]
    assert sorted(rows) == sorted(keys) and all(
        r["after"] == "not audited" for r in upgrade["rows"]
    )
    only = run(env, "audit", "upgrade", _OTHER, "b:1", "--json").json()["rows"]
    assert {(r["name"], r["version"]) for r in only} == {("b", 1)}
    text = fits(run(env, "audit", "upgrade", _OTHER).out, "variant", "now", "after")
    assert f"upgrade {jax.__version__} -> {_OTHER}" in text and "report by jax" in text


def test_deleted_names_vanish_and_auditing_them_fails(env, tmp_path):
    sin = _save(tmp_path, "sin", jnp.sin)
    run(env, "push", str(sin), "--name", "kept")
    run(env, "push", str(sin), "--name", "gone")
    run(env, "audit", "run", "gone")
    run(env, "rm", "gone")
    for args in (["audit", "run", "gone"], ["audit", "matrix", "gone"], ["ls", "gone"],
                 ["show", "gone"], ["alias", "gone"], ["search", "--name", "gone"]):  # fmt: skip
        err = run(env, *args, "--json", code=1).error()
        assert err["type"] == "NotFoundError", args
        assert err["message"] == "no artifact named 'gone'; names: kept", args
    hint = run(env, "audit", "run", "kep", code=1).err
    assert hint == "NotFoundError: no artifact named 'kep'; did you mean kept? names: kept\n"
    assert run(env, "audit", "run", "never", "--json", code=1).error()["type"] == "NotFoundError"
    assert [r["name"] for r in run(env, "ls", "--json").json()] == ["kept"]
    assert {c["name"] for c in run(env, "audit", "matrix", "--json").json()["cells"]} == {"kept"}
    assert {f["name"] for f in run(env, "audit", "run", "--json").json()["findings"]} == {"kept"}
    run(env, "push", str(sin), "--name", "gone")  # a deleted name can be pushed again
    assert [r["version"] for r in run(env, "ls", "gone", "--json").json()] == [2]


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "--matrix", "--upgrade-to", "0.7.0"],
        ["audit", "--matrix", "--python", "/bin/sh"],
        ["audit", "--matrix", "--timeout", "5"],
        ["audit", "--matrix", "--no-store"],
        ["audit", "--upgrade-to", "/bin/sh", "--python", "/bin/sh"],
        ["audit", "--upgrade-to", "0.7.0", "--force"],
        ["audit", "--upgrade-to", "0.7.0", "--static"],
        ["audit", "--upgrade-to", "0.7.0", "--jax", "0.7.0"],
        ["audit", "--matrix", "--static"],
        ["audit", "matrix", "--timeout", "5"],
        ["audit", "matrix", "--python", "/bin/sh"],
        ["audit", "upgrade", "0.7.0", "--force"],
        ["audit", "upgrade", "0.7.0", "--jax", "0.7.0"],
        ["audit", "run", "--python", "/bin/sh", "--jax", "0.7.0"],
        ["audit", "static", "--tolerance", "1e-3"],
        ["audit", "expiring"],
        ["ls", "a", "--after", "b:1"],
    ],
)
def test_flags_that_cannot_combine_are_usage_errors(tmp_path, args):
    """The audit subcommands take only their options; the flag form (``audit --matrix``, one
    more release) refuses what it refused, after its one-line note."""
    env = base_env(tmp_path)
    err = run(env, *args, code=2).err
    assert "Usage: jaxport" in err and "Error: " in err
    flag_form = args[0] == "audit" and args[1].startswith("--")
    assert err.startswith("note: the flag form of jaxport audit goes") == flag_form
    if not flag_form:
        kind = run(env, *args, "--json", code=2).error()["type"]  # NoSuchOption, ...
        assert issubclass(getattr(click.exceptions, kind), click.UsageError), kind
        return
    err = run(env, *args, "--json", code=2).err.splitlines()
    assert len(err) == 2 and err[0].startswith("note: ")
    assert json.loads(err[1])["error"]["type"] == "UsageError"


# -- push refuses variants that pull could not tell apart -----------------------------------


def test_push_refuses_variants_pull_could_not_tell_apart(env, tmp_path, registry):
    sin = _save(tmp_path, "sin", jnp.sin, ("cpu", "tpu"))
    cos = _save(tmp_path, "cos", jnp.cos)
    tan = _save(tmp_path, "tan", jnp.tan, ("cuda",))
    same = run(env, "push", str(sin), str(sin), "--name", "s", "--json", code=1).error()
    assert same["type"] == "DuplicateVariantError" and "the same archive" in same["message"]
    assert same["message"].count(str(sin)) == 2
    overlap = run(env, "push", str(sin), str(cos), "--name", "s", code=1).err
    assert overlap.startswith("DuplicateVariantError: ") and "both run on cpu with 1" in overlap
    assert str(sin) in overlap and str(cos) in overlap
    assert run(env, "ls", "--json").json() == []  # nothing stored
    assert (
        len(run(env, "push", str(sin), str(tan), "--name", "s", "--json").json()["variants"]) == 2
    )

    one = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(4))
    with pytest.raises(jaxport.DuplicateVariantError) as e:
        registry.push([one, one], "x")
    assert e.value.variants[0].startswith("variant 1 (sha256:")
    assert e.value.variants[1].startswith("variant 2 (sha256:")
    assert isinstance(e.value, ValueError) and "x" not in registry.names()


# -- verify FILE... -------------------------------------------------------------------------


def test_verify_checks_local_files_without_a_registry(tmp_path):
    env = {**base_env(tmp_path), "JAXPORT_REGISTRY": "postgresql://nowhere.invalid/db"}
    good = _save(tmp_path, "sin", jnp.sin)
    model = tmp_path / "m.jaxport"
    jaxport.Model({"w": np.ones(4, np.float32)}, lambda p, x: x * p["w"],
                  [jax.ShapeDtypeStruct((4,), jnp.float32)]).save(model)  # fmt: skip
    data = good.read_bytes()
    flipped, cut = tmp_path / "flipped.jaxport", tmp_path / "cut.jaxport"
    flipped.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    cut.write_bytes(data[: len(data) // 2])
    out = run(env, "verify", str(good), str(model), "--json").json()
    assert [(c["path"], c["ok"], c["kind"]) for c in out] == [
        (str(good), True, "function"),
        (str(model), True, "model"),
    ]
    assert out[0]["sha256"] == hashlib.sha256(data).hexdigest()
    bad = run(env, "verify", str(good), str(flipped), str(cut), "--json", code=1).json()
    assert [(c["ok"], c["status"]) for c in bad] == [
        (True, "ok"),
        (False, "error"),
        (False, "error"),
    ]
    assert bad[1]["reason"].startswith("IntegrityError: ")
    assert bad[2]["reason"].startswith("CorruptArchiveError: ")
    text = run(env, "verify", str(good), str(flipped), code=1).out
    assert text.startswith(f"ok {good} (function, format 1, sha256:")
    assert f"error {flipped}: IntegrityError: " in text
    usage = run(env, "verify", str(tmp_path / "none.jaxport"), code=2).err
    assert "no such file" in usage


# -- run on function archives ---------------------------------------------------------------


def test_run_runs_a_function_archive(env, tmp_path):
    def f(x, y):
        return {"sum": x + y["a"], "prod": x * y["b"]}

    fn = _save(tmp_path, "f", f, ("cpu",), jnp.zeros(4), {"a": jnp.zeros(4), "b": jnp.zeros(4)})
    x, a, b = (np.full(4, v, np.float32) for v in (1, 2, 3))
    np.savez(tmp_path / "in.npz", **{"[0]": x, "a": a, "b": b})  # by path, or by unique key
    np.savez(tmp_path / "guess.npz", x, a, b)  # arr_0..2: the dict's order would be a guess
    guess = run(env, "run", str(fn), "-i", str(tmp_path / "guess.npz"), code=1).err
    assert guess.startswith("RunError: ") and "would be a guess" in guess
    out = tmp_path / "out.npz"
    ran = run(env, "run", str(fn), "-i", str(tmp_path / "in.npz"), "-o", str(out), "--json").json()
    assert (ran["kind"], ran["method"], ran["path"]) == ("function", "f", str(out))
    with np.load(out) as got:
        np.testing.assert_array_equal(got["out['sum']"], x + a)
        np.testing.assert_array_equal(got["out['prod']"], x * b)
    np.savez(tmp_path / "keyed.npz", **{"[0]": x, "[1]['a']": a, "[1]['b']": b})
    run(env, "run", str(fn), "f", "-i", str(tmp_path / "keyed.npz"), cwd=tmp_path)
    assert (tmp_path / "f-out.npz").exists()  # FUNCTION-out.npz

    run(env, "push", str(fn), "--name", "f")
    again = tmp_path / "again.npz"
    run(env, "run", "f:1", "-i", str(tmp_path / "in.npz"), "-o", str(again))
    with np.load(again) as got:
        np.testing.assert_array_equal(got["out['sum']"], x + a)

    np.savez(tmp_path / "two.npz", x, a)
    short = run(env, "run", str(fn), "-i", str(tmp_path / "two.npz"), code=1).err
    assert short.startswith("RunError: ") and "function 'f' takes 3 input(s)" in short
    kw = tmp_path / "kw.jaxport"
    jaxport.save(jax.export.export(jax.jit(lambda x, *, k: x * k))(x, k=x), kw)
    refused = run(env, "run", str(kw), "-i", str(tmp_path / "in.npz"), code=1).err
    assert "takes keyword arguments" in refused
    model = tmp_path / "m.jaxport"
    jaxport.Model(
        {"w": x}, lambda p, v: v * p["w"], [jax.ShapeDtypeStruct((4,), jnp.float32)]
    ).save(model)
    assert "name one of its methods" in run(env, "run", str(model), "-i", str(out), code=2).err


def _rendered(renderable) -> str:
    import io

    from rich.console import Console

    from jaxport._cli.render import Trimmed

    out = io.StringIO()
    Console(width=80, file=out, highlight=False).print(Trimmed(renderable))
    return out.getvalue()


@pytest.mark.parametrize(
    ("releases", "status", "as_columns"),
    [
        (["0.7.0", "0.8.3", "0.9.2", "0.10.2"], "ok", True),
        (["0.7.0", "0.8.3", "0.9.2"], "compile-error", True),
        (["0.7.0", "0.8.3", "0.9.2", "0.10.2"], "compile-error", False),
        (["0.5.0", "0.6.0", "0.7.0", "0.8.3", "0.9.2", "0.10.2"], "ok", False),
    ],
)
def test_matrix_keeps_to_80_columns(releases, status, as_columns):
    from jaxport._cli.audit_reports import matrix_report
    from jaxport._cli.render_audit import matrix_table

    long_name = "a-name-that-is-long-enough-to-fold-in-a-narrow-column"
    findings = [_finding(long_name, 12, D1, r, status) for r in reversed(releases)]
    text = _rendered(matrix_table(matrix_report(findings)))
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text, text
    assert "sha256:111111111111" in text  # the short digest, never cut
    header = next(line for line in text.splitlines() if "┃ variant" in line)
    assert all(r in header for r in releases) == as_columns, text
    assert text.count(f"│ {'compile-err' if status != 'ok' else 'ok'}") == len(releases), text
