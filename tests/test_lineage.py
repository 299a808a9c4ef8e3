"""Lineage and provenance (issue 26 §5): what a version derives from (``update_params``,
``rescue``, ``examples``, an explicit ``derived_from=``) and where it was pushed from, on
SQLite and PostgreSQL, directly, through a registry server (prefix-limited tokens included),
on the version page and with the ``jaxport lineage`` and ``show`` commands in a subprocess."""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import socket
import subprocess
import time
import uuid
from importlib.metadata import version as installed
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sqlalchemy as sa
from _server import JAXPORT, admin_token, serving

import jaxport
from jaxport.registry._lineage import (
    LineageInput,
    Provenance,
    capture,
    check_provenance,
    git_commit,
)
from jaxport.registry._models import VersionRow

F32 = jnp.float32


def _exported(fn=jnp.sin):
    return jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct((3,), F32))


def _model(w: float = 1.0) -> jaxport.Model:
    params = {"w": np.full(3, w, np.float32)}
    spec = [jax.ShapeDtypeStruct((3,), F32)]
    return jaxport.Model(params, {"apply": lambda p, x: p["w"] * x}, {"apply": spec})


def _examples(value: float):
    return [jaxport.Example((np.full(3, value, np.float32),))]


def _shape(node) -> tuple:
    """A lineage node as ``(name:version, state, derivation, children)``, for comparisons."""
    label = None if node.name is None else f"{node.name}:{node.version}"
    return (label, node.state, node.derivation, tuple(_shape(c) for c in node.children))


# -- recording, on each database ------------------------------------------------------------


def test_derivations_are_recorded_both_ways(registry):
    exp = _exported()
    first = registry.push(exp, "f")
    again = registry.push(exp, "f", examples=_examples(1.0))  # same archive, new examples
    other = registry.push(exp, "f", examples=_examples(2.0))
    cos = registry.push(_exported(jnp.cos), "g", derived_from="f:1")
    rescued = registry.push(_exported(jnp.tanh), "g", derived_from=cos, derivation="rescue")
    assert (again.version, other.version) == (2, 3)

    lineage = registry.lineage("f:1")
    assert lineage.ancestors == () and lineage.derivation is None
    assert [_shape(n) for n in lineage.descendants] == [  # f:3 has f:2's archive too
        ("f:2", "live", "examples", (("f:3", "live", "examples", ()),)),
        ("g:1", "live", "explicit", (("g:2", "live", "rescue", ()),)),
    ]
    down = registry.lineage(f"g:{rescued.version}")
    assert down.derivation == "rescue" and str(down.derived_from) == "g:1"
    assert [_shape(n) for n in down.ancestors] == [
        ("g:1", "live", "explicit", ()),
        ("f:1", "live", None, ()),
    ]
    # the newest version with the same archives is the source of a re-push with examples
    assert str(registry.lineage("f:3").derived_from) == "f:2"
    assert registry.lineage("f:1", depth=1).descendants[1].children == ()
    assert registry.lineage("f:1", depth=1).truncated
    assert registry.lineage("g", depth=1).ancestors[0].name == "g"  # the newest: g:2
    push = next(e for e in registry.events(name="g") if e.version == 1)
    assert push.detail["derived_from"] == "f:1" and push.detail["derivation"] == "explicit"
    assert first.version == 1


def test_update_params_derives_from_the_pulled_version(registry):
    registry.push(_model(1.0), "m")
    pulled = registry.pull_model("m:1")
    tuned = pulled.update_params({"w": np.full(3, 2.0, np.float32)})
    tuned = tuned.update_params({"w": np.full(3, 3.0, np.float32)})  # still from m:1
    result = registry.push(tuned, "m-tuned")
    lineage = registry.lineage(f"m-tuned:{result.version}")
    assert lineage.derivation == "update_params" and str(lineage.derived_from) == "m:1"
    # the same update pushed again with examples derives from its first push
    again = registry.push(tuned, "m-tuned", examples={"apply": _examples(1.0)})
    lineage = registry.lineage(f"m-tuned:{again.version}")
    assert lineage.derivation == "examples" and str(lineage.derived_from) == "m-tuned:1"
    # a model made here, or an explicit source, is not taken from a pulled model
    assert registry.lineage(f"m:{registry.push(_model(4.0), 'm').version}").derived_from is None
    explicit = registry.push(
        pulled.update_params({"w": np.full(3, 5.0, np.float32)}), "m",
        derived_from="m:2", derivation="explicit",
    )  # fmt: skip
    assert str(registry.lineage(f"m:{explicit.version}").derived_from) == "m:2"
    registry.delete("m", 1)  # a pulled version deleted since: no source, the push goes on
    late = registry.push(pulled.update_params({"w": np.full(3, 6.0, np.float32)}), "m")
    assert registry.lineage(f"m:{late.version}").derived_from is None
    with pytest.raises(jaxport.NotFoundError):  # named explicitly, it must exist
        registry.push(_exported(), "f", derived_from="m:1", derivation="rescue")


def test_update_params_from_another_registry_is_not_a_source(registry, tmp_path):
    other = jaxport.Registry(f"sqlite:///{tmp_path / 'other.db'}", blobs=tmp_path / "ob")
    other.push(_model(1.0), "m")
    tuned = other.pull_model("m:1").update_params({"w": np.full(3, 2.0, np.float32)})
    other.close()
    assert registry.lineage(f"m:{registry.push(tuned, 'm').version}").derived_from is None


@pytest.mark.parametrize(
    ("derived_from", "derivation", "error"),
    [
        ("f", None, jaxport.InvalidNameError),  # not NAME:VERSION
        ("f@prod", None, jaxport.InvalidNameError),
        (3, None, jaxport.InvalidNameError),
        (None, "rescue", jaxport.InvalidNameError),  # a derivation without a source
        ("f:1", "copied", jaxport.InvalidNameError),
        ("f:9", None, jaxport.NotFoundError),
        ("nothing:1", "rescue", jaxport.NotFoundError),
    ],
)
def test_bad_sources_are_refused_and_consume_nothing(registry, derived_from, derivation, error):
    registry.push(_exported(), "f")
    with pytest.raises(error):
        registry.push(_exported(jnp.cos), "f", derived_from=derived_from, derivation=derivation)
    assert [r.version for r in registry.list("f")] == [1]
    assert registry.push(_exported(jnp.cos), "f").version == 2  # no number was used up


def test_cycles_are_impossible(registry):
    """A source must exist when the push commits and edges never change: every edge points to
    an older version. A push of content that is a version already keeps its lineage."""
    a = registry.push(_exported(), "a")
    b = registry.push(_exported(jnp.cos), "b", derived_from=a)
    with pytest.raises(jaxport.NotFoundError):  # the version being made is not a source yet
        registry.push(_exported(jnp.tanh), "c", derived_from="c:1")
    again = registry.push(_exported(), "a", derived_from=b)  # a:1 again: no edge b -> a
    assert not again.created and registry.lineage("a:1").ancestors == ()
    for i in range(5):  # a chain, each from the previous
        registry.push(_exported(lambda x, i=i: x + i), "chain", derived_from=b if i == 0 else
                      f"chain:{i}")  # fmt: skip
    assert [str(n) for n in registry.lineage("chain:5").ancestors] == [
        "chain:4", "chain:3", "chain:2", "chain:1", "b:1", "a:1",
    ]  # fmt: skip
    with registry._backend.engine.connect() as conn:
        rows = conn.execute(sa.select(VersionRow.id, VersionRow.derived_from_id)).all()
    assert all(source < id_ for id_, source in rows if source is not None)


def test_a_deleted_source_reads_as_deleted(registry):
    registry.push(_exported(), "src")
    registry.push(_exported(jnp.cos), "src")
    registry.push(_exported(jnp.tanh), "kid", derived_from="src:1")
    registry.push(_exported(jnp.exp), "kid", derived_from="src:2")
    registry.push(_exported(jnp.abs), "grandkid", derived_from="kid:2")
    registry.delete("src", 1)
    assert [_shape(n) for n in registry.lineage("kid:1").ancestors] == [
        ("src:1", "deleted", None, ())
    ]
    with registry._backend.engine.begin() as conn:  # soft-deleted (retention): kept, marked
        conn.execute(
            sa.update(VersionRow)
            .where(VersionRow.derived_from_id.is_(None), VersionRow.version == 2)
            .values(deleted_at=time.time())
        )
    lineage = registry.lineage("grandkid:1")
    assert [_shape(n) for n in lineage.ancestors] == [
        ("kid:2", "live", "explicit", ()),
        ("src:2", "deleted", None, ()),
    ]
    registry.delete("kid", 2)
    assert [_shape(n) for n in registry.lineage("grandkid:1").ancestors] == [
        ("kid:2", "deleted", None, ())
    ]


# -- provenance ------------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def test_provenance_is_captured_on_the_client(registry, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    outside = registry.push(_exported(), "p")
    assert registry.lineage("p:1").provenance == Provenance(
        git_commit=git_commit(str(work)), function_qualname="sin",
        jax_version=installed("jax"), jaxlib_version=installed("jaxlib"),
        host=socket.gethostname(), user=getpass.getuser(),
    )  # fmt: skip
    assert git_commit(str(work)) is None and outside.version == 1  # not a work tree
    _git(work, "init", "-q")
    (work / "train.py").write_text("1\n")
    _git(work, "add", "train.py")
    _git(work, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, check=True)
    commit = head.stdout.decode().strip()
    registry.push(_exported(jnp.cos), "p")
    (work / "train.py").write_text("2\n")  # a tracked change: dirty
    (work / "notes.txt").write_text("untracked files do not count\n")
    registry.push(_exported(jnp.tanh), "p")
    model = registry.push(_model(), "p-model")
    assert registry.lineage("p:2").provenance.git_commit == commit
    assert registry.lineage("p:3").provenance.git_commit == f"{commit}-dirty"
    assert registry.lineage(f"p-model:{model.version}").provenance.function_qualname == "apply"
    registry.push(str(_saved(tmp_path)), "p-file")  # a file: no function known here
    assert registry.lineage("p-file:1").provenance.function_qualname is None


def _saved(tmp_path: Path) -> Path:
    path = tmp_path / "exp.jxp"
    jaxport.save(_exported(jnp.exp), path)
    return path


@pytest.mark.parametrize(
    "fields",
    [
        {"host": "h" * 256},
        {"user": ""},
        {"git_commit": "not-hex"},
        {"git_commit": "a" * 65},
        {"jax_version": "0.4\n1"},
        {"shell": "x"},
        {"user": 3},
    ],
)
def test_reported_provenance_is_checked(fields):
    with pytest.raises(jaxport.InvalidNameError):
        check_provenance(fields)


def test_capture_never_fails_without_git(monkeypatch, tmp_path):
    _git(tmp_path, "init", "-q")
    assert git_commit(str(tmp_path)) is None  # a work tree without a commit yet
    (tmp_path / "a").write_text("a\n")
    _git(tmp_path, "add", "a")
    _git(tmp_path, "commit", "-q", "-m", "a")
    assert git_commit(str(tmp_path)) is not None
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no git on the path to ask
    monkeypatch.chdir(tmp_path)
    found = LineageInput(captured=capture([_exported()])).provenance
    assert found.git_commit is None and found.function_qualname == "sin"


# -- through a registry server -----------------------------------------------------------------


@pytest.fixture
def served(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    with serving(db_url, blobs, tmp_path / "serve.log") as s:
        s.admin = admin_token(db_url, blobs)  # type: ignore[attr-defined]
        yield s


def _client(served, scope: str = "write", **kw) -> jaxport.Registry:
    name = f"t{uuid.uuid4().hex[:8]}"
    secret = admin_token(served.db_url, served.blobs, name, scope, **kw)
    client = jaxport.Registry(served.url, token=secret)
    client.token_name, client.secret = name, secret  # type: ignore[attr-defined]
    return client


def test_lineage_through_a_server(served, tmp_path):
    writer = _client(served)
    writer.push(_model(1.0), "m")
    tuned = writer.pull_model("m:1").update_params({"w": np.full(3, 2.0, np.float32)})
    writer.push(tuned, "m", examples={"apply": _examples(1.0)})
    writer.push(_exported(), "f", derived_from="m:2", derivation="rescue")
    remote = writer.lineage("m:2")
    assert remote.derivation == "update_params" and str(remote.derived_from) == "m:1"
    assert [_shape(n) for n in remote.descendants] == [("f:1", "live", "rescue", ())]
    # the client's provenance is stored; the event log names the token
    assert remote.provenance.user == getpass.getuser()
    assert remote.provenance.function_qualname == "apply"
    assert remote.actor == writer.token_name  # type: ignore[attr-defined]
    direct = jaxport.Registry(served.db_url, blobs=served.blobs)
    assert direct.lineage("m:2") == remote
    direct.close()
    with pytest.raises(jaxport.NotFoundError):
        writer.push(_exported(jnp.cos), "f", derived_from="m:9")
    with pytest.raises(jaxport.NotFoundError):
        writer.lineage("m:9")


def test_a_server_checks_reported_provenance(served):
    """A commit's provenance is bounded and checked before anything is stored."""
    headers = {"Authorization": f"Bearer {served.admin}"}
    base = {"name": "x", "archives": [{"digest": "0" * 64, "size": 1, "parts": []}]}
    for provenance in ({"host": "h" * 300}, {"git_commit": "zz"}, {"user": "a\x00b"}):
        r = httpx.post(f"{served.url}/api/v1/versions", headers=headers,
                       json={**base, "provenance": provenance}, timeout=60)  # fmt: skip
        assert r.status_code in (400, 422), r.text
        assert r.json()["error"]["type"] == "InvalidNameError"
    r = httpx.post(f"{served.url}/api/v1/versions", headers=headers,
                   json={**base, "derived_from": "y" * 300}, timeout=60)  # fmt: skip
    assert r.json()["error"]["type"] == "InvalidNameError"


def test_prefix_limited_tokens_see_only_their_names(served):
    admin = jaxport.Registry(served.url, token=served.admin)
    admin.push(_exported(), "other-base")
    admin.push(_exported(jnp.cos), "team-x", derived_from="other-base:1")
    admin.push(_exported(jnp.tanh), "other-fork", derived_from="team-x:1")
    admin.push(_exported(jnp.exp), "team-y", derived_from="team-x:1")
    team = _client(served, "write", prefixes=["team-"])
    seen = team.lineage("team-x:1")
    assert [_shape(n) for n in seen.ancestors] == [(None, "hidden", None, ())]
    assert [_shape(n) for n in seen.descendants] == [("team-y:1", "live", "explicit", ())]
    answer = httpx.get(f"{served.url}/api/v1/lineage", params={"reference": "team-x:1"},
                       headers={"Authorization": f"Bearer {team.secret}"})  # fmt: skip
    assert answer.status_code == 200 and "other-" not in answer.text
    page = httpx.get(f"{served.url}/names/team-x/1",
                     headers={"Authorization": f"Bearer {team.secret}"})  # fmt: skip
    assert page.status_code == 200 and 'id="lineage-tree"' in page.text
    assert "other-" not in page.text and "team-y:1" in page.text
    with pytest.raises(jaxport.PermissionDeniedError) as e:
        team.push(_exported(jnp.abs), "team-z", derived_from="other-base:1")
    assert "other-base" in str(e.value)  # the name it gave, nothing about what exists
    with pytest.raises(jaxport.PermissionDeniedError):
        team.lineage("other-base:1")
    full = admin.lineage("team-x:1")
    assert [str(n) for n in full.descendants] == ["other-fork:1", "team-y:1"]
    assert str(full.derived_from) == "other-base:1"


def test_the_version_page_draws_the_lineage(served):
    admin = jaxport.Registry(served.url, token=served.admin)
    admin.push(_exported(), "page")
    admin.push(_exported(jnp.cos), "page", derived_from="page:1", derivation="rescue")
    admin.push(_exported(jnp.tanh), "page", derived_from="page:2")
    admin.delete("page", 1)
    html = httpx.get(f"{served.url}/names/page/2",
                     headers={"Authorization": f"Bearer {served.admin}"}).text  # fmt: skip
    tree = html[html.index('id="lineage-tree"') : html.index('id="provenance"')]
    assert tree.index("page:1") < tree.index("<strong>page:2</strong>") < tree.index("page:3")
    assert '<a href="/names/page/3">page:3</a>' in tree and "(deleted)" in tree
    assert "· rescue" in tree and "· explicit" in tree and "<script" not in html.lower()
    assert getpass.getuser() in html[html.index('id="provenance"') :]


# -- the command line ----------------------------------------------------------------------------


def _run(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([JAXPORT, *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_cli_lineage_and_show(db_url, tmp_path):
    blobs = tmp_path / "blobs"
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        reg.push(_exported(), "long-name-" + "n" * 50)
        root = f"long-name-{'n' * 50}:1"
        reg.push(_exported(jnp.cos), "mid", derived_from=root, derivation="rescue")
        for i, fn in enumerate((jnp.tanh, jnp.exp, jnp.abs)):
            reg.push(_exported(fn), f"leaf{i}", derived_from="mid:1")
        reg.push(_exported(jnp.sinh), "deep", derived_from="leaf0:1")
    env = {**os.environ, "JAXPORT_REGISTRY": db_url, "JAXPORT_BLOBS": str(blobs)}
    out = _run(env, "lineage", "mid:1").stdout
    lines = out.splitlines()
    tree = lines[: lines.index("")]
    assert len(tree) == 6 and all(len(line) <= 80 for line in tree)
    assert lines[0].startswith("long-name-")
    assert lines[1].startswith("└── mid:1 *  rescue")
    assert [line[: line.index(":1") + 2] for line in lines[2:6]] == [
        "    ├── leaf0:1", "    │   └── deep:1", "    ├── leaf1:1", "    └── leaf2:1",
    ]  # fmt: skip
    assert f"derived from     {root}, by rescue" in out
    document = json.loads(_run(env, "lineage", "mid:1", "--json").stdout)
    assert document["derivation"] == "rescue" and document["ancestors"][0]["name"].startswith(
        "long-name-"
    )
    assert [d["name"] for d in document["descendants"]] == ["leaf0", "leaf1", "leaf2"]
    assert document["provenance"]["user"] == getpass.getuser()
    shown = json.loads(_run(env, "show", "deep:1", "--json").stdout)
    assert shown["lineage"]["derivation"] == "explicit"
    assert shown["lineage"]["provenance"]["function_qualname"] == "sinh"
    assert "derived from     leaf0:1, by explicit" in _run(env, "show", "deep:1").stdout
    missing = _run(env, "lineage", "mid:7", code=1)
    assert missing.stderr.startswith("NotFoundError:")
    assert json.loads(_run(env, "lineage", "mid:7", "--json", code=1).stderr)["error"]["type"] == (
        "NotFoundError"
    )


def test_lineage_is_a_dataclass_that_round_trips_the_wire():
    from jaxport.registry._internal import from_wire, to_wire

    node = jaxport.LineageNode("a", 1, "live", None, 1.0, (jaxport.LineageNode("b", 2),))
    lineage = jaxport.Lineage("a", 1, None, Provenance(user="u"), "local:u", (), (node,))
    assert from_wire(jaxport.Lineage, json.loads(json.dumps(to_wire(lineage)))) == lineage
    assert dataclasses.replace(lineage, truncated=True).truncated
