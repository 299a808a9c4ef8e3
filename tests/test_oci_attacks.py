"""The OCI client, bundles and mirror against a hostile registry (``tests/_oci_fake.py`` made
hostile through its ``overrides``) or a hostile tar: each attack is a typed ``JaxportError``
(or is harmless), in bounded memory and time, storing nothing and naming no credential.
The friendlier hostile answers (wrong digests, oversized manifests, redirect loops) are in
``test_oci_client.py``."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import time
import tracemalloc
import zlib

import pytest
from _oci_fake import fake_registry
from test_oci_client import MANIFEST, SECRET, _no_credentials  # noqa: F401  (autouse)

from jaxport import IntegrityError, OciError
from jaxport.registry import _oci_auth, _oci_client, _oci_pace
from jaxport.registry._oci_client import OciRepository
from jaxport.registry._oci_layout import open_bundle


def _login(monkeypatch, user="u", password=SECRET):
    monkeypatch.setenv("JAXPORT_OCI_USERNAME", user)
    monkeypatch.setenv("JAXPORT_OCI_PASSWORD", password)


# -- deeply nested JSON -------------------------------------------------------------------

_NESTED = b"[" * 60_000 + b"]" * 60_000


@pytest.mark.parametrize(
    ("route", "answer", "call"),
    [
        (("GET", "/v2/r/manifests/"), (200, {"Content-Type": MANIFEST}, _NESTED), "manifest"),
        (("GET", "/v2/r/manifests/"), (400, {}, _NESTED[:60_000]), "manifest"),
        (("GET", "/v2/r/tags/list"), (200, {}, _NESTED), "tags"),
    ],
)
def test_deeply_nested_json_is_an_oci_error(route, answer, call):
    """A JSON answer nested deeper than Python's recursion limit: an ``OciError``, not a
    ``RecursionError``."""
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        server.overrides[route] = lambda h: answer
        with pytest.raises(OciError):
            repo.fetch_manifest("v1") if call == "manifest" else repo.tags()


def test_deeply_nested_token_answer_and_docker_config(monkeypatch, tmp_path):
    with fake_registry(auth="bearer") as server:
        _login(monkeypatch)
        server.overrides[("GET", "/token")] = lambda h: (200, {}, _NESTED[:60_000])
        with pytest.raises(OciError, match="no token"):
            OciRepository(f"oci://{server.host}/r").tags()
    monkeypatch.delenv("JAXPORT_OCI_USERNAME")
    monkeypatch.delenv("JAXPORT_OCI_PASSWORD")
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    config.write_bytes(_NESTED)
    with pytest.raises(OciError, match="not valid JSON"):
        OciRepository("oci://127.0.0.1:1/r")


# -- Content-Encoding bombs -----------------------------------------------------------------


def _gzip_bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros, gzipped (about 1,000 to 1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(mib)) + packer.flush()


@pytest.mark.parametrize("what", ["manifest", "tags", "error", "token", "blob"])
def test_encoded_answers_are_not_decoded(monkeypatch, what):
    """An answer gzip-encoded although jaxport asks for ``identity``: a JSON answer is an
    ``OciError``, a blob's bytes are hashed as sent; nothing is decompressed (256 MiB of
    zeros in 256 KiB of gzip: httpx decoded each read whole, before any limit)."""
    bomb = _gzip_bomb(256)
    gz = {"Content-Encoding": "gzip", "Content-Length": str(len(bomb))}
    with fake_registry(auth="bearer" if what == "token" else None) as server:
        repo = OciRepository(f"oci://{server.host}/r")
        route = {
            "manifest": ("GET", "/v2/r/manifests/"),
            "error": ("GET", "/v2/r/manifests/"),
            "tags": ("GET", "/v2/r/tags/list"),
            "token": ("GET", "/token"),
            "blob": ("GET", "/v2/r/blobs/"),
        }[what]
        status = 400 if what == "error" else 200
        asked: list[str | None] = []
        server.overrides[route] = lambda h: (
            asked.append(h.headers.get("Accept-Encoding")),
            (status, {"Content-Type": MANIFEST, **gz}, bomb),
        )[1]
        if what == "token":
            _login(monkeypatch)
            repo = OciRepository(f"oci://{server.host}/r")
        tracemalloc.start()
        try:
            with pytest.raises((OciError, IntegrityError)) as e:
                if what in ("manifest", "error"):
                    repo.fetch_manifest("v1")
                elif what == "blob":
                    b"".join(repo.fetch_blob("sha256:" + "0" * 64, 256 << 20))
                else:
                    repo.tags()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 32 << 20, peak
        if what == "blob":
            assert isinstance(e.value, IntegrityError)  # the raw bytes: not the size asked
        elif what != "error":
            assert "encoded" in str(e.value)
        assert asked and set(asked) == {"identity"}


# -- tag list pagination --------------------------------------------------------------------


def test_a_tag_list_whose_pages_loop_is_refused_at_once():
    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        link = {"Link": '</v2/r/tags/list?n=2&last=a>; rel="next"'}
        server.overrides[("GET", "/v2/r/tags/list")] = lambda h: (200, link, b'{"tags":["a"]}')
        with pytest.raises(OciError, match="loop"):
            repo.tags()
        assert len([p for _, p, _ in server.seen if "/tags/" in p]) == 2


def test_a_tag_list_of_endless_distinct_pages_is_bounded(monkeypatch):
    """Each page links to a new one: stopped at ``MAX_TAGS`` tags (memory), not after
    ``TAG_PAGES`` pages of up to 4 MiB each."""
    monkeypatch.setattr(_oci_client, "MAX_TAGS", 50)
    pages = iter(range(10**9))

    def page(h):
        n = next(pages)
        body = json.dumps({"tags": [f"t{n}-{i}" for i in range(10)]}).encode()
        return 200, {"Link": f'</v2/r/tags/list?last=t{n}>; rel="next"'}, body

    with fake_registry() as server:
        repo = OciRepository(f"oci://{server.host}/r")
        server.overrides[("GET", "/v2/r/tags/list")] = page
        with pytest.raises(OciError, match="more than 50 tags"):
            repo.tags()
        assert next(pages) == 6


# -- slow drip ------------------------------------------------------------------------------


def _drip(body: bytes, every: float, headers: dict[str, str]):
    """An answer that sends ``body`` one byte every ``every`` seconds (until the client
    hangs up)."""

    def answer(h):
        h.send_response(200)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            h.send_header(key, value)
        h.end_headers()
        try:
            for byte in body:
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
                time.sleep(every)
        except OSError:
            pass
        h.close_connection = True

    return answer


@pytest.mark.parametrize("what", ["manifest", "blob", "token"])
def test_a_slow_drip_is_broken_off(monkeypatch, what):
    """A byte every 0.05 s never trips httpx's timeout (one read of the socket): a JSON
    answer must come whole within the timeout (1 s here), a blob at 1 KiB/s or faster over
    each window of it. Without that, these 600-byte answers took 30 s."""
    body = json.dumps({"schemaVersion": 2, "pad": "x" * 560}).encode()
    blob = bytes(600)
    with fake_registry(auth="bearer" if what == "token" else None) as server:
        if what == "token":
            _login(monkeypatch)
            server.overrides[("GET", "/token")] = _drip(body, 0.05, {})
        elif what == "manifest":
            server.overrides[("GET", "/v2/r/manifests/")] = _drip(
                body, 0.05, {"Content-Type": MANIFEST}
            )
        else:
            server.overrides[("GET", "/v2/r/blobs/")] = _drip(blob, 0.05, {})
        repo = OciRepository(f"oci://{server.host}/r", timeout=1.0)
        with pytest.raises((OciError, IntegrityError), match="ReadTimeout"):
            if what == "blob":
                b"".join(repo.fetch_blob(_oci_client.sha256_digest(blob), len(blob)))
            elif what == "manifest":
                repo.fetch_manifest("v1")
            else:
                repo.tags()


def test_a_slow_reader_is_not_a_slow_registry(monkeypatch):
    """The time between two chunks that the caller spends (writing them elsewhere) is not
    counted against the registry (here asked for 100 MiB/s, which loopback gives)."""
    monkeypatch.setattr(_oci_pace, "MIN_RATE", 100 << 20)
    blob = os.urandom(3 << 20)
    with fake_registry() as server:
        server.blobs[_oci_client.sha256_digest(blob)] = blob
        repo = OciRepository(f"oci://{server.host}/r", timeout=0.2)
        got = []
        for chunk in repo.fetch_blob(_oci_client.sha256_digest(blob), len(blob)):
            got.append(chunk)
            time.sleep(0.15)
        assert b"".join(got) == blob


# -- credentials and redirects --------------------------------------------------------------


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_credentials_stay_with_the_registrys_origin(monkeypatch, auth):
    """A blob read redirected to another origin (another port is one) goes there without the
    ``Authorization`` header; one redirected within the registry's origin keeps it."""
    blob = os.urandom(5000)
    digest = _oci_client.sha256_digest(blob)
    with fake_registry(auth=auth, password=SECRET) as server, fake_registry() as other:
        _login(monkeypatch)
        repo = OciRepository(f"oci://{server.host}/r")
        server.blobs[digest] = blob
        other.blobs[digest] = blob
        moved = f"/v2/r/blobs/{digest}"
        server.overrides[("GET", "/v2/r/blobs/sha256:")] = lambda h: (
            307,
            {"Location": "/v2/r/blobs/moved/" + digest},
            b"",
        )
        server.overrides[("GET", "/v2/r/blobs/moved/")] = lambda h: (
            307,
            {"Location": f"http://{other.host}{moved}"},
            b"",
        )
        assert repo.tags() == []  # logged in
        assert b"".join(repo.fetch_blob(digest, len(blob))) == blob
        sent = [a for _, p, a in server.seen if "/blobs/moved/" in p]
        assert sent and sent[-1] is not None  # the same origin: the credentials
        assert [a for _, _, a in other.seen] == [None]
        assert all(SECRET not in (a or "") for _, _, a in other.seen)


def _tls_registry(server, tmp_path, monkeypatch):
    """``server`` spoken to over https, its certificate trusted by the client."""
    import ssl

    from test_oci_client import _certificate

    from jaxport.registry._oci_url import OciUrl

    cert_file, key_file = _certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    trusted = ssl.create_default_context(cafile=cert_file)
    monkeypatch.setattr(_oci_client, "tls_context", lambda: trusted)
    monkeypatch.setattr(_oci_auth, "tls_context", lambda: trusted)
    return OciUrl(server.host, "r", None, None, "https")


def test_nothing_goes_plain_from_an_https_registry(monkeypatch, tmp_path):
    """From a registry spoken to over https, neither a blob redirect nor a token realm may
    be plain http, not even on this machine (the realm gets the password as Basic)."""
    blob = os.urandom(5000)
    digest = _oci_client.sha256_digest(blob)
    with fake_registry(auth="basic", password=SECRET) as server, fake_registry() as other:
        _login(monkeypatch)
        url = _tls_registry(server, tmp_path, monkeypatch)
        other.blobs[digest] = blob
        server.overrides[("GET", "/v2/r/blobs/")] = lambda h: (
            307,
            {"Location": f"http://{other.host}/v2/r/blobs/{digest}"},
            b"",
        )
        with OciRepository(url) as repo, pytest.raises(OciError, match="plain http"):
            repo.fetch_blob(digest, len(blob))
        server.overrides[("GET", "/v2/r/tags/")] = lambda h: (
            401,
            {"WWW-Authenticate": f'Bearer realm="http://{other.host}/token"'},
            b"",
        )
        with OciRepository(url) as repo, pytest.raises(OciError, match="not https"):
            repo.tags()
        assert other.seen == []


# -- bundles --------------------------------------------------------------------------------


def _sparse_bundle(real_size: int) -> bytes:
    """A tar of ``oci-layout`` and one GNU sparse member (old format) whose ``real_size``
    bytes are a hole and one stored block: about 3 KB, whatever ``real_size`` is."""
    layout = b'{"imageLayoutVersion":"1.0.0"}'
    head = tarfile.TarInfo("oci-layout")
    head.size = len(layout)
    out = head.tobuf(tarfile.GNU_FORMAT) + layout + bytes(512 - len(layout))
    info = tarfile.TarInfo("blobs/sha256/" + hashlib.sha256(bytes(real_size)).hexdigest())
    info.size = 512
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT)[:512])
    header[156:157] = tarfile.GNUTYPE_SPARSE
    header[386:398] = b"%011o\0" % (real_size - 512)  # one region: its offset,
    header[398:410] = b"%011o\0" % 512  # its stored bytes,
    header[483:495] = b"%011o\0" % real_size  # the file's real size
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return out + bytes(header) + bytes(512) + bytes(1024)


def test_a_sparse_member_is_refused_before_it_is_written(tmp_path):
    """A 3 KB bundle whose sparse member holds 64 MiB (or up to the 1 TiB limit) of holes:
    refused as not a regular file, nothing written (tarfile expanded the holes on disk)."""
    bundle = tmp_path / "sparse.tar"
    bundle.write_bytes(_sparse_bundle(64 << 20))
    with tarfile.open(bundle) as tar:
        assert [m.issparse() for m in tar] == [False, True]
    with pytest.raises(OciError, match="not a regular file"):
        open_bundle(bundle, tmp_path / "out")
    assert list((tmp_path / "out" / "blobs" / "sha256").iterdir()) == []


def _peak_reading(tmp_path, members: int) -> int:
    """tracemalloc's peak while ``open_bundle`` refuses a tar of ``members`` one-block blobs
    that nothing refers to."""
    bundle = tmp_path / f"many-{members}.tar"
    with bundle.open("wb") as f:
        for i in range(members):
            data = str(i).encode()
            info = tarfile.TarInfo("blobs/sha256/" + hashlib.sha256(data).hexdigest())
            info.size = len(data)
            f.write(info.tobuf(tarfile.USTAR_FORMAT) + data + bytes(512 - len(data)))
        f.write(bytes(1024))
    tracemalloc.start()
    try:
        with pytest.raises(OciError, match="no oci-layout"):
            open_bundle(bundle, tmp_path / f"out-{members}")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_many_members_are_read_in_memory_that_does_not_grow(tmp_path):
    """The memory held while reading a tar does not grow with its members (tarfile's list of
    them held ~560 bytes each: 20,000 members 13 MB, a million 560 MB)."""
    few, many = _peak_reading(tmp_path, 2_000), _peak_reading(tmp_path, 20_000)
    assert many < few + (1 << 20), (few, many)


# -- referrers --------------------------------------------------------------------------------


class _ListingTarget:
    """An ``OciTarget`` whose referrers list is ``listed``; every manifest it serves refers
    to another subject (ignored by readers), and is counted."""

    def __init__(self, listed):
        self.listed, self.fetched = listed, 0
        subject = {"mediaType": MANIFEST, "digest": "sha256:" + "e" * 64, "size": 2}
        empty = {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2}
        empty["digest"] = "sha256:" + hashlib.sha256(b"{}").hexdigest()
        self.body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST,
                "config": empty,
                "layers": [empty],
                "subject": subject,
            }
        ).encode()

    def referrers(self, digest, artifact_type=None):
        return self.listed

    def fetch_manifest(self, reference):
        self.fetched += 1
        return MANIFEST, self.body


def _version(target):
    from types import SimpleNamespace

    variant = SimpleNamespace(manifest=SimpleNamespace(digest="sha256:" + "f" * 64), digest="d")
    return SimpleNamespace(variants=[variant])


def test_a_referrers_list_that_repeats_one_digest_is_read_once():
    from jaxport.registry._oci_mapping import read_attached

    target = _ListingTarget([])
    digest = _oci_client.sha256_digest(target.body)
    target.listed = [{"mediaType": MANIFEST, "digest": digest, "size": 1}] * 40_000
    assert read_attached(target, _version(target)).signatures == []
    assert target.fetched == 1


def test_a_referrers_list_over_the_limit_is_refused_before_any_read(monkeypatch):
    from jaxport.registry import _oci_referrers
    from jaxport.registry._oci_mapping import read_attached

    monkeypatch.setattr(_oci_referrers, "MAX_REFERRERS", 100)
    listed = [{"mediaType": MANIFEST, "digest": f"sha256:{i:064x}", "size": 1} for i in range(101)]
    target = _ListingTarget(listed)
    with pytest.raises(OciError, match="more than 100 referrers"):
        read_attached(target, _version(target))
    assert target.fetched == 0


# -- mirror ---------------------------------------------------------------------------------

INDEX = "application/vnd.oci.image.index.v1+json"


class _MemoryTarget:
    """An ``OciTarget`` in memory that counts the manifests read of it."""

    def __init__(self):
        self.blobs, self.manifests, self.tagged, self.reads = {}, {}, {}, 0

    def has_blob(self, digest):
        return digest in self.blobs

    def push_blob(self, digest, size, chunks):
        self.blobs[digest] = b"".join(chunks)

    def fetch_blob(self, digest, size):
        return iter([self.blobs[digest]])

    def push_manifest(self, reference, media_type, body):
        digest = _oci_client.sha256_digest(body)
        self.manifests[digest] = (media_type, body)
        if reference:
            self.tagged[reference] = digest
        return digest

    def fetch_manifest(self, reference):
        from jaxport import NotFoundError

        self.reads += 1
        digest = self.tagged.get(reference, reference)
        if digest not in self.manifests:
            raise NotFoundError(reference)
        return self.manifests[digest]

    def referrers(self, digest, artifact_type=None):
        return []

    def tags(self):
        return sorted(self.tagged)


def test_an_index_that_lists_one_child_many_times_is_copied_once_per_digest():
    """Three levels of indexes, each listing the next one 40 times: 64,000 paths to one
    manifest. Each digest is copied (and read) once per mirror, not once per path."""
    from jaxport.registry import CopyReport
    from jaxport.registry._oci_copy import copy_repository

    src, dst = _MemoryTarget(), _MemoryTarget()
    config = b"{}"
    src.blobs[_oci_client.sha256_digest(config)] = config
    empty = {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2}
    empty["digest"] = _oci_client.sha256_digest(config)
    body = json.dumps(
        {"schemaVersion": 2, "mediaType": MANIFEST, "config": empty, "layers": [empty]}
    ).encode()
    media_type = MANIFEST
    for _ in range(3):
        digest = src.push_manifest(None, media_type, body)
        child = {"mediaType": media_type, "digest": digest, "size": len(body)}
        body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [child] * 40})
        body, media_type = body.encode(), INDEX
    src.push_manifest("v1", INDEX, body)
    copy_repository(src, dst, "bomb", CopyReport())
    assert dst.manifests == src.manifests and dst.tagged == src.tagged
    assert src.reads < 10, src.reads


def test_a_version_index_that_lists_a_variant_twice_is_refused_before_reading_it():
    """Each variant of a version is assembled into an archive: one listed 25,000 times in a
    4 MiB index was as many reads and archives written before the push refused them."""
    from jaxport.registry._oci_mapping import read_version
    from jaxport.registry._oci_media import ANNOTATION, VERSION

    target = _MemoryTarget()
    variant = {"mediaType": MANIFEST, "digest": "sha256:" + "a" * 64, "size": 10}
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "artifactType": VERSION,
        "annotations": {ANNOTATION["name"]: "mlp"},
        "manifests": [variant, variant],
    }
    target.push_manifest("v1", INDEX, json.dumps(index).encode())
    with pytest.raises(OciError, match="twice"):
        read_version(target, "v1")
    assert target.reads == 1


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A populated SQLite registry (``_oci_versions.populate``) and its URL and blobs."""
    from _oci_versions import populate

    from jaxport import Registry

    root = tmp_path_factory.mktemp("killed-source")
    reg = Registry(f"sqlite:///{root / 'src.db'}", blobs=root / "blobs")
    populate(reg, root)
    yield reg, f"sqlite:///{root / 'src.db'}", str(root / "blobs")
    reg.close()


def _killed_mirror(args, kill_on, kill_at):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("_mirror_killed.py")
    env = {**os.environ, "KILL_ON": kill_on, "KILL_AT": str(kill_at)}
    return subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, timeout=300
    )


def _whole_blobs(root):
    """Every blob in an image layout's blobs/sha256 has its name's digest (a temporary file
    the kill left, ``.tmp-*``, is no blob: nothing reads it)."""
    for path in (root / "blobs" / "sha256").iterdir():
        if not path.name.startswith(".tmp-"):
            assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name, path


ALL = ["fn:1", "mlp:1", "mlp:2"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("to", "kill_on", "kill_at"),
    [
        ("registry", "replace", 1),
        ("registry", "replace", 6),
        ("registry", "replace", 11),
        ("registry", "commit", 4),
        ("registry", "commit", 12),
        ("layout", "replace", 1),
        ("layout", "replace", 25),
        ("layout", "replace", 60),
    ],
)
def test_a_mirror_killed_mid_copy_resumes_whole(source, tmp_path, to, kill_on, kill_at):
    """``jaxport mirror`` killed with SIGKILL as a file is put in place or a transaction
    commits (a mirror to a registry puts 12 to 15 files in place and commits 15 times, one to
    a layout puts 69 files in place): what it left holds whole versions only (no blob missing
    or corrupt, a layout's index reaching only whole blobs); a second run completes it,
    verified, and a third copies nothing."""
    from jaxport import Registry
    from jaxport.registry import mirror
    from jaxport.registry._oci_layout import OciLayout, reachable

    src, url, blobs = source
    if to == "registry":
        dst_url = f"sqlite:///{tmp_path / 'dst.db'}"
        args = [url, dst_url, "--source-blobs", blobs, "--destination-blobs", str(tmp_path / "b")]
    else:
        dst_url = f"oci:{tmp_path / 'layout'}"
        args = [url, dst_url, "--source-blobs", blobs]
    done = _killed_mirror(args, kill_on, kill_at)
    assert done.returncode == -9, done.stdout + done.stderr
    if to == "registry":
        dst = Registry(dst_url, blobs=tmp_path / "b")
        checked = dst.verify()
        assert checked.missing == () and checked.corrupt == (), checked
        for ref in (r for name in dst.names() for r in dst.list(name)):
            assert ref.digests == src.get(str(ref)).digests
    else:
        reachable(OciLayout(tmp_path / "layout"))  # raises on a missing or short blob
        _whole_blobs(tmp_path / "layout")
        dst = Registry(f"sqlite:///{tmp_path / 'back.db'}", blobs=tmp_path / "back")
    assert _killed_mirror(args, "none", 0).returncode == 0
    if to == "layout":
        mirror(dst_url, dst)
    assert dst.verify().missing == ()
    for reference in ALL:
        assert dst.get(reference).digests == src.get(reference).digests
        for digest in src.get(reference).digests:
            assert dst.read_blob(digest) == src.read_blob(digest)
    again = _killed_mirror(args, "none", 0)
    assert b"nothing" in again.stdout.lower() or b"0 version" in again.stdout, again.stdout
    dst.close()


def test_a_durable_layout_makes_each_blob_durable_before_the_index_names_it(monkeypatch, tmp_path):
    """A blob is renamed into place, then its directory fsynced, before ``index.json`` (its
    own rename fsynced too) may name it: otherwise a power cut could keep the new index and
    lose the blob's directory entry (a kill -9 cannot show it: the kernel keeps both)."""
    from jaxport.registry import _oci_layout
    from jaxport.registry._oci_layout import OciLayout

    layout = OciLayout(tmp_path / "layout")
    events = []
    real_write, real_sync = _oci_layout.atomic_write, _oci_layout.sync_directory
    monkeypatch.setattr(
        _oci_layout,
        "atomic_write",
        lambda path, chunks, **kw: (
            events.append(("write", os.path.basename(path)[:10], kw.get("sync_dir", False))),
            real_write(path, chunks, **kw),
        )[1],
    )
    monkeypatch.setattr(
        _oci_layout,
        "sync_directory",
        lambda d: (events.append(("sync", os.path.basename(d))), real_sync(d))[1],
    )
    config = b"{}"
    empty = {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2}
    empty["digest"] = _oci_client.sha256_digest(config)
    repo = layout.repository("mlp")
    repo.push_blob(empty["digest"], 2, [config])
    body = json.dumps(
        {"schemaVersion": 2, "mediaType": MANIFEST, "config": empty, "layers": [empty]}
    ).encode()
    repo.push_manifest("v1", MANIFEST, body)
    syncs = [i for i, e in enumerate(events) if e == ("sync", "sha256")]
    index = events.index(("write", "index.json", True))
    assert len(syncs) == 2 and syncs[-1] < index, events


def test_a_tag_moved_between_listing_and_copying_is_copied_whole_as_read():
    """The source moves ``v1`` after its tags were listed: the copy reads the tag once and
    copies what that read names, whole, tagged with it."""
    from jaxport.registry import CopyReport
    from jaxport.registry._oci_copy import copy_repository

    src, dst = _MemoryTarget(), _MemoryTarget()
    bodies = []
    for text in (b'{"a":1}', b'{"b":2}'):
        digest = _oci_client.sha256_digest(text)
        src.blobs[digest] = text
        layer = {"mediaType": "application/octet-stream", "digest": digest, "size": len(text)}
        doc = {"schemaVersion": 2, "mediaType": MANIFEST, "config": layer, "layers": [layer]}
        bodies.append(json.dumps(doc).encode())
    old, new = (src.push_manifest(None, MANIFEST, b) for b in bodies)
    src.tagged["v1"] = old
    listed = src.tags

    def tags_then_move():
        found = listed()
        src.tagged["v1"] = new
        return found

    src.tags = tags_then_move
    copy_repository(src, dst, "moved", CopyReport())
    assert dst.tagged == {"v1": new}
    assert set(dst.blobs) == {_oci_client.sha256_digest(b'{"b":2}')}
    assert set(dst.manifests) == {new}


def _head_drip(h):
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    try:
        for _ in range(2000):
            h.wfile.write(b"X-A: b\r\n")
            h.wfile.flush()
            time.sleep(0.05)
    except OSError:
        pass
    h.close_connection = True


@pytest.mark.parametrize("at", ["registry", "token realm"])
def test_a_response_head_dripped_is_broken_off(monkeypatch, at):
    """The status line, then a header line every 0.05 s (h11 reads up to 16 KiB of them):
    the connection must bring 1 KiB/s over each window of the timeout (1 s here), so the read
    is broken off, tried again, and a typed error; before, each try read the 2,000 lines for
    100 s (at a byte every 0.9 s, 16 KiB of head take 4 hours a try)."""
    from jaxport import ServerUnavailableError

    with fake_registry(auth="bearer" if at == "token realm" else None) as server:
        if at == "token realm":
            _login(monkeypatch)
            server.overrides[("GET", "/token")] = _head_drip
        else:
            server.overrides[("GET", "/v2/r/manifests/")] = _head_drip
        repo = OciRepository(f"oci://{server.host}/r", timeout=1.0)
        error = OciError if at == "token realm" else ServerUnavailableError
        with pytest.raises(error, match="ReadTimeout"):
            repo.fetch_manifest("v1")


def _tar_with_header_record(kind: bytes, payload: bytes) -> bytes:
    """``oci-layout``'s member preceded by an extended header record of type ``kind`` (pax
    ``x``, GNU long name ``L``) holding ``payload``."""
    head = tarfile.TarInfo("././@LongHeader")
    head.type, head.size = kind, len(payload)
    out = head.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512)
    layout = tarfile.TarInfo("oci-layout")
    return out + layout.tobuf(tarfile.USTAR_FORMAT) + bytes(1024)


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME])
def test_an_oversized_extended_header_is_refused_before_it_is_parsed(tmp_path, kind):
    """tarfile reads an extended header whole into memory, and Python before 3.11.10 /
    3.12.6 parses a pax one in time quadratic in its length (CVE-2024-6232: 8 KB of digits
    57 ms, 1 MB some 15 minutes): a record over 1 KiB (jaxport writes none) is refused
    unread, wherever it is in the tar."""
    for where, raw in {
        "first": _tar_with_header_record(kind, b"1" * 20_000),
        "later": _sparse_bundle(1024)[:1024] + _tar_with_header_record(kind, b"1" * 20_000),
    }.items():
        bundle = tmp_path / f"{where}.tar"
        bundle.write_bytes(raw)
        calls = []
        real = tarfile.TarInfo._proc_pax

        def counted(self, tar, real=real, calls=calls):
            calls.append(self.size)
            return real(self, tar)

        with pytest.MonkeyPatch.context() as m:
            m.setattr(tarfile.TarInfo, "_proc_pax", counted)
            with pytest.raises(OciError, match="tar"):
                open_bundle(bundle, tmp_path / f"out-{where}")
        assert calls == [], where
