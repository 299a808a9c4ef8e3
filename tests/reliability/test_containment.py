"""Containment (issue 15, item 4): what a hostile store, archive or environment cannot reach.

- Blob-store paths are resolved and checked to stay under the root: a prefix directory that is
  a symlink to outside is refused (``IntegrityError``) and nothing is written outside; one
  that leads inside the root is followed; a blob file that is a symlink is never read through
  nor removed by ``gc``.
- Audit workers get an allow-listed environment: ``DATABASE_URL``, tokens, passwords and cloud
  credentials of the parent do not reach them.
- No public attribute, ``repr``, ``str``, message or CLI output carries a password.
- Names, aliases and method names follow one ASCII grammar (``jaxport._grammar``); a
  non-ASCII look-alike (NFKC) of an ASCII name is refused and named as one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _hostile import reseal

import jaxport
from jaxport.registry import FsspecBlobStore, LocalBlobStore, Stray
from jaxport.registry._names import check_name, parse_reference

SECRET = "s3cret"
FULLWIDTH_PARAMS = "\uff50\uff41\uff52\uff41\uff4d\uff53"  # "params", fullwidth


def _archive(scale: float = 2.0) -> bytes:
    return jaxport.dumps(jax.export.export(jax.jit(lambda x: x * scale))(jnp.zeros(3)))


def _digest(prefix: str = "ab") -> str:
    return prefix + hashlib.sha256(prefix.encode()).hexdigest()[2:]


def _store(kind: str, root: Path) -> Any:
    return LocalBlobStore(root) if kind == "local" else FsspecBlobStore(f"local://{root}")


def _listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# -- blob-store paths -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "fsspec"])
def test_a_prefix_directory_linked_outside_the_root_is_refused(tmp_path, kind):
    root, outside = tmp_path / "blobs", tmp_path / "outside"
    digest = _digest("ab")
    (root / "sha256").mkdir(parents=True)
    outside.mkdir()
    (outside / digest).write_bytes(b"victim")  # what a read or delete through the link reaches
    (root / "sha256" / "ab").symlink_to(outside, target_is_directory=True)
    store = _store(kind, root)
    attempts = [
        lambda: store.put(digest, b"data"),
        lambda: store.put(digest, b"data", replace=True),
        lambda: store.get(digest),
        lambda: store.exists(digest),
        lambda: store.size(digest),
        lambda: store.age(digest),
        lambda: store.delete(digest),
    ]
    if kind == "local":
        attempts.append(lambda: store.path(digest))
    for attempt in attempts:
        with pytest.raises(jaxport.IntegrityError, match="outside the blob store root"):
            attempt()
    assert _listing(outside) == [digest]
    assert (outside / digest).read_bytes() == b"victim"
    assert digest not in set(store.digests())


@pytest.mark.parametrize("kind", ["local", "fsspec"])
def test_a_linked_sha256_directory_is_refused_before_anything_is_made(tmp_path, kind):
    root, outside = tmp_path / "blobs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "sha256").symlink_to(outside, target_is_directory=True)
    store = _store(kind, root)
    with pytest.raises(jaxport.IntegrityError):
        store.put(_digest("cd"), b"data")
    assert _listing(outside) == []  # not even the prefix directory


@pytest.mark.parametrize("kind", ["local", "fsspec"])
def test_remove_stray_does_not_follow_a_tmp_directory_linked_outside(tmp_path, kind):
    root, outside = tmp_path / "blobs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    victim = outside / f"{_digest('ab')}.dead"
    victim.write_bytes(b"not the store's")
    (root / "tmp").symlink_to(outside, target_is_directory=True)
    store = _store(kind, root)
    with pytest.raises(jaxport.IntegrityError, match="outside the blob store root"):
        store.remove_stray(Stray(f"tmp/{victim.name}", "temp", 1e9, _digest("ab")))
    assert victim.read_bytes() == b"not the store's"


def test_a_prefix_linked_inside_the_root_is_followed(tmp_path):
    root = tmp_path / "blobs"
    (root / "sha256" / "elsewhere").mkdir(parents=True)
    (root / "sha256" / "ab").symlink_to(root / "sha256" / "elsewhere")
    store = LocalBlobStore(root)
    digest = _digest("ab")
    store.put(digest, b"data")
    assert store.get(digest) == b"data"
    assert (root / "sha256" / "elsewhere" / digest).read_bytes() == b"data"


def test_a_blob_file_that_is_a_symlink_is_refused_and_left_alone_by_gc(tmp_path):
    data = _archive()
    digest = hashlib.sha256(data).hexdigest()
    victim = tmp_path / "victim"
    victim.write_bytes(data)  # the right bytes, even: still not read through a link
    root = tmp_path / "blobs"
    (root / "sha256" / digest[:2]).mkdir(parents=True)
    link = root / "sha256" / digest[:2] / digest
    link.symlink_to(victim)
    store = LocalBlobStore(root)
    for attempt in (lambda: store.get(digest), lambda: store.exists(digest)):
        with pytest.raises(jaxport.IntegrityError, match="is a symlink"):
            attempt()
    assert list(store.digests()) == []
    assert [(s.path, s.kind) for s in store.strays()] == [
        (f"sha256/{digest[:2]}/{digest}", "foreign")
    ]
    with jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=root) as reg:
        report = reg.gc(min_age=0, temp_age=0)
    assert report.foreign == (f"sha256/{digest[:2]}/{digest}",)
    assert link.is_symlink() and victim.read_bytes() == data


def test_a_push_through_a_linked_prefix_writes_nothing_outside(registry, tmp_path):
    data = _archive()
    digest = hashlib.sha256(data).hexdigest()
    outside = tmp_path / "outside"
    outside.mkdir()
    root = Path(registry.blobs.url)
    (root / "sha256").mkdir(parents=True)
    (root / "sha256" / digest[:2]).symlink_to(outside, target_is_directory=True)
    with pytest.raises(jaxport.IntegrityError, match="outside the blob store root"):
        registry.push(data, "f")
    assert _listing(outside) == []
    with pytest.raises(jaxport.NotFoundError):
        registry.list("f")


# -- the environment of workers -------------------------------------------------------------

PRIVATE = ("DATABASE_URL", "JAXPORT_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD")


def test_audit_workers_get_an_allow_listed_environment(tmp_path, monkeypatch):
    """A stand-in interpreter records the environment the audit worker is started with."""
    seen = tmp_path / "environment"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nenv > "{seen}"\nexit 3\n')
    fake.chmod(0o755)
    for name in PRIVATE:
        monkeypatch.setenv(name, f"{SECRET}-{name}")
    monkeypatch.setenv("JAXPORT_REGISTRY", f"postgresql://u:{SECRET}@h/db")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    from jaxport.audit import run_audits

    with pytest.raises(jaxport.AuditError):
        run_audits([], python=fake)
    text = seen.read_text()
    assert SECRET not in text
    names = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
    assert not names & {*PRIVATE, "JAXPORT_REGISTRY"}
    assert {"PATH", "JAX_PLATFORMS"} <= names  # what an interpreter and jax need still goes


# -- passwords ------------------------------------------------------------------------------


def _public_texts(obj: Any, depth: int = 2) -> list[str]:
    """repr and str of ``obj`` and, ``depth`` levels down, of each public attribute."""
    texts = [repr(obj), str(obj)]
    if depth and hasattr(obj, "__dict__"):
        for name, value in vars(obj).items():
            if not name.startswith("_"):
                texts += _public_texts(value, depth - 1)
    return texts


def _with_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(password=SECRET).render_as_string(hide_password=False)


def test_no_public_attribute_repr_or_message_carries_a_password(db_url, tmp_path):
    """On PostgreSQL (trust authentication, so any password connects) the database URL has a
    password; on both, the blob store is an fsspec URL with credentials in it."""
    url = _with_password(db_url) if db_url.startswith("postgresql") else db_url
    blobs = f"memory://key:{SECRET}@bucket/{tmp_path.name}"
    with jaxport.Registry(url, blobs=blobs) as reg:
        texts = _public_texts(reg)
        ref = reg.push(_archive(), "f")
        texts += _public_texts(ref)
        for attempt in (lambda: reg.pull("nosuch"), lambda: reg.read_blob("0" * 64)):
            with pytest.raises(jaxport.JaxportError) as info:
                attempt()
            texts += [str(info.value), repr(info.value)]
    assert all(SECRET not in t for t in texts), [t for t in texts if SECRET in t]
    if url != db_url:
        assert reg.url == db_url.replace("postgres@", "postgres:***@", 1)
    assert reg.blobs.url == f"memory://key:***@bucket/{tmp_path.name}"


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("jaxport")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.mark.slow
def test_cli_with_credentials_in_urls_never_shows_them(db_url, tmp_path):
    """The database URL with a password (PostgreSQL; SQLite has none) and the blob store an
    fsspec URL with credentials, given as options and as variables, for commands that work
    and for a wrong database."""
    url = _with_password(db_url) if db_url.startswith("postgresql") else db_url
    blobs = f"memory://key:{SECRET}@bucket/{tmp_path.name}"
    wrong = url.split("?", 1)[0].rsplit("/", 1)[0] + "/no_such_database_x"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    env["JAXPORT_HOME"] = str(tmp_path / "home")
    jaxport.Registry(db_url, blobs=tmp_path / "blobs").close()  # reads make no database
    runs = [
        (["--registry", url, "--blobs", blobs, "db", "current"], env, 0),
        (["--registry", url, "--blobs", blobs, "ls", "--json"], env, 0),
        (["ls"], {**env, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": blobs}, 0),
    ]
    if url != db_url:
        runs += [
            (["--registry", wrong, "--blobs", blobs, "ls"], env, 1),
            (["--registry", wrong, "db", "current", "--json"], env, 1),
        ]
    for args, environ, code in runs:
        result = _cli(args, environ)
        assert result.returncode == code, result.stderr
        assert SECRET not in result.stdout + result.stderr
    shown = _cli(["-h"], {**env, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": blobs}).stdout
    assert f"memory://key:***@bucket/{tmp_path.name}" in shown
    assert url == db_url or url.replace(SECRET, "***") in shown


# -- one ASCII grammar of names -------------------------------------------------------------


def test_names_refuse_look_alikes_and_say_why():
    assert unicodedata.normalize("NFKC", FULLWIDTH_PARAMS) == "params"
    with pytest.raises(jaxport.InvalidNameError, match="look-alike of the ASCII 'params'"):
        check_name(FULLWIDTH_PARAMS)
    with pytest.raises(jaxport.InvalidNameError, match=r"not ASCII: only ASCII letters, digits"):
        check_name("caf\u00e9")
    for reference in (f"{FULLWIDTH_PARAMS}@prod", f"mlp@{FULLWIDTH_PARAMS}", "mlp\uff1a3"):
        with pytest.raises(jaxport.InvalidNameError, match=r"look-alike|not ASCII"):
            parse_reference(reference)


def test_registry_names_and_aliases_refuse_look_alikes(registry):
    with pytest.raises(jaxport.InvalidNameError, match="look-alike"):
        registry.push(_archive(), FULLWIDTH_PARAMS)
    with pytest.raises(jaxport.InvalidNameError, match="look-alike"):
        registry.push(_archive(), "f", aliases=["\uff50rod"])


def _model(method: str) -> jaxport.Model:
    params = {"w": np.ones(3, np.float32)}
    return jaxport.Model(
        params, {method: lambda p, x: x * p["w"]}, {method: [jax.ShapeDtypeStruct((3,), "f4")]}
    )


def test_method_names_refuse_look_alikes_when_made():
    with pytest.raises(jaxport.UnsupportedFeatureError, match="look-alike of the ASCII 'params'"):
        _model(FULLWIDTH_PARAMS)
    with pytest.raises(jaxport.UnsupportedFeatureError, match="only ASCII letters, digits and"):
        _model("caf\u00e9")


@pytest.mark.parametrize(
    ("name", "why"),
    [(FULLWIDTH_PARAMS, "look-alike of the ASCII 'params'"), ("\u00e9t\u00e9", "not ASCII")],
)
def test_method_names_refuse_look_alikes_when_read(name, why, tmp_path):
    """A model archive whose method is renamed in place (same UTF-8 length), digests resealed:
    every reader refuses it with CorruptArchiveError, the registry too."""
    placeholder = "m" * len(name.encode("utf-8"))
    data = _model(placeholder).dumps()
    assert data.count(placeholder.encode()) >= 1
    hostile = reseal(data.replace(placeholder.encode(), name.encode("utf-8")))
    path = tmp_path / "model.jaxport"
    path.write_bytes(hostile)
    for read in (jaxport.inspect, jaxport.loads_model, lambda d: jaxport.load_model(path)):
        with pytest.raises(jaxport.CorruptArchiveError, match=why):
            read(hostile)
    registry = jaxport.Registry(f"sqlite:///{tmp_path / 'r.db'}", blobs=tmp_path / "b")
    with registry as reg, pytest.raises(jaxport.CorruptArchiveError, match=why):
        reg.push(hostile, "m")
