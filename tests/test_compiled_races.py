"""Compiled sets under second writers, gc, hostile rows and a hostile cache directory (issue 27
§2; ``registry/_compiled_store.py``, ``registry/_compiled_seed.py``), on SQLite and PostgreSQL:
two stores of one key at once give one set and a status each, never a database error; gc
waiting for a store in flight keeps its blobs; a row or a blob store that lies (nested options,
a manifest or bundle naming a huge blob) is a fallback with a reason, read no further than the
limits; a cache directory others may write into, or a name in it that is not a regular file
(a directory, a FIFO, a symlink), never makes seeding raise, hang, or write through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import threading

import pytest
import sqlalchemy as sa
import test_compiled
from test_compiled import _function, _policy

from jaxport.registry import _compiled_make, _compiled_seed, _db
from jaxport.registry._compiled_types import CompiledFile

# test_compiled's fixtures: its signing keys, a verdict cache per test, one compile per archive.
keys = test_compiled.keys
_own_cache = test_compiled._own_cache
_one_compile = test_compiled._one_compile
compiled = test_compiled.compiled


def _bytes_per_thread(monkeypatch):
    """Each thread's compile makes other bytes (as two real compiles do: jax's cache files
    hold the compile time), so that two stores write different blobs."""
    cached = _compiled_make.compile_archive

    def compile_archive(path, variant, allowed, timeout):
        out = []
        for made, files in cached(path, variant, allowed, timeout):
            mine = {n: b + threading.current_thread().name.encode() for n, b in files.items()}
            listed = tuple(
                CompiledFile(n, hashlib.sha256(b).hexdigest(), len(b)) for n, b in mine.items()
            )
            out.append((dataclasses.replace(made, files=listed), mine))
        return out

    monkeypatch.setattr(_compiled_make, "compile_archive", compile_archive)


def _together(monkeypatch):
    """Two stores meet after their shared blob lock, before reading the key's row: both would
    find none (a barrier that a store queued behind the other's transaction, as on SQLite,
    leaves after 2 s)."""
    barrier = threading.Barrier(2, timeout=2)
    real = _db.blob_lock

    def blob_lock(conn, *, exclusive):
        real(conn, exclusive=exclusive)
        if not exclusive:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()

    monkeypatch.setattr(_db, "blob_lock", blob_lock)


@pytest.mark.parametrize("signers", [("trusted", "trusted"), ("trusted", "other")])
def test_two_stores_of_one_key_at_once_store_one_set_and_say_so(
    registry, keys, db_url, tmp_path, monkeypatch, signers
):
    """The same signer: one "stored", the other "already stored"; two signers: both
    "stored", the last replacing the first, its row, manifest, bundle and files one set."""
    import jaxport

    registry.push(_function(), "f")
    _bytes_per_thread(monkeypatch)
    _together(monkeypatch)
    said: dict[int, object] = {}

    def compile_as(i):
        with jaxport.Registry(db_url, blobs=tmp_path / "blobs") as reg:
            try:
                said[i] = [s.status for s in reg.compile("f", private_key=keys[signers[i]][0])]
            except Exception as e:  # the test says which
                said[i] = e

    threads = [threading.Thread(target=compile_as, args=(i,), name=f"t{i}") for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(v, list) for v in said.values()), said  # no database error
    expected = ["already stored", "stored"] if signers[0] == signers[1] else ["stored"] * 2
    assert sorted(s for v in said.values() for s in v) == expected, said
    (stored,) = registry.compiled_sets("f")
    winner = next(k for k in set(signers) if _policy(keys, k).trusted[0].fingerprint
                  == stored.signer)  # fmt: skip
    written = tmp_path / "jax-cache"
    written.mkdir()
    monkeypatch.setattr(_compiled_seed, "cache_dir", lambda: (str(written), None))
    use = registry.use_compiled("f", policy=_policy(keys, winner))
    assert use.used and use.files == 1, use.reason
    (f,) = stored.files
    assert hashlib.sha256((written / f.name).read_bytes()).hexdigest() == f.sha256


def test_gc_waits_for_a_store_in_flight_and_keeps_its_blobs(registry, keys, monkeypatch, tmp_path):
    """gc started after a store wrote its blobs and before it committed its rows keeps them
    (the store holds the blob lock: gc's exclusive lock waits for its transaction)."""
    from jaxport.registry._compiled_store import CompiledStore

    registry.push(_function(), "f")
    real = CompiledStore._put
    collected: list[object] = []
    gc = threading.Thread(target=lambda: collected.append(registry.gc(min_age=0)))

    def put(self, conn, blobs, now):
        real(self, conn, blobs, now)
        gc.start()
        gc.join(1.0)  # gc runs now, or waits for this transaction

    monkeypatch.setattr(CompiledStore, "_put", put)
    registry.compile("f", private_key=keys["trusted"][0])
    gc.join()
    assert collected and not collected[0].digests
    written = tmp_path / "jax-cache"
    written.mkdir()
    monkeypatch.setattr(_compiled_seed, "cache_dir", lambda: (str(written), None))
    assert registry.use_compiled("f", policy=_policy(keys)).used


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    """jax's cache directory for seeding: a fresh one (what ``cache_dir`` would answer)."""
    written = tmp_path / "jax-cache"
    written.mkdir()
    monkeypatch.setattr(_compiled_seed, "cache_dir", lambda: (str(written), None))
    return written


def _unblock_after(fifo, done, unblocked):
    """A reader stuck opening ``fifo`` (no writer) is let go after 10 s, and says so."""
    if not done.wait(10):
        unblocked.append(True)
        with open(fifo, "wb"):
            pass


@pytest.mark.parametrize("planted", ["directory", "fifo", "symlink"])
def test_what_is_planted_at_a_files_name_is_never_followed_and_never_raises(
    registry, keys, compiled, cache_dir, tmp_path, planted
):
    """A directory at the name: a fallback saying the directory refused a file; a FIFO (which
    an open for reading waits on forever) or a symlink (to a file of the verified bytes, that
    someone else may change later) is replaced by a regular file of the verified bytes."""
    (f,) = registry.compiled_sets("f")[0].files
    target = cache_dir / f.name
    done, unblocked = threading.Event(), []
    if planted == "directory":
        target.mkdir()
    elif planted == "fifo":
        os.mkfifo(target)
        threading.Thread(target=_unblock_after, args=(target, done, unblocked)).start()
    else:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(registry._compiled_store().read(f.sha256))
        target.symlink_to(elsewhere)
    try:
        use = registry.use_compiled("f", policy=_policy(keys))
    finally:
        done.set()
    assert not unblocked, "seeding opened a FIFO and waited for a writer"
    if planted == "directory":
        assert not use.used and "jax's cache directory refused a file" in use.reason
        return
    assert use.used and use.files == 1, use.reason
    assert target.is_file() and not target.is_symlink()
    assert hashlib.sha256(target.read_bytes()).hexdigest() == f.sha256


def test_a_set_naming_a_file_of_another_methods_set_with_other_bytes_is_not_used(
    registry, keys, cache_dir, monkeypatch
):
    """Two methods' signed sets name one file with other bytes: the first is written, the
    second skipped with a reason (it would overwrite a verified file of the first)."""
    from test_compiled import _model

    cached = _compiled_make.compile_archive

    def one_name(path, variant, allowed, timeout):
        out = []
        for made, files in cached(path, variant, allowed, timeout):
            ((_, data),) = files.items()
            listed = (CompiledFile("same-cache", hashlib.sha256(data).hexdigest(), len(data)),)
            out.append((dataclasses.replace(made, files=listed), {"same-cache": data}))
        return out

    monkeypatch.setattr(_compiled_make, "compile_archive", one_name)
    registry.push(_model(), "m")
    registry.compile("m", private_key=keys["trusted"][0])
    use = registry.use_compiled("m", policy=_policy(keys))
    assert use.used and use.methods == ("hidden",) and use.files == 1
    assert "is hidden's too, with other bytes" in use.skipped["logits"]
    (hidden,) = [s for s in registry.compiled_sets("m") if s.method == "hidden"]
    assert (cache_dir / "same-cache").read_bytes() == registry._compiled_store().read(
        hidden.files[0].sha256
    )


def test_a_configured_cache_directory_every_user_may_write_is_refused(monkeypatch, tmp_path):
    """A ``jax_compilation_cache_dir`` of mode 0o777 (or /tmp's 0o1777): nothing is written,
    the reason says why; the same directory 0o755 is used."""
    from jaxport.export import _internal

    shared = tmp_path / "shared"
    shared.mkdir()
    options = {"jax_enable_compilation_cache": True, "jax_compilation_cache_dir": str(shared)}
    monkeypatch.setattr(_compiled_seed, "jax_option", options.get)
    monkeypatch.setattr(_internal, "compilation_cache", lambda: None)  # this jax's own state
    for mode in (0o777, 0o1777):
        shared.chmod(mode)
        where, why = _compiled_seed.cache_dir()
        assert where is None and "writable by every user" in why
    shared.chmod(0o755)
    assert _compiled_seed.cache_dir() == (str(shared), None)


def _hostile_blob(registry, data, column):
    """``data`` stored as a blob (with its ``blobs`` row) and named by every set's ``column``."""
    digest = hashlib.sha256(data).hexdigest()
    registry.blobs.put(digest, data)
    with registry._backend.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO blobs (digest, size, created_at) VALUES (:d, :s, 0)"),
                     {"d": digest, "s": len(data)})  # fmt: skip
        conn.execute(sa.text(f"UPDATE compiled SET {column} = :d"), {"d": digest})


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [
        ("nested options", "compile options"),
        ("huge manifest", "over 4,194,304 bytes"),
        ("huge bundle", "over 1,048,576 bytes"),
        ("huge file", "bytes, the most it may have here"),
        ("row file names", None),
    ],
)
def test_a_hostile_row_or_blob_is_a_fallback_read_no_further_than_its_limit(
    registry, keys, compiled, cache_dir, hostile, reason
):
    """Someone with write access to the database or the blob store: a row's options nested
    100,000 deep (a RecursionError out of the pull before), a manifest or bundle named by the
    row over its limit, a file blob longer than its signed size (read whole before, then
    refused), a row's file names with "../" (never used: the signed manifest's names are)."""
    (f,) = registry.compiled_sets("f")[0].files
    if hostile == "nested options":
        with registry._backend.engine.begin() as conn:
            nested = "[" * 100_000 + "]" * 100_000
            conn.execute(sa.text("UPDATE compiled SET options = :o"), {"o": nested})
    elif hostile == "huge manifest":
        _hostile_blob(registry, b" " * (5 << 20), "manifest_digest")
    elif hostile == "huge bundle":
        _hostile_blob(registry, b" " * (2 << 20), "bundle_digest")
    elif hostile == "huge file":
        registry.blobs.put(f.sha256, b"\0" * (f.size + (1 << 20)), replace=True)
    else:
        with registry._backend.engine.begin() as conn:
            conn.execute(sa.text("UPDATE compiled_files SET name = '../escape'"))
    use = registry.use_compiled("f", policy=_policy(keys))
    if reason is None:
        assert use.used and [p.name for p in cache_dir.iterdir()] == [f.name]
        assert not (cache_dir.parent / "escape").exists()
        return
    assert not use.used and reason in use.reason, use.reason
    assert not list(cache_dir.iterdir())


def test_a_server_is_asked_for_no_more_than_each_blobs_limit(monkeypatch):
    """Through a server the same limits bound each download (``download``'s ``max_size``
    refuses a longer body unread): a lying server's huge manifest, bundle or file is not read."""
    import jaxport
    from jaxport.registry import _compiled_http

    asked = []
    monkeypatch.setattr(_compiled_http, "download", lambda http, path, d, n: asked.append(n))
    reg = jaxport.Registry("http://127.0.0.1:9", token="jxp_x")
    store = _compiled_http.HttpCompiledStore(reg._backend._http, "f", reg._backend.lacks)
    store._archive_of["a" * 64] = "b" * 64
    store.read("a" * 64, 123)
    assert asked == [123]


@pytest.mark.parametrize(
    "body",
    [b'{"x": 1}', b'["a"]', b'[{"set": {}}]', b"[" * 100_000 + b"]" * 100_000, b"<html>"],
    ids=["object", "strings", "no bundle", "nested", "not json"],
)
def test_a_lying_servers_list_of_sets_is_a_fallback_with_a_reason(
    registry, keys, monkeypatch, body
):
    """A server answering the list of an archive's sets with anything but sets: the pull goes
    on without them (``CorruptArchiveError``); a TypeError or RecursionError escaped the pull
    before."""
    import httpx

    import jaxport
    from jaxport.registry._compiled_http import HttpCompiledStore

    registry.push(_function(), "f")
    remote = jaxport.Registry("http://127.0.0.1:9", token="jxp_x")
    http = remote._backend._http
    answer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    monkeypatch.setattr(http, "_client", httpx.Client(base_url=http.base, transport=answer))
    store = HttpCompiledStore(http, "f", remote._backend.lacks)
    monkeypatch.setattr(registry, "_compiled_store", lambda name=None: store)
    with pytest.warns(jaxport.CompiledFallbackWarning, match="CorruptArchiveError"):
        registry.pull("f", use_compiled=_policy(keys))
    assert "CorruptArchiveError" in registry.last_compiled_use.reason
