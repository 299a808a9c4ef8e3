"""The ``jaxport`` command as a user runs it: the installed script in a subprocess.

Every run has ``COLUMNS=80`` and fails the test on a "Traceback" in its output. The registry
comes from the environment (``JAXPORT_REGISTRY``, ``JAXPORT_BLOBS``, ``JAXPORT_HOME``), on each
backend of the ``db_url`` fixture. In-process checks (the CLI-words table, JSON times, help on
every option) are in ``test_cli_units.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import click
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

import jaxport
from jaxport._cli.main import main

JAXPORT = str(Path(sys.executable).with_name("jaxport"))
WIDTH = 80


@dataclasses.dataclass
class Run:
    code: int
    raw: bytes  # stdout, as bytes
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)

    def error(self) -> dict[str, str]:
        """The ``--json`` error object on stderr (stdout must be empty)."""
        assert self.out == ""
        doc = json.loads(self.err)
        assert set(doc) == {"error"} and set(doc["error"]) == {"type", "message"}
        return doc["error"]


def run(env: dict[str, str], *args: str, code: int = 0, cwd: Path | None = None, umask=None):
    """``jaxport ARGS`` (under ``umask`` if given); checks the exit code and no traceback."""
    argv = [JAXPORT, *args]
    if umask is not None:
        argv = ["sh", "-c", f'umask {umask:03o} && exec "$0" "$@"', *argv]
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=300)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    assert "Traceback" not in out + err, (args, out, err)
    assert proc.returncode == code, (args, proc.returncode, out, err)
    return Run(proc.returncode, proc.stdout, out, err)


def fits(text: str, *headers: str) -> str:
    """``text`` fits in 80 columns and shows each header in full (not cut to ``platf…``)."""
    assert max(map(len, text.splitlines()), default=0) <= WIDTH, text
    assert "…" not in text, text
    for header in headers:
        assert f" {header} " in text, (header, text)
    return text


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXPORT_", "XDG_"))}
    env.update(COLUMNS=str(WIDTH), JAX_PLATFORMS="cpu", JAXPORT_HOME=str(tmp_path / "home"))
    return env


@pytest.fixture
def env(db_url, tmp_path):
    """The environment of a user whose registry is ``db_url`` with blobs in ``tmp/blobs``."""
    return {
        **base_env(tmp_path),
        "JAXPORT_REGISTRY": db_url,
        "JAXPORT_BLOBS": str(tmp_path / "blobs"),
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A jaxport archive (sin on cpu+tpu, vjp 1) and jax-native bytes (cos on cpu, vjp 1)."""
    tmp = tmp_path_factory.mktemp("files")
    exp = jax.export.export(jax.jit(jnp.sin), platforms=("cpu", "tpu"))(jnp.zeros(4))
    archive = tmp / "sin.jaxport"
    jaxport.save(exp, archive, vjp_order=1, metadata={"owner": "me"})
    native = tmp / "cos.jaxexport"
    cos = jax.export.export(jax.jit(jnp.cos))(jnp.zeros(4))
    native.write_bytes(cos.serialize(vjp_order=1))
    garbage = tmp / "garbage.bin"
    garbage.write_bytes(b"\x00" * 100)
    return archive, native, garbage


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- help and start-up, without a registry --------------------------------------------------

COMMANDS = [
    [], ["push"], ["pull"], ["ls"], ["search"], ["show"], ["inspect"], ["audit"], ["diff"],
    ["alias"], ["rm"], ["gc"], ["verify"], ["db"], ["db", "current"], ["db", "upgrade"],
    ["audit", "run"], ["audit", "static"], ["audit", "matrix"], ["audit", "upgrade"],
    ["audit", "expiring"], ["audit", "enqueue"], ["token"], ["token", "list"], ["log"],
    ["watch"], ["audit", "forecast"],
    ["retain"], ["retain", "policy", "set"], ["restore"],
]  # fmt: skip


def test_short_and_long_help_everywhere(tmp_path):
    env = base_env(tmp_path)
    for command in COMMANDS:
        assert run(env, *command, "-h").out.startswith("Usage: jaxport")
    top = run(env, "-h").out
    assert top == run(env, "--help").out
    for var in ("JAXPORT_REGISTRY", "JAXPORT_BLOBS_OPTIONS", "JAXPORT_HOME", "XDG_DATA_HOME"):
        assert var in top
    assert str(tmp_path / "home" / "registry.db") in top  # the default registry, here
    server = {**env, "JAXPORT_REGISTRY": "postgresql+psycopg://bob:s3cret@db.example/reg"}
    assert "postgresql+psycopg://bob:***@db.example/reg" in run(server, "-h").out


@pytest.mark.parametrize(
    "args, loaded",
    [
        (["--help"], set()),
        (["ls", "--help"], set()),
        (["inspect", "--help"], set()),
    ],
)
def test_light_commands_import_no_heavy_library(tmp_path, args, loaded):
    """``--help`` imports neither jax, SQLAlchemy nor rich (``jaxport --help`` < 0.3 s)."""
    code = (
        "import sys\nfrom jaxport._cli.main import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "heavy = {m.split('.')[0] for m in sys.modules} & {'jax', 'sqlalchemy', 'rich'}\n"
        "print(sorted(heavy), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], env=base_env(tmp_path), capture_output=True, text=True
    )
    assert proc.stderr.strip().splitlines()[-1] == repr(sorted(loaded))


def test_ls_on_an_empty_registry_imports_no_jax(tmp_path):
    code = (
        "import sys\nfrom jaxport._cli.main import main\n"
        "try:\n    main(['ls'])\nexcept SystemExit:\n    pass\n"
        "print('jax' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], env=base_env(tmp_path), capture_output=True, text=True
    )
    assert proc.stderr.strip().splitlines()[-1] == "False", proc.stderr


# -- wrong input: exit codes, messages in CLI words, JSON errors, never a traceback --------

WRONG_INPUT = [
    # (args, exit code, error type (None: a usage error), words the message has)
    (["no-such-command"], 2, None, "no-such-command"),
    (["push"], 2, None, "FILE"),
    (["push", "{tmp}/missing.jaxport"], 2, None, "missing.jaxport"),
    (["push", "{tmp}"], 2, None, "directory"),
    (["push", "{garbage}", "--meta", "novalue"], 2, None, "KEY=VALUE"),
    (["inspect", "{tmp}/missing.jaxport"], 2, None, "missing.jaxport"),
    (["ls", "--limit", "0"], 2, None, "--limit"),
    (["audit", "--python", "{tmp}/no/python"], 2, None, "--python"),
    (["alias", "m", "prod"], 2, None, "VERSION"),
    (["alias", "m", "prod", "3", "--remove"], 2, None, "--remove"),
    (["rm", "m@prod"], 2, None, "NAME:VERSION"),
    (["pull", "x", "-o", "{tmp}/no/such/dir/x.jaxport"], 1, "FileNotFoundError", "does not exist"),
    (["pull", "x", "-o", "{tmp}"], 1, "IsADirectoryError", "is a directory"),
    (["pull", "x", "-o", "{garbage}"], 1, "FileExistsError", "--force"),
    (["pull", "x", "-o", "-", "--json"], 2, None, "--json"),
    (["rm", "bad/name"], 1, "InvalidNameError", "bad/name"),
    # these import jax or SQLAlchemy (a second or more each): no --json rerun
    (["inspect", "{garbage}"], 1, "CorruptArchiveError", "garbage.bin"),
    (["--registry", "postgresql+psycopg://nohost/db", "ls"], 1, "RegistryError", "--blobs"),
    (["--registry", "not a url", "ls"], 1, "RegistryError", "not a url"),
    (["--blobs", "gcs://bucket/prefix", "push", "{garbage}"], 1, "RegistryError", "gcsfs"),
]
_HEAVY = 4  # the last entries of WRONG_INPUT


@pytest.mark.parametrize(
    "args, code, error, says, heavy",
    [(*w, i >= len(WRONG_INPUT) - _HEAVY) for i, w in enumerate(WRONG_INPUT)],
    ids=lambda a: " ".join(a) if isinstance(a, list) else None,
)
def test_wrong_input_gives_a_message_and_an_exit_code(
    tmp_path, files, args, code, error, says, heavy
):
    """No traceback, exit 1 (an error) or 2 (usage), the message in CLI words."""
    env = base_env(tmp_path)
    args = [a.format(tmp=tmp_path, garbage=files[2]) for a in args]
    result = run(env, *args, code=code)
    assert result.out == "" and says in result.err
    if error is not None:
        assert result.err.startswith(f"{error}: ")
        assert not re.search(r"\b(force|name|blobs)=", result.err)  # library words
    if heavy or "--json" in args:
        return
    doc = run(env, *args, "--json", code=code).error()
    assert doc["type"] == error if error else hasattr(click.exceptions, doc["type"])
    assert says in doc["message"]


# -- a user's session on each backend (subprocesses: the promises about the process) ------


def test_a_session_on_a_registry(env, files, tmp_path):
    archive, native, _ = files
    # both run on cpu with 1 device: a pull could not choose, so the push is refused
    both = run(env, "push", str(archive), str(native), "--name", "trig", code=1).err
    assert both.startswith("DuplicateVariantError: ") and str(native) in both
    cuda = tmp_path / "cos-cuda.jaxexport"
    cos = jax.export.export(jax.jit(jnp.cos), platforms=("cuda",))(jnp.zeros(4))
    cuda.write_bytes(cos.serialize(vjp_order=1))
    # one version, two variants: a jaxport archive and jax-native bytes, told apart by content
    pushed = run(env, "push", str(archive), str(cuda), "--name", "trig", "--alias", "prod",
                 "--meta", "k=v", "--json").json()  # fmt: skip
    assert (pushed["name"], pushed["version"], pushed["created"]) == ("trig", 1, True)
    assert pushed["metadata"] == {"k": "v"} and pushed["created_at"].endswith("+00:00")
    assert len(pushed["variants"]) == 2

    # pull -o -: the stored archive, byte for byte (jaxport archives are stored verbatim)
    raw = run(env, "pull", "trig@prod", "--platform", "TPU", "-o", "-").raw
    assert _sha256(raw) == _sha256(archive.read_bytes())
    # default output name in the current directory, mode from the umask, --force to overwrite
    work = tmp_path / "work"
    work.mkdir()
    run(env, "pull", "trig", "--platform", "tpu", cwd=work, umask=0o027)
    assert stat.S_IMODE((work / "trig-1.jaxport").stat().st_mode) == 0o640
    exists = run(env, "pull", "trig", "--platform", "tpu", "--json", cwd=work, code=1).error()
    assert exists["type"] == "FileExistsError" and "--force" in exists["message"]

    fits(run(env, "ls").out, "name", "version", "platforms", "devices", "created")
    assert run(env, "ls", "unknown", "--json", code=1).error()["type"] == "NotFoundError"
    refused = run(env, "rm", "trig:1", code=1).err  # aliased
    assert refused.startswith("ConflictError: ") and "--force" in refused


# -- every command's output, in process (a subprocess would add nothing here) -------------


@pytest.fixture
def cli(db_url, tmp_path):
    """``jaxport ARGS`` through click's CliRunner on ``db_url``; stdout and stderr apart."""
    runner = CliRunner()
    env = {"JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": str(tmp_path / "blobs"), "COLUMNS": "80"}

    def invoke(*args: str, code: int = 0):
        result = runner.invoke(main, list(args), env=env)
        assert result.exit_code == code, (args, result.output, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
        return result

    return invoke


def test_push_pull_and_read_commands(cli, files, tmp_path):
    archive, native, _ = files
    pushed = json.loads(cli("push", str(archive), "--name", "trig", "--alias", "prod",
                            "--meta", "k=v", "--json").stdout)  # fmt: skip
    assert pushed["variants"][0]["vjp_order"] == 1 and pushed["notes"] == []
    digest = pushed["variants"][0]["digest"]
    cli("push", str(native), "--name", "trig")
    again = json.loads(cli("push", str(archive), "--name", "trig", "--json").stdout)
    assert (again["version"], again["created"]) == (1, False)
    assert "already holds" in cli("push", str(archive), "--name", "trig").stdout

    out = tmp_path / "trig.jaxexport"
    pulled = json.loads(cli("pull", "trig:2", "--platform", "cpu", "--format", "jax",
                            "-o", str(out), "--json").stdout)  # fmt: skip
    assert pulled["bytes"] == out.stat().st_size and pulled["variant"]["version"] == 2
    exp = jax.export.deserialize(bytearray(out.read_bytes()))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(exp.call(x), np.cos(x), rtol=1e-6)
    assert exp.has_vjp()  # the VJP order the native bytes carried
    cli("pull", "trig:2", "--platform", "cpu", "-o", str(out), "--force")
    np.testing.assert_allclose(jaxport.load(out).call(x), np.cos(x), rtol=1e-6)

    listed = json.loads(cli("ls", "--json").stdout)
    assert [(r["name"], r["version"]) for r in listed] == [("trig", 1), ("trig", 2)]
    assert all(r["created_at"].endswith("+00:00") for r in listed)
    page = json.loads(cli("ls", "trig", "--after", "trig:1", "--json").stdout)
    assert [r["version"] for r in page] == [2]
    assert "more: --after trig:1" in cli("ls", "--limit", "1").stdout

    found = json.loads(cli("search", "--platform", "TPU", "--json").stdout)
    assert [v["version"] for v in found] == [1]
    release = ".".join(jax.__version__.split(".")[:2])
    assert len(json.loads(cli("search", "--jax-version", release, "--json").stdout)) >= 1
    assert json.loads(cli("search", "--shape-polymorphic", "--json").stdout) == []
    static = json.loads(cli("search", "--static-shapes", "--json").stdout)
    assert [v["version"] for v in static] == [1, 2]
    table = fits(cli("search").stdout, "version", "platforms", "devices", "jax", "digest")
    assert f"sha256:{digest[:12]}" in table

    shown = json.loads(cli("show", f"sha256:{digest[:12]}", "--json").stdout)  # short form
    assert shown["ref"]["version"] == 1 and shown["aliases"] == {"prod": 1}
    variant = shown["ref"]["variants"][0]
    assert variant["fun_name"] == "sin" and variant["metadata"]["owner"] == "me"
    assert shown["ref"]["metadata"] == {"k": "v"}
    assert variant["created_at"].endswith("+00:00")
    text = fits(cli("show", "trig@prod").stdout, "digest", "platforms", "devices")
    assert "k=v" in text and "owner=me" in text and "function sin" in text and "@prod" in text
    assert "sha256:" + digest[:12] in text

    info = json.loads(cli("inspect", str(archive), "--json").stdout)
    assert info["platforms"] == ["cpu", "tpu"] and info["in_avals"][0]["shape"] == [4]
    fits(cli("inspect", str(archive)).stdout, "path", "shape", "dtype", "module", "section")


def test_alias_rm_gc_verify(cli, files):
    archive, native, _ = files
    cli("push", str(archive), "--name", "m", "--alias", "prod")
    cli("push", str(native), "--name", "m")
    cli("alias", "m", "prod", "2")
    listed = json.loads(cli("alias", "m", "--json").stdout)
    assert listed["aliases"] == {"prod": 2}
    moves = [(h["from_version"], h["to_version"]) for h in listed["history"]]
    assert moves == [(None, 1), (1, 2)]
    assert all(h["moved_at"].endswith("+00:00") for h in listed["history"])
    fits(cli("alias", "m").stdout, "alias", "version", "from", "to", "moved")

    refused = cli("rm", "m:2", code=1).stderr
    assert refused.startswith("ConflictError: ") and "--force" in refused
    assert "force=True" not in refused
    cli("alias", "m", "prod", "--remove")
    assert cli("rm", "m:2").stdout.strip() == "deleted m:2"

    # gc --dry-run and verify agree on the unreferenced blob; --min-age keeps it back
    assert "kept 1 younger than --min-age" in cli("gc", "--dry-run").stdout
    plan = json.loads(cli("gc", "--dry-run", "--min-age", "0", "--json").stdout)
    unreferenced = json.loads(cli("verify", "--json").stdout)["unreferenced"]
    assert plan["dry_run"] and sorted(plan["digests"]) == sorted(unreferenced)
    assert len(unreferenced) == 1
    assert cli("gc", "--min-age", "0").stdout.startswith("removed 1 unreferenced blob(s)")

    cli("alias", "m", "prod", "1")
    assert "--force" in cli("rm", "m", code=1).stderr
    assert cli("rm", "m", "--force").stdout.strip() == "deleted m"
    assert json.loads(cli("ls", "--json").stdout) == []


def test_verify_names_the_versions_a_corrupt_blob_breaks(cli, files, tmp_path):
    archive, _, _ = files
    pushed = json.loads(cli("push", str(archive), "--name", "v", "--json").stdout)
    digest = pushed["variants"][0]["digest"]
    (tmp_path / "blobs" / "sha256" / digest[:2] / digest).write_bytes(b"corrupt")
    report = json.loads(cli("verify", "--json", code=1).stdout)
    assert report["corrupt"] == [digest]
    assert report["problems"] == [
        {"digest": digest, "state": "corrupt", "used_by": ["v:1"], "reason": ""}
    ]
    text = fits(cli("verify", code=1).stdout, "digest", "state")
    assert f"sha256:{digest[:12]}" in text and "v:1" in text


def test_errors_on_a_registry(cli, files):
    archive, _, garbage = files
    cli("push", str(archive), "--name", "e")
    assert cli("ls", "unknown", code=1).stderr.startswith("NotFoundError: ")
    assert cli("push", str(garbage), "--name", "g", code=1).stderr.startswith(
        "CorruptArchiveError: "
    )
    assert cli("pull", "nosuch", "-o", "-", code=1).stderr.startswith("NotFoundError: ")
    assert cli("show", "x:notanumber", code=1).stderr.startswith("InvalidNameError: ")
    assert cli("show", "sha256:ab", code=1).stderr.startswith("InvalidNameError: ")
    error = json.loads(cli("rm", "e:7", "--json", code=1).stderr)["error"]
    assert error["type"] == "NotFoundError"
    assert cli("pull", "e", "-o", "-", "--json", code=2).stdout == ""


def test_db_commands(cli):
    assert "database:" in cli("db", "current").stdout
    assert json.loads(cli("db", "current", "--json").stdout)["jaxport"]


def test_audit_and_diff_commands(cli, files):
    archive, native, _ = files
    cli("push", str(archive), "--name", "a")
    cli("push", str(native), "--name", "a")
    report = json.loads(cli("audit", "run", "a", "--platform", "cpu", "--json").stdout)
    assert [f["status"] for f in report["findings"]] == ["ok", "ok"]
    fits(cli("audit", "run", "a:1", "--platform", "cpu").stdout, "variant", "platform", "status")
    assert json.loads(cli("diff", "a:1", "a:1", "--json").stdout) == []
    changes = fits(cli("diff", "a:1", "a:2", code=1).stdout)  # cpu+tpu -> cpu: breaking
    assert "breaking" in changes


def test_symbolic_shapes_are_printed_literally(cli, tmp_path):
    """Shapes like [b, 8] and paths like ['y'] are data, not rich markup."""
    (b,) = jax.export.symbolic_shape("b")
    exp = jax.export.export(jax.jit(lambda x: {"y": x * 2}))(
        jax.ShapeDtypeStruct((b, 8), jnp.float32)
    )
    path = tmp_path / "poly.jaxport"
    jaxport.save(exp, path)
    cli("push", str(path), "--name", "poly")
    shown = fits(cli("show", "poly").stdout)
    assert "float32[b, 8]" in shown and "['y']" in shown
    assert "(b, 8)" in fits(cli("inspect", str(path)).stdout)


# -- audits through the real command --------------------------------------------------------


def test_audit_claims_only_what_it_measured(env, files, tmp_path):
    archive, _, _ = files
    run(env, "push", str(archive), "--name", "trig")
    tpu = run(env, "audit", "run", "trig", "--platform", "TPU", "--json").json()["findings"]
    assert [(f["platform"], f["status"]) for f in tpu] == [("tpu", "not-run")]
    assert "no tpu device here" in tpu[0]["reason"]
    both = run(env, "audit", "run", "trig", "--json").json()["findings"]
    assert {(f["platform"], f["status"]) for f in both} == {("cpu", "ok"), ("tpu", "not-run")}
    matrix = fits(run(env, "audit", "matrix").out, "variant", "platform", jax.__version__)
    assert re.search(r"trig:1 sha256:[0-9a-f]{12}\s+│ cpu\s+│ ok", matrix)
    assert re.search(r"│ tpu\s+│ not-run", matrix)
    upgrade = run(env, "audit", "upgrade", "0.0.1", "--json").json()["rows"]
    assert {(r["platform"], r["after"]) for r in upgrade} == {
        ("cpu", "not audited"),
        ("tpu", "not audited"),
    }
    missing = run(env, "audit", "run", "no-such-name", "--json", code=1).error()
    assert missing["type"] == "NotFoundError"
    gone = run(env, "audit", "upgrade", str(tmp_path / "no" / "python"), code=1)
    assert "NotFoundError: no Python interpreter" in gone.err
    unknown = run(env, "audit", "run", "trig", "--platform", "vulkan", code=1)
    assert "InvalidNameError: unknown platform" in unknown.err


@pytest.mark.parametrize(
    "flags, subcommand",
    [
        (["--static"], ["static"]),
        (["--matrix"], ["matrix"]),
        (["--expiring-before", "2100-01-01"], ["expiring", "2100-01-01"]),
        (["trig", "--static", "--platform", "cpu"], ["static", "trig", "--platform", "cpu"]),
    ],
)
def test_the_audit_flag_form_still_runs_with_a_note(env, files, flags, subcommand):
    """``jaxport audit --matrix`` (the form of the last release) prints what ``jaxport audit
    matrix`` prints, after one line on stderr naming the subcommand."""
    archive, _, _ = files
    run(env, "push", str(archive), "--name", "trig")
    new = run(env, "audit", *subcommand, "--json")
    old = run(env, "audit", *flags, "--json")
    assert old.err.splitlines() == [
        "note: the flag form of jaxport audit goes in the next release: use "
        f"`jaxport audit {subcommand[0]}{' YYYY-MM-DD' if subcommand[0] == 'expiring' else ''}`"
    ]
    assert new.err == ""

    def same(doc):  # what two runs share: not the time, nor whether a finding was reused
        if not isinstance(doc, dict):
            return doc
        found = [(f["name"], f["platform"], f["status"]) for f in doc.get("findings", [])]
        return {**doc, "generated_at": None, "findings": found}

    assert same(old.json()) == same(new.json())


def test_pull_to_stdout_never_truncates_silently(env, tmp_path):
    # 1 MiB of incompressible constants: more than a pipe holds
    w = np.random.default_rng(0).random((512, 512), np.float32)
    exp = jax.export.export(jax.jit(lambda x: x @ w))(jax.ShapeDtypeStruct((2, 512), jnp.float32))
    archive = tmp_path / "big.jaxport"
    jaxport.save(exp, archive)
    run(env, "push", str(archive), "--name", "big")
    proc = subprocess.Popen([JAXPORT, "pull", "big", "-o", "-"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # the reader goes away, like `| head -c 10`
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1 and "BrokenPipeError" in err and "Traceback" not in err


def test_a_message_keeps_a_long_path_whole(env, tmp_path):
    """A one-line message (here ``pull``'s) is not folded at 80 columns: a path longer than
    the terminal stays one string to copy; the terminal wraps it."""
    deep = tmp_path / ("d" * 60) / "an-archive-with-a-long-name.jaxport"
    deep.parent.mkdir()
    exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float32))
    jaxport.save(exp, tmp_path / "sin.jaxport")
    run(env, "push", str(tmp_path / "sin.jaxport"), "--name", "sin")
    out = run(env, "pull", "sin", "-o", str(deep)).out
    assert len(str(deep)) > WIDTH and str(deep) in out and out.count("\n") == 1, out
