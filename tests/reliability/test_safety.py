"""Path and credential safety of the registry (issue 9).

- **Paths.** Adversarial names, aliases, references, platforms and digests (``../``, absolute
  paths, NUL, unicode look-alikes, very long, uppercase hex, ``sha256:`` prefixes with ``/``)
  go through every public ``Registry`` method and every ``BlobStore`` method, on a local
  directory and on ``memory://`` (fsspec). Each call fails with a ``JaxportError``, and no file
  outside the blob root is created, changed, deleted or opened: sentinel files sit where a
  naive path join would land, the tree is compared before and after, and a Python audit hook
  (PEP 578: ``open``, ``os.remove``, ``os.rename``, ``os.mkdir``, ``os.listdir``, ...) records
  every path the calls touch. Arguments that are free text by contract (``search``'s
  ``jax_version`` and ``fun_name``, a release given to ``upgrade_report``) may return nothing
  instead of failing, and must touch no file either.
- **Code.** An AST walk over every module of the installed package (jaxport, export, registry,
  audit, migrations, schema) finds no pickle/marshal/shelve import, no eval/exec/compile call,
  no ``np.load(allow_pickle=...)`` other than False, no ``yaml.load`` without a safe loader, no
  shell; every subprocess call site is listed in ``SUBPROCESS_SITES`` with its reason.
- **Credentials.** A database URL with a password (unreachable port, unknown driver, unknown
  dialect, a password with ``/``) through ``Registry(...)``, ``repr``, the CLI (``ls``,
  ``--json``, ``db current``, ``--help`` with ``JAXPORT_REGISTRY`` set) and the audit worker's
  environment and command line: the password appears in no output and no exception text.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import functools
import hashlib
import importlib.util
import os
import posixpath
import re
import shlex
import subprocess
import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import jaxport
import jaxport.registry._internal
from jaxport.registry import FsspecBlobStore, LocalBlobStore, Stray
from jaxport.registry._internal import ArchiveParts
from jaxport.registry._uploads import Part

# -- watching the file system -----------------------------------------------------------------

#: Audit events (PEP 578) that name a path a call opens, creates, changes, lists or removes.
WATCHED_EVENTS = frozenset({
    "open", "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.listdir", "os.scandir",
    "os.truncate", "os.chmod", "os.chown", "os.utime", "os.link", "os.symlink",
    "shutil.copyfile", "shutil.copytree", "shutil.move", "shutil.rmtree",
})  # fmt: skip
_TWO_PATHS = frozenset({
    "os.rename", "os.link", "os.symlink", "shutil.copyfile", "shutil.copytree", "shutil.move",
})  # fmt: skip
_RECORDS: list[list[str]] = []
_HOOKED: list[bool] = []


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    if not _RECORDS or event not in WATCHED_EVENTS:
        return
    for arg in args[: 2 if event in _TWO_PATHS else 1]:
        if isinstance(arg, str | bytes | os.PathLike):
            try:
                _RECORDS[-1].append(os.fsdecode(arg))
            except (TypeError, ValueError):
                _RECORDS[-1].append(repr(arg))


class FileWatch:
    """Records the paths of ``WATCHED_EVENTS`` while active (an audit hook cannot be removed:
    it is installed once and idles outside a watch)."""

    def __init__(self) -> None:
        if not _HOOKED:
            sys.addaudithook(_audit_hook)
            _HOOKED.append(True)
        self.paths: list[str] = []

    def __enter__(self) -> FileWatch:
        _RECORDS.append(self.paths)
        return self

    def __exit__(self, *exc: object) -> None:
        _RECORDS.remove(self.paths)


def outside(paths: list[str], root: Path, arena: Path) -> list[str]:
    """The recorded ``paths`` that a call must not touch: in ``arena`` but outside the blob
    ``root``, or holding NUL or a ``..`` component, or ``/etc/passwd``."""
    bad = []
    for p in paths:
        if "\x00" in p or ".." in Path(p).parts or os.path.normpath(p) == "/etc/passwd":
            bad.append(p)
            continue
        full = Path(os.path.abspath(p))
        if full.is_relative_to(arena) and not full.is_relative_to(root):
            bad.append(p)
    return bad


def tree(top: Path, skip: Callable[[Path], bool]) -> dict[str, str]:
    """``{relative path: sha256 of the file, or "dir"}`` of everything under ``top``."""
    out = {}
    for path in sorted(top.rglob("*")):
        if skip(path):
            continue
        rel = path.relative_to(top).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def naive_blob_path(root: str, digest: str) -> str:
    """Where ``root/sha256/<2>/<digest>`` lands if nobody checks ``digest``."""
    return posixpath.normpath(posixpath.join(root, "sha256", digest[:2], digest))


# -- adversarial inputs -----------------------------------------------------------------------

SENTINEL = b"SENTINEL: never read, written or removed by jaxport"


def bad_names(sentinel: Path) -> list[str]:
    """Strings that are not valid names or aliases; in a reference, not valid or not found."""
    return [
        "../x", "..", ".", "a/b", "a/../../sentinel/secret", "../../sentinel/secret",
        str(sentinel / "secret"), "/etc/passwd", "a\x00b", "\x00", "mlp\x00",
        "\uff4d\uff4c\uff50",  # fullwidth "mlp"
        "ml\u0440",  # Cyrillic er for "p"
        "mlp\u2215x", "mlp\u2044x", "mlp\uff0fx",  # division, fraction, fullwidth slashes
        "mlp\u202egpj.exe", "mlp\u200b", "x" * 201, "x" * 100_000, "", " ", " mlp", "mlp\n",
        "mlp\r", "mlp\t", "C:\\x", "..\\..\\x", "\\\\host\\share", "~root", "$HOME",
        "%2e%2e%2fx", "-rf", ".hidden", "mlp:1/../2", "mlp@../x", "mlp:../1", "mlp@",
        "@prod", "mlp:0", "mlp:-1", "mlp:99999999999", "mlp:\u0661", "sha256:../../x",
        "sha256:/etc/passwd", "sha256:ABCDEF", "sha256:" + "a" * 65, "sha256:",
    ]  # fmt: skip


def bad_digests(real: str, sentinel: Path) -> list[str]:
    """Strings that are not a sha256 digest (64 lowercase hex digits)."""
    cyrillic = real.replace("a", "\u0430", 1) if "a" in real else "\u0430" + real[1:]
    return [
        "../../sentinel/".ljust(64, "a"), "../../../../../../../../etc/passwd".ljust(64, "/"),
        str(sentinel / "secret"), "/etc/passwd", "A" * 64, real.upper(), "sha256:" + real,
        f"sha256/{real[:2]}/{real}", real + "\n", real + "\x00", "\x00" + real[1:], real[:63],
        real + "0", "\uff10" * 64, "\u0661" * 64, cyrillic, "g" * 64, "", " " * 64,
        real[:62] + "/.", "./" + real[2:], real[:2] + "/" + real[3:], "x" * 100_000,
    ]  # fmt: skip


def bad_strays(sentinel: Path) -> list[Stray]:
    """Strays no listing produces: paths out of the root, dot components, NUL."""
    paths = [
        "tmp/..", "tmp/.", "tmp/", "sha256/../.tmp-foreign", "sha256/./.tmp-foreign",
        "../sentinel/secret", "../../sentinel/secret", str(sentinel / "secret"),
        "tmp/../../sentinel/secret", "sha256/ab/../../../sentinel/.tmp-x", "tmp/\x00",
        "sha256/\x00/.tmp-x", "/etc/passwd",
    ]  # fmt: skip
    return [Stray(p, kind, 0.0) for p in paths for kind in ("temp", "foreign")]


@pytest.fixture(scope="module")
def archive() -> bytes:
    return jaxport.dumps(jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3, jnp.float32)))


@dataclasses.dataclass
class Arena:
    """A temporary tree: the blob root, a sentinel directory beside it, and where naive joins
    of the adversarial digests would land (each holding ``SENTINEL``)."""

    top: Path
    root: Path
    sentinel: Path

    @classmethod
    def make(cls, top: Path) -> Arena:
        arena = cls(top, top / "reg" / "blobs", top / "sentinel")
        arena.sentinel.mkdir(parents=True)
        (arena.sentinel / "secret").write_bytes(SENTINEL)
        (arena.sentinel / ".tmp-x").write_bytes(SENTINEL)
        return arena

    def plant(self, digests: list[str]) -> None:
        """A sentinel file wherever a naive join of a digest lands inside the arena."""
        for digest in digests:
            if "\x00" in digest or len(digest) > 1000:
                continue
            target = Path(naive_blob_path(str(self.root), digest))
            if target.is_relative_to(self.top) and not target.is_relative_to(self.root):
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.is_dir():
                    target.write_bytes(SENTINEL)

    def plant_foreign(self) -> None:
        """Files inside the root that are not jaxport's (gc reports them, never deletes)."""
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        (self.root / ".tmp-foreign").write_bytes(SENTINEL)
        (self.root / "notes.txt").write_bytes(SENTINEL)

    def snapshot(self) -> dict[str, str]:
        """Everything outside the blob root (the SQLite database files left out) and the
        foreign files inside it."""
        foreign = (".tmp-foreign", "notes.txt", "tmp")

        def skip(p: Path) -> bool:
            inside = p.is_relative_to(self.root) and p.name not in foreign
            return inside or p.name.startswith("registry.db")

        return tree(self.top, skip)


# -- every public method ----------------------------------------------------------------------


class Subject:
    """The registry under test (its methods are reached through this) and an archive."""

    def __init__(self, reg: Any, archive: bytes):
        self.reg = reg
        self.archive = archive

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reg, name)


Call = Callable[[Any, str], Any]
#: Registry methods with a name, alias, reference or platform argument: they must raise.
NAME_CALLS: dict[str, Call] = {
    "push(name)": lambda r, s: r.push(r.archive, s),
    "push(aliases)": lambda r, s: r.push(r.archive, "ok", aliases=[s]),
    "alias(name)": lambda r, s: r.alias(s, "prod", 1),
    "alias(alias)": lambda r, s: r.alias("ok", s, 1),
    "delete(name)": lambda r, s: r.delete(s),
    "delete(name, 1)": lambda r, s: r.delete(s, 1, force=True),
    "list(name)": lambda r, s: r.list(s),
    "list(after)": lambda r, s: r.list(after=(s, 1)),
    "search(name)": lambda r, s: r.search(name=s),
    "aliases": lambda r, s: r.aliases(s),
    "alias_history(name)": lambda r, s: r.alias_history(s),
    "alias_history(alias)": lambda r, s: r.alias_history("ok", s),
    "audit_results(name)": lambda r, s: r.audit_results(name=s),
    "events(name)": lambda r, s: r.events(name=s),
    "check_gates(name)": lambda r, s: r.check_gates(s, "prod", 1),
    "check_gates(alias)": lambda r, s: r.check_gates("ok", s, 1),
    "gates": lambda r, s: r.gates(s),
    "protect(name)": lambda r, s: r.protect(s, "prod", require_goldens=True),
    "protect(alias)": lambda r, s: r.protect("ok", s, require_goldens=True),
    "unprotect(name)": lambda r, s: r.unprotect(s, "prod"),
    "unprotect(alias)": lambda r, s: r.unprotect("ok", s),
    "set_retention_policy": lambda r, s: r.set_retention_policy(s, keep_last=1),
    "remove_retention_policy": lambda r, s: r.remove_retention_policy(s),
    "restore(name)": lambda r, s: r.restore(s, 1),
    "rescue(expiring_before)": lambda r, s: r.rescue(s, dry_run=True),
    "watch_jax(index_url)": lambda r, s: r.watch_jax(index_url=s, dry_run=True, enqueue=False),
    # Nothing listens on port 9 of the loopback: a repository that passes the checks is refused
    # by the connection (ServerUnavailableError), never by a file.
    "oci_push(destination)": lambda r, s: r.oci_push("ok:1", f"oci://127.0.0.1:9/{s}"),
    "oci_pull(source)": lambda r, s: r.oci_pull(f"oci://127.0.0.1:9/{s}"),
    "oci_pull(name)": lambda r, s: r.oci_pull("oci://127.0.0.1:9/ok", name=s),
}
REFERENCE_CALLS: dict[str, Call] = {
    "resolve": lambda r, s: r.resolve(s),
    "pull": lambda r, s: r.pull(s),
    "pull_bytes": lambda r, s: r.pull_bytes(s),
    "pull_model": lambda r, s: r.pull_model(s),
    "pull_file": lambda r, s: r.pull_file(s, os.devnull),  # must raise before writing
    "get": lambda r, s: r.get(s),
    "inspect": lambda r, s: r.inspect(s),
    "diff(a)": lambda r, s: r.diff(s, "ok:1"),
    "diff(b)": lambda r, s: r.diff("ok:1", s),
    "audit": lambda r, s: r.audit(s, store=False),
    "upgrade_report(reference)": lambda r, s: r.upgrade_report("0.7.0", s),
    "windows(reference)": lambda r, s: r.windows(s),
    "signatures": lambda r, s: r.signatures(s),
    "verify_signatures": lambda r, s: r.verify_signatures(s, [_signing_key()[1]]),
    "sign": lambda r, s: r.sign(s, private_key=_signing_key()[0]),
    "enqueue_audits": lambda r, s: r.enqueue_audits(s),
    "lineage": lambda r, s: r.lineage(s),
    "forecast": lambda r, s: r.forecast(s),
    "compile": lambda r, s: r.compile(s, private_key=_signing_key()[0]),
    "oci_push": lambda r, s: r.oci_push(s, "oci://127.0.0.1:9/ok"),
    "compiled_sets": lambda r, s: r.compiled_sets(s),
    "use_compiled": lambda r, s: r.use_compiled(s),
}


@functools.cache
def _signing_key() -> tuple[str, bytes]:
    """A private key file (EC P-256, made once per run) and its public key's PEM; without
    cryptography (a venv without the signing extra), a file that is no key: signing then
    raises ``UnsupportedFeatureError`` naming the extra."""
    path = Path(tempfile.mkdtemp(prefix="jaxport-key-")) / "key.pem"
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        path.write_bytes(b"not a key")
        return str(path), b"not a key"
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return str(path), public


#: Version arguments given a string: they must raise too.
VERSION_CALLS: dict[str, Call] = {
    "alias(version)": lambda r, s: r.alias("ok", "prod", s),
    "delete(version)": lambda r, s: r.delete("ok", s),
    "resolve(version)": lambda r, s: r.resolve("ok", version=s),
    "pull(version)": lambda r, s: r.pull("ok", version=s),
    "pull_model(version)": lambda r, s: r.pull_model("ok", version=s),
    "list(after version)": lambda r, s: r.list(after=("ok", s)),
    "restore(version)": lambda r, s: r.restore("ok", s),
}
PLATFORM_CALLS: dict[str, Call] = {
    "resolve(platform)": lambda r, s: r.resolve("ok", platform=s),
    "pull(platform)": lambda r, s: r.pull("ok", platform=s),
    "pull_model(platform)": lambda r, s: r.pull_model("ok", platform=s),
    "search(platform)": lambda r, s: r.search(platform=s),
    "audit(platform)": lambda r, s: r.audit("ok", platform=s, store=False),
    "audit_results(platform)": lambda r, s: r.audit_results(platform=s),
    "upgrade_report(platform)": lambda r, s: r.upgrade_report("0.7.0", platform=s),
    "enqueue_audits(platform)": lambda r, s: r.enqueue_audits("ok", platform=s),
    "run_audit_worker(platform)": lambda r, s: r.run_audit_worker([s], until_idle=True),
}
#: Free text by contract: may return nothing rather than raise; must touch no file.
FREE_TEXT_CALLS: dict[str, Call] = {
    "search(jax_version)": lambda r, s: r.search(jax_version=s),
    "search(fun_name)": lambda r, s: r.search(fun_name=s),
    "audit_results(jax_version)": lambda r, s: r.audit_results(jax_version=s),
    "upgrade_report(target)": lambda r, s: r.upgrade_report(s),
    "windows(expiring_before)": lambda r, s: r.windows(expiring_before=s),
    "retain(prefix)": lambda r, s: r.retain(s, dry_run=True),
    "rescue(prefix)": lambda r, s: r.rescue("2100-01-01", prefix=s, dry_run=True),
}
DIGEST_CALLS: dict[str, Call] = {
    "read_blob": lambda r, s: r.read_blob(s),
    "blob_stream": lambda r, s: list(r.blob_stream(s).chunks()),
    "receive_blob": lambda r, s: r.receive_blob(s, [b"not these bytes"]),
    "push_parts": lambda r, s: r.push_parts([ArchiveParts(s, 1, (Part(0, s, 0, 1),))], "ok"),
}
#: Digests as a question (which of these are missing?): a well-formed one is an answer, not an
#: error; a malformed one must raise; none may touch a file.
DIGEST_QUERY_CALLS: dict[str, Call] = {"missing_blobs": lambda r, s: r.missing_blobs([s])}
#: Every public method of Registry that takes no input an attacker controls as a string.
NO_STRING_INPUT = {
    "check_audit_queue", "close", "gc", "names", "retention_policies", "verify",
    "last_compiled_use",  # an attribute: the report of the latest use of compiled sets
}  # fmt: skip


def test_every_public_registry_method_is_exercised():
    covered = {
        key.split("(")[0]
        for calls in (
            NAME_CALLS,
            REFERENCE_CALLS,
            PLATFORM_CALLS,
            FREE_TEXT_CALLS,
            DIGEST_CALLS,
            DIGEST_QUERY_CALLS,
        )
        for key in calls
    }
    public = {n for n in dir(jaxport.Registry) if not n.startswith("_")}
    assert public - covered - NO_STRING_INPUT == set()


def test_the_file_watch_sees_what_a_call_touches(tmp_path):
    arena = Arena.make(tmp_path)
    arena.root.mkdir(parents=True)
    with FileWatch() as watch:
        (arena.sentinel / "secret").read_bytes()
        (arena.root / "sha256").mkdir()
        (arena.root / "sha256" / "x").write_bytes(b"")
    assert outside(watch.paths, arena.root, arena.top) == [str(arena.sentinel / "secret")]
    assert any(p.endswith("sha256/x") for p in watch.paths)


def _attempt(call: Call, reg: Any, value: str, must_raise: bool) -> str | None:
    """None if ``call`` behaved, else what it did wrong."""
    try:
        call(reg, value)
    except jaxport.JaxportError:
        return None
    except Exception as e:
        return f"raised {type(e).__name__}: {str(e)[:120]}"
    return "returned instead of raising" if must_raise else None


def _exercise(reg: Any, arena: Arena, real: str) -> list[str]:
    names = bad_names(arena.sentinel)
    digests = bad_digests(real, arena.sentinel)
    # A digest prefix of the real archive would name it: those are left out of references.
    refs = [*names, "sha256:" + "0" * 64]
    refs += [f"sha256:{d}" for d in digests if not re.fullmatch("[0-9a-f]{6,64}", d)]
    plan: list[tuple[dict[str, Call], list[str], bool]] = [
        (NAME_CALLS, names, True),
        (REFERENCE_CALLS, refs, True),
        (VERSION_CALLS, names, True),
        (PLATFORM_CALLS, names, True),
        (DIGEST_CALLS, digests, True),
        (DIGEST_QUERY_CALLS, [d for d in digests if re.fullmatch("[0-9a-f]{64}", d)], False),
        (DIGEST_QUERY_CALLS, [d for d in digests if not re.fullmatch("[0-9a-f]{64}", d)], True),
        (FREE_TEXT_CALLS, names, False),
    ]
    failures = []
    for calls, values, must_raise in plan:
        for label, call in calls.items():
            for value in values:
                wrong = _attempt(call, reg, value, must_raise)
                if wrong:
                    failures.append(f"{label}({value!r:.60}): {wrong}")
    return failures


@dataclasses.dataclass(frozen=True)
class MemoryArena:
    """A ``memory://`` blob root (``url``, ``root``) under ``top``, beside a sentinel key."""

    top: str

    @property
    def root(self) -> str:
        return f"{self.top}/blobs"

    @property
    def url(self) -> str:
        return f"memory://{self.root}"

    def state(self) -> dict[str, bytes]:
        """Every file (its bytes) and directory of the memory filesystem under ``top``."""
        import fsspec

        fs = fsspec.filesystem("memory")
        files = {k: bytes(v.getvalue()) for k, v in fs.store.items() if k.startswith(self.top)}
        return files | {d: b"dir" for d in fs.pseudo_dirs if d.startswith(self.top)}

    def violations(self, before: dict[str, bytes]) -> list[str]:
        """Keys changed since ``before`` outside the root, or with ``..`` or NUL in them."""
        after = self.state()
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        return [
            k for k in sorted(changed)
            if not k.startswith(self.root + "/") or ".." in k.split("/") or "\x00" in k
        ]  # fmt: skip


@pytest.fixture
def memory() -> Iterator[MemoryArena]:
    """A fresh ``memory://`` arena with a sentinel key outside its root; removed afterwards."""
    import fsspec

    fs = fsspec.filesystem("memory")
    arena = MemoryArena(f"/jaxport-safety-{uuid.uuid4().hex[:8]}")
    fs.pipe_file(f"{arena.top}/sentinel/secret", SENTINEL)
    yield arena
    fs.rm(arena.top, recursive=True)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "memory"])
def test_adversarial_inputs_through_every_registry_method(db_url, tmp_path, archive, store, memory):
    arena = Arena.make(tmp_path)
    blobs = str(arena.root) if store == "local" else memory.url
    real = hashlib.sha256(archive).hexdigest()
    arena.plant(bad_digests(real, arena.sentinel))
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        reg.push(archive, "ok", aliases=["prod"])  # something to find, and warm imports
        reg.pull("ok@prod")
        before, mem_before = arena.snapshot(), memory.state()
        with FileWatch() as watch:
            failures = _exercise(Subject(reg, archive), arena, real)
        assert failures == []
        assert arena.snapshot() == before
        assert memory.violations(mem_before) == []
        assert outside(watch.paths, arena.root, arena.top) == []
        assert reg.verify().ok and reg.pull_bytes("ok:1") == archive


def _store(kind: str, arena: Arena, memory: MemoryArena) -> Any:
    return LocalBlobStore(arena.root) if kind == "local" else FsspecBlobStore(memory.url)


BLOB_CALLS: dict[str, Call] = {
    "put": lambda b, d: b.put(d, SENTINEL),
    "put(replace)": lambda b, d: b.put(d, SENTINEL, replace=True),
    "get": lambda b, d: b.get(d),
    "exists": lambda b, d: b.exists(d),
    "delete": lambda b, d: b.delete(d),
    "size": lambda b, d: b.size(d),
    "age": lambda b, d: b.age(d),
}
#: BlobStore methods without a digest: ``remove_stray`` is tested with hostile Strays.
BLOB_NO_DIGEST = {"url", "digests", "strays", "remove_stray"}


def test_every_blob_store_method_is_exercised():
    from jaxport.registry import BlobStore

    public = {n for n in dir(BlobStore) if not n.startswith("_")} | set(BlobStore.__annotations__)
    assert public - {k.split("(")[0] for k in BLOB_CALLS} - BLOB_NO_DIGEST == set()


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_adversarial_digests_through_every_blob_store_method(tmp_path, archive, kind, memory):
    arena = Arena.make(tmp_path)
    real = hashlib.sha256(archive).hexdigest()
    digests = bad_digests(real, arena.sentinel)
    arena.plant(digests)
    arena.plant_foreign()
    store = _store(kind, arena, memory)
    store.put(real, archive)
    before, mem_before = arena.snapshot(), memory.state()
    failures = []
    with FileWatch() as watch:
        for label, call in BLOB_CALLS.items():
            for digest in digests:
                wrong = _attempt(call, store, digest, must_raise=True)
                if wrong:
                    failures.append(f"{label}({digest!r:.60}): {wrong}")
    assert failures == []
    assert arena.snapshot() == before
    assert memory.violations(mem_before) == []
    assert outside(watch.paths, arena.root, arena.top) == []
    assert store.get(real) == archive and list(store.digests()) == [real]


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_hostile_strays_remove_nothing(tmp_path, archive, kind, memory):
    """``remove_stray`` removes only a temporary file that a listing could have produced; any
    other Stray is a no-op (its documented contract) or a ``JaxportError``, never a raw
    ``OSError``, and never removes a foreign file or anything outside the root."""
    arena = Arena.make(tmp_path)
    arena.plant_foreign()
    store = _store(kind, arena, memory)
    store.put(hashlib.sha256(archive).hexdigest(), archive)
    if kind == "memory":
        store._fs.pipe_file(f"{memory.root}/.tmp-foreign", SENTINEL)
    before, mem_before = arena.snapshot(), memory.state()
    failures = []
    with FileWatch() as watch:
        for stray in bad_strays(arena.sentinel):
            wrong = _attempt(lambda b, _, s=stray: b.remove_stray(s), store, "", must_raise=False)
            if wrong:
                failures.append(f"remove_stray({stray.path!r}, {stray.kind}): {wrong}")
    assert failures == []
    assert arena.snapshot() == before
    assert memory.state() == mem_before
    assert outside(watch.paths, arena.root, arena.top) == []


# -- what the code may do with bytes it reads -------------------------------------------------

PACKAGES = (
    "jaxport", "jaxport.export", "jaxport.registry", "jaxport.audit", "jaxport.migrations",
    "jaxport.schema",
)  # fmt: skip
FORBIDDEN_MODULES = frozenset({
    "pickle", "_pickle", "cPickle", "cloudpickle", "dill", "joblib", "marshal", "shelve",
})  # fmt: skip
FORBIDDEN_CALLS = frozenset({
    "eval", "exec", "compile", "builtins.eval", "builtins.exec", "builtins.compile",
    "yaml.unsafe_load", "yaml.unsafe_load_all", "yaml.full_load", "yaml.full_load_all",
    "os.system", "os.popen", "os.execv", "os.execve", "os.execl", "os.execvp", "os.spawnl",
    "os.spawnv", "os.spawnvp", "os.posix_spawn", "os.posix_spawnp", "pty.spawn",
    "asyncio.create_subprocess_shell",
})  # fmt: skip
SAFE_YAML_LOADERS = frozenset({"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"})
#: The shared helper every process is started by (it dies with its parent, has a deadline).
CHILD_STARTERS = frozenset({"jaxport._children.spawn", "jaxport._children.run"})
#: Every place the package starts a process, and why it may. None runs a shell.
SUBPROCESS_SITES = {
    ("jaxport._children", "_Spawner._serve"): (
        "the one place a child is started (subprocess.Popen, no shell), by one long-lived thread, "
        "through a launcher that sets PR_SET_PDEATHSIG and, for a one-shot child, an alarm"
    ),
    ("jaxport._children", "run"): (
        "spawn's one-shot form: the child's output captured, killed at its time limit"
    ),
    ("jaxport._cli.runner", "call_in_child"): (
        "jaxport run's call: [python, -I, -m, jaxport._run_child, WORKDIR], no shell, the "
        "allow-listed environment, killed at --timeout; archive and inputs reach it as files"
    ),
    ("jaxport.audit._worker", "_Worker.__init__"): (
        "the audit worker: [python, -P, -m, jaxport.audit._worker, --memory-limit N], no shell, "
        "the registry variables left out of its environment and no URL on its command line "
        "(test_audit_worker_gets_no_password); archives reach it as files"
    ),
    ("jaxport.schema._codegen", "generate_python"): (
        "development tool: runs flatc on the package's own schema/jaxport.fbs to regenerate "
        "schema/_generated.py (tests/test_schema_codegen.py); never on a read path"
    ),
    ("jaxport.export._sandbox", "Sandbox._start"): (
        "the module sandbox's worker: [python, -I, _sandbox_worker.py, MEMORY_LIMIT], no shell, "
        "the allow-listed environment (jaxport._environ); module bytes reach it as a file"
    ),
    ("jaxport.export._native", "run_converter"): (
        "jax-native bytes converted in a child: [python, -I, -m, jaxport.export._native or "
        "jaxport._rescue_child (under a --jax environment's python), IN, OUT, MEMORY_LIMIT], no "
        "shell, the allow-listed environment, a time limit; the bytes reach it as a file"
    ),
    ("jaxport.audit._probe", "_versions_of"): (
        "the auditing interpreter's package versions: [python, -P, -c, FIXED_SCRIPT], no shell,"
        " the allow-listed environment; the script is a constant (names formatted by repr), its"
        " output read as JSON"
    ),
    ("jaxport.audit._envs", "_run"): (
        "making a --jax environment: [uv|python, venv|pip ..., jax==RELEASE, jaxlib==RELEASE,"
        " this jaxport], no shell; RELEASE checked to be digits and dots first"
    ),
    ("jaxport.registry._lineage", "_git"): (
        "provenance at push: [git, -c, core.fsmonitor=false, status, --porcelain=v2, ...] in the"
        " pushing process's working directory, no shell, a 2 s time limit; only where a .git"
        " is found; its output parsed for the commit and whether tracked files changed"
    ),
    ("jaxport.registry._compiled_make", "compile_archive"): (
        "jaxport compile's child: [python, -I, -m, jaxport._compile_child, WORKDIR], no shell, "
        "the allow-listed environment less JAX_COMPILATION_CACHE*, a time limit; the archive "
        "reaches it as a file, the cache files come back as files whose names are checked"
    ),
    ("jaxport.audit._watch", "_pip_config_index"): (
        "the index pip is configured with: [python, -m, pip, config, list] through"
        " jaxport._children.run, no shell, a time limit; its output parsed for index-url"
    ),
}


@dataclasses.dataclass(frozen=True)
class Finding:
    module: str
    line: int
    where: str
    what: str


def package_modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the installed package."""
    out = {}
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for location in spec.submodule_search_locations:
            for path in Path(location).rglob("*.py"):
                rel = path.relative_to(location).with_suffix("").parts
                parts = rel[:-1] if rel[-1] == "__init__" else rel
                out[".".join((package, *parts))] = path
    return out


class _Scanner(ast.NodeVisitor):
    """Finds forbidden imports and calls, and every subprocess call site, in one module."""

    def __init__(self, module: str):
        self.module = module
        self.aliases: dict[str, str] = {}
        self.scope: list[str] = []
        self.findings: list[Finding] = []
        self.subprocess_sites: set[tuple[str, str]] = set()

    def _add(self, node: ast.AST, what: str) -> None:
        where = ".".join(self.scope) or "<module>"
        self.findings.append(Finding(self.module, getattr(node, "lineno", 0), where, what))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._imported(node, alias.name)
            self.aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        self._imported(node, base)
        for alias in node.names:
            if alias.name in FORBIDDEN_MODULES:  # from six.moves import cPickle
                self._add(node, f"imports {base}.{alias.name}")
            self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}"

    def _imported(self, node: ast.AST, dotted: str) -> None:
        if dotted.split(".")[0] in FORBIDDEN_MODULES:
            self._add(node, f"imports {dotted}")

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name)

    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func) or ""
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if name in FORBIDDEN_CALLS:
            self._add(node, f"calls {name}")
        if name.startswith("subprocess.") or name in CHILD_STARTERS:
            self.subprocess_sites.add((self.module, ".".join(self.scope) or "<module>"))
        if "shell" in keywords and not _is_false(keywords["shell"]):
            self._add(node, f"{name}(shell=...) is not shell=False")
        if "allow_pickle" in keywords and not _is_false(keywords["allow_pickle"]):
            self._add(node, f"{name}(allow_pickle=...) is not allow_pickle=False")
        if name in ("yaml.load", "yaml.load_all"):
            loader = keywords.get("Loader") or (node.args[1] if len(node.args) > 1 else None)
            loader_name = "" if loader is None else (self.dotted(loader) or "")
            if loader_name.split(".")[-1] not in SAFE_YAML_LOADERS:
                self._add(node, f"{name} without a safe Loader")
        self.generic_visit(node)


def _is_false(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def scan() -> tuple[list[Finding], set[tuple[str, str]], int]:
    """Findings, subprocess call sites, and how many modules were scanned."""
    findings, sites = [], set()
    modules = package_modules()
    for module, path in sorted(modules.items()):
        scanner = _Scanner(module)
        scanner.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        findings += scanner.findings
        sites |= scanner.subprocess_sites
    return findings, sites, len(modules)


def test_no_unsafe_deserialization_eval_or_shell_in_the_package():
    findings, sites, count = scan()
    assert count >= 40, "the scan must see the whole package"
    assert findings == []
    assert sites == set(SUBPROCESS_SITES), "every subprocess call site is listed, with a reason"


@pytest.mark.parametrize(
    "source",
    [
        "import pickle",
        "from marshal import loads",
        "import shelve as s",
        "eval(x)",
        "exec(x)",
        "compile(x, 'f', 'exec')",
        "import numpy as np\nnp.load(f, allow_pickle=True)",
        "import numpy\nnumpy.load(f, allow_pickle=flag)",
        "import yaml\nyaml.load(s)",
        "import yaml\nyaml.load(s, Loader=yaml.Loader)",
        "from yaml import full_load\nfull_load(s)",
        "import subprocess as sp\nsp.run(cmd, shell=True)",
        "import os\nos.system(cmd)",
    ],
)
def test_the_scan_catches_each_rule(source):
    scanner = _Scanner("example")
    scanner.visit(ast.parse(source))
    assert len(scanner.findings) == 1


# -- credentials ------------------------------------------------------------------------------

#: ``(URL, its password)``: unreachable port, unknown driver, unknown dialect, unparsable port,
#: a password SQLAlchemy accepts with a "/" in it, one in the query, one percent-encoded.
SECRET_URLS = [
    ("postgresql+psycopg://u:s3cret@127.0.0.1:1/db", "s3cret"),
    ("postgresql+nosuchdriver://u:s3cret@127.0.0.1:1/db", "s3cret"),
    ("nosuchdialect://u:s3cret@127.0.0.1:1/db", "s3cret"),
    ("postgresql+psycopg://u:s3cret@127.0.0.1:notaport/db", "s3cret"),
    ("postgresql+psycopg://u:s3/cr3t@127.0.0.1:1/db", "s3/cr3t"),
    ("postgresql+psycopg://u@127.0.0.1:1/db?password=s3cret", "s3cret"),
    ("postgresql+psycopg://u:p%40s3cret@127.0.0.1:1/db", "s3cret"),  # percent-encoded "@"
]


def _exception_text(error: BaseException) -> str:
    return f"{error}\n{error!r}\n" + "".join(traceback.format_exception(error))


@pytest.mark.parametrize(("url", "secret"), SECRET_URLS)
def test_registry_errors_never_show_the_password(url, secret, tmp_path, monkeypatch):
    attempts: list[Callable[[], Any]] = [
        lambda: jaxport.Registry(url, blobs=tmp_path / "blobs"),
        lambda: jaxport.Registry(url),
        lambda: jaxport.registry._internal.schema_revision(url),
        lambda: jaxport.registry._internal.upgrade_database(url),
    ]
    for attempt in attempts:
        with pytest.raises(jaxport.JaxportError) as info:
            attempt()
        assert secret not in _exception_text(info.value)
    monkeypatch.setenv("JAXPORT_REGISTRY", url)
    with pytest.raises(jaxport.JaxportError) as info:
        jaxport.Registry(blobs=tmp_path / "blobs")
    assert secret not in _exception_text(info.value)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("jaxport")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "secret", "commands"),
    [
        (*SECRET_URLS[0], "all"),
        (*SECRET_URLS[1], "all"),
        (*SECRET_URLS[4], "help"),  # the same errors as SECRET_URLS[0]; --help masks by regex
        (*SECRET_URLS[5], "help"),
    ],
)
def test_cli_never_shows_the_password(url, secret, commands, tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    base["JAXPORT_HOME"] = str(tmp_path / "home")
    with_env = {**base, "JAXPORT_REGISTRY": url, "JAXPORT_BLOBS": str(tmp_path / "blobs")}
    runs = [(["--help"], with_env, 0), (["ls"], with_env, 1)]
    if commands == "all":
        runs += [
            (["--registry", url, "--blobs", str(tmp_path / "b"), "ls"], base, 1),
            (["--registry", url, "--blobs", str(tmp_path / "b"), "ls", "--json"], base, 1),
            (["--registry", url, "db", "current"], base, 1),
            (["--registry", url, "db", "current", "--json"], base, 1),
            (["db", "current"], with_env, 1),
        ]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        done_runs = list(pool.map(lambda run: _cli(run[0], run[1]), runs))
    for (args, _, code), done in zip(runs, done_runs, strict=True):
        shown = shlex.join(args)
        assert done.returncode == code, f"{shown}: {done.stderr}"
        assert secret not in done.stdout + done.stderr, shown
        assert "Traceback" not in done.stderr, shown


@pytest.fixture
def secret_db_url(db_url):
    """``db_url`` with a password on PostgreSQL (the test server trusts local connections,
    so it connects); SQLite URLs have none."""
    if db_url.startswith("postgresql"):
        return db_url.replace("://postgres@", "://postgres:s3cret@", 1)
    return db_url


@pytest.mark.slow
def test_audit_worker_gets_no_password(secret_db_url, tmp_path, monkeypatch, archive):
    """The worker's environment and command line, recorded by a wrapper interpreter, hold
    neither the registry URL nor a password, whether given to ``Registry`` or set in the
    environment (``JAXPORT_REGISTRY``, ``PGPASSWORD``)."""
    record = tmp_path / "worker-saw.txt"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'{{ printf \'%s\\n\' "$0" "$@"; env; }} > {shlex.quote(str(record))}\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("JAXPORT_REGISTRY", "postgresql+psycopg://u:s3cret@127.0.0.1:1/db")
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    with jaxport.Registry(secret_db_url, blobs=tmp_path / "blobs") as reg:
        assert "s3cret" not in repr(reg) and "s3cret" not in str(reg)
        reg.push(archive, "f")
        findings = reg.audit("f", python=wrapper, store=False)
        with pytest.raises(jaxport.NotFoundError) as info:
            reg.get("nothing-here")
    assert [f.status for f in findings] == ["ok"]
    seen = record.read_text()
    assert "jaxport.audit._worker" in seen and "PATH=" in seen  # the record is the worker's
    assert "s3cret" not in seen and secret_db_url not in seen
    assert all("s3cret" not in f.reason for f in findings)
    assert "s3cret" not in _exception_text(info.value)
