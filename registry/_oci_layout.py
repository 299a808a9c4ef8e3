"""An OCI image layout (image-spec v1.1, "image layout") as an ``OciTarget``: a directory with
``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``, and the tar file of one (a
``jaxport bundle``).

One layout holds many jaxport names: ``OciLayout(root).repository(name)`` is the ``OciTarget``
of one name, whose tag ``T`` is the entry of ``index.json`` annotated
``org.opencontainers.image.ref.name: "<name>:<T>"`` (blobs are shared by all). A manifest
pushed with a ``subject`` is added to its subject's referrers index, tagged
``<name>:sha256-<hex>`` (the referrers tag schema, ``_oci_referrers``): a layout has no
referrers API.

A tar is never extracted as such: ``open_bundle`` reads its members one by one and refuses,
before anything is imported, a member that is not ``oci-layout``, ``index.json`` or
``blobs/sha256/<64 hex>`` (no other name, no ``..``, no absolute path), that is not a regular
file (links, devices, sparse files: a 3 KB tar may hold a TiB of holes), whose extended
header record (pax, GNU long name) is over ``MAX_HEADER_RECORD``, that comes twice,
that is over its limit, a blob whose bytes do not have its name's digest, a blob that nothing
in ``index.json`` reaches, and one that something reaches but is absent or of another size.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # Windows: one writer at a time is the caller's affair
    fcntl = None  # type: ignore[assignment]

from jaxport import IntegrityError, InvalidNameError, NotFoundError, OciError
from jaxport._io import atomic_write, sync_directory
from jaxport.registry._oci_media import (
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MAX_MANIFEST_BYTES,
    Descriptor,
    canonical,
    checked_manifest,
    hex_of,
    parse_index,
    parse_json,
    parse_manifest,
)
from jaxport.registry._oci_referrers import fallback_tag, referrer_descriptor, with_referrer

__all__ = [
    "MAX_BUNDLE_BYTES",
    "LayoutRepository",
    "OciLayout",
    "open_bundle",
    "reachable",
    "write_bundle",
]

#: ``org.opencontainers.image.ref.name``: an ``index.json`` entry's tag.
REF_NAME = "org.opencontainers.image.ref.name"
#: ``oci-layout``'s content.
LAYOUT_VERSION = {"imageLayoutVersion": "1.0.0"}
#: The largest bundle ``open_bundle`` reads by default, in bytes (all members together).
MAX_BUNDLE_BYTES = 1 << 40
#: The largest extended header record (pax, GNU long name) a bundle's tar may hold, in bytes:
#: jaxport writes none (its names fit the ustar header); a long path and times fit.
MAX_HEADER_RECORD = 1024
#: Bytes per read or write chunk.
CHUNK = 1 << 20
_BLOB_NAME = re.compile(r"blobs/sha256/([0-9a-f]{64})")
_DIRECTORIES = {"blobs", "blobs/sha256"}


class OciLayout:
    """The image layout at ``root`` (made if absent: an empty ``index.json``); ``durable``:
    each blob fsynced before it is renamed into place and its directory fsynced after, and
    ``index.json``'s rename fsynced, so that after a power cut the index names only blobs
    that are there (False for a temporary layout, such as the one a bundle is written from).

    Raises:
        OciError: ``root`` holds an ``oci-layout`` of another version, or a malformed
            ``index.json``.
    """

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.root = Path(root)
        self.durable = durable
        self._depth = 0
        self.root.joinpath("blobs", "sha256").mkdir(parents=True, exist_ok=True)
        marker = self.root / "oci-layout"
        if not marker.exists():
            atomic_write(marker, [canonical(LAYOUT_VERSION)])
            self._write_index([])
        elif parse_json(marker.read_bytes(), "oci-layout", 1024) != LAYOUT_VERSION:
            raise OciError(f"{marker} is not an image layout of version 1.0.0")
        self.entries()  # a malformed index.json: refused now

    def repository(self, name: str) -> LayoutRepository:
        """The ``OciTarget`` of one jaxport name in this layout.

        Raises:
            InvalidNameError: ``name`` is no registry name.
        """
        from jaxport.registry._names import check_name

        return LayoutRepository(self, check_name(name))

    def names(self) -> list[str]:
        """The names with a tag in ``index.json``, sorted."""
        return sorted({n.partition(":")[0] for n, _ in self.entries()})

    def entries(self) -> list[tuple[str, Descriptor]]:
        """``index.json``'s tagged entries: ``(ref.name, descriptor)``.

        Raises:
            OciError: a malformed ``index.json``, or an entry without a ``name:tag`` ref.name.
        """
        body = self.root.joinpath("index.json").read_bytes()
        out = []
        for d in parse_index(body, "index.json")["manifests"]:
            ref = d.annotations.get(REF_NAME, "")
            if ":" not in ref:
                raise OciError(f"index.json: an entry's {REF_NAME} is not NAME:TAG: {ref!r:.80}")
            out.append((ref, d))
        return out

    def blob_path(self, digest: str) -> Path:
        """Where the blob ``digest`` lies (the digest checked first).

        Raises:
            OciError: a malformed digest.
        """
        return self.root / "blobs" / "sha256" / hex_of(digest)

    def tag(self, ref: str, descriptor: Descriptor) -> None:
        """Points ``ref`` (``name:tag``) at ``descriptor`` in ``index.json``."""
        with self.locked():
            kept = [(r, d) for r, d in self.entries() if r != ref]
            entry = Descriptor(
                descriptor.media_type, descriptor.digest, descriptor.size, {REF_NAME: ref},
                descriptor.artifact_type,
            )  # fmt: skip
            self._write_index([d for _, d in kept] + [entry])

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Holds the layout's write lock (an exclusive ``flock`` of ``oci-layout``, which is
        never replaced) while ``index.json`` is read and written again, so writers in other
        processes do not lose each other's tags; re-entrant in this object."""
        if self._depth or fcntl is None:
            yield
            return
        with self.root.joinpath("oci-layout").open("rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    def _write_index(self, entries: list[Descriptor]) -> None:
        entries = sorted(entries, key=lambda d: d.annotations.get(REF_NAME, ""))
        doc = {"schemaVersion": 2, "mediaType": IMAGE_INDEX,
               "manifests": [d.to_json() for d in entries]}  # fmt: skip
        atomic_write(self.root / "index.json", [canonical(doc)], sync_dir=self.durable)


class LayoutRepository:
    """One name's ``OciTarget`` in an ``OciLayout`` (see the module docstring)."""

    def __init__(self, layout: OciLayout, name: str) -> None:
        self.layout = layout
        self.name = name

    def has_blob(self, digest: str) -> bool:
        return self.layout.blob_path(digest).is_file()

    def push_blob(self, digest: str, size: int, chunks: Iterable[bytes]) -> None:
        path = self.layout.blob_path(digest)
        h = hashlib.sha256()
        n = 0

        def hashed() -> Iterator[bytes]:
            nonlocal n
            for chunk in chunks:
                n += len(chunk)
                h.update(chunk)
                yield chunk

        tmp = path.with_name(f".tmp-{path.name}.{secrets.token_hex(4)}")
        try:
            if self.layout.durable:
                atomic_write(tmp, hashed())
            else:
                with tmp.open("wb") as out:
                    for chunk in hashed():
                        out.write(chunk)
            if n != size or "sha256:" + h.hexdigest() != digest:
                raise IntegrityError(
                    f"a blob sent as {digest} of {size} bytes is sha256:{h.hexdigest()} of "
                    f"{n} bytes: not stored", expected=hex_of(digest), found=h.hexdigest(),
                )  # fmt: skip
            os.replace(tmp, path)
            if self.layout.durable:  # the entry durable before an index may name the blob
                sync_directory(path.parent)
        finally:
            tmp.unlink(missing_ok=True)

    def fetch_blob(self, digest: str, size: int) -> Iterator[bytes]:
        path = self.layout.blob_path(digest)
        try:
            f = _open_blob(path)
        except FileNotFoundError:
            raise NotFoundError(f"the image layout has no blob {digest}") from None
        return _verified_chunks(f, digest, size)

    def push_manifest(self, reference: str | None, media_type: str, body: bytes) -> str:
        if len(body) > MAX_MANIFEST_BYTES:
            raise OciError(f"a manifest of {len(body)} bytes, over {MAX_MANIFEST_BYTES}")
        own = Descriptor.of(media_type, body)
        if not self.has_blob(own.digest):
            self.push_blob(own.digest, own.size, [body])
        if reference is not None:
            self.layout.tag(f"{self.name}:{_check_tag(reference)}", own)
        if media_type == IMAGE_MANIFEST and (found := referrer_descriptor(body)) is not None:
            self._add_referrer(*found)
        return own.digest

    def fetch_manifest(self, reference: str) -> tuple[str, bytes]:
        if reference.startswith("sha256:"):
            path = self.layout.blob_path(reference)
            media_type = None
        else:
            found = dict(self.layout.entries()).get(f"{self.name}:{reference}")
            if found is None:
                raise NotFoundError(f"the image layout has no tag {self.name}:{reference}")
            path, media_type, reference = (
                self.layout.blob_path(found.digest), found.media_type, found.digest
            )  # fmt: skip
        body = _read_manifest(path, reference)
        if media_type is None:
            media_type = _media_type_of(body)
        return media_type, body

    def referrers(self, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        try:
            _, body = self.fetch_manifest(fallback_tag(digest))
        except NotFoundError:
            return []
        found = parse_index(body, f"the referrers index of {digest}")["manifests"]
        return [d.to_json() for d in found if artifact_type in (None, d.artifact_type)]

    def tags(self) -> list[str]:
        prefix = self.name + ":"
        return sorted(r[len(prefix) :] for r, _ in self.layout.entries() if r.startswith(prefix))

    def _add_referrer(self, own: Descriptor, subject: Descriptor) -> None:
        tag = fallback_tag(subject.digest)
        with self.layout.locked():
            try:
                _, old = self.fetch_manifest(tag)
            except NotFoundError:
                old = None
            self.push_manifest(tag, IMAGE_INDEX, with_referrer(old, own))


def write_bundle(layout: OciLayout, path: str | os.PathLike[str]) -> int:
    """Writes ``layout`` as an uncompressed tar at ``path`` (atomically): ``oci-layout``,
    ``index.json`` and the blobs ``index.json`` reaches (``reachable``: not those a moved tag
    left behind), in a fixed order with fixed owners, modes and times, so the same versions
    give the same bytes. Returns the tar's size in bytes.

    Raises:
        IntegrityError: a blob the layout reaches is missing.
    """
    names = ["oci-layout", "index.json"]
    names += [f"blobs/sha256/{h}" for h in sorted(reachable(layout))]
    target = Path(path)
    tmp = target.with_name(f".tmp-{target.name}.{secrets.token_hex(4)}")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name in names:
                source = layout.root / name
                info = tarfile.TarInfo(name)
                info.size = source.stat().st_size
                info.mode, info.mtime = 0o644, 0
                with source.open("rb") as f:
                    tar.addfile(info, f)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target.stat().st_size


def open_bundle(
    path: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    max_size: int = MAX_BUNDLE_BYTES,
) -> OciLayout:
    """The bundle at ``path`` read into an image layout in the empty ``directory``, every
    member checked (see the module docstring) and every blob's digest verified.

    Raises:
        NotFoundError: no such file.
        OciError: a member that is not part of an image layout, not a regular file, twice in
            the tar or over its limit; a blob nothing reaches; not a tar; over ``max_size``.
        IntegrityError: a blob whose bytes do not have its digest, or a blob something
            reaches that is missing or of another size.
    """
    root = Path(directory)
    root.joinpath("blobs", "sha256").mkdir(parents=True)
    try:
        tar = tarfile.open(path, "r:", tarinfo=_BoundedInfo)  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        raise NotFoundError(f"no such bundle: {path}") from None
    except (tarfile.TarError, OSError) as e:
        raise OciError(f"{path} is not a tar file ({type(e).__name__})") from None
    with tar:
        _read_members(tar, root, max_size)
    for needed in ("oci-layout", "index.json"):
        if not root.joinpath(needed).is_file():
            raise OciError(f"the bundle has no {needed}: not an image layout")
    layout = OciLayout(root)
    _check_reachable(layout)
    return layout


class _BoundedInfo(tarfile.TarInfo):
    """A member's header whose extended records (pax ``x`` and ``g``, GNU long names and
    links) are refused over ``MAX_HEADER_RECORD`` bytes before they are read: tarfile reads
    one whole into memory, and Python before 3.11.10 / 3.12.6 parses a pax one in time
    quadratic in its length (CVE-2024-6232: 8 KB of digits 57 ms, 1 MB some 15 minutes)."""

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self._check_record()
        found: tarfile.TarInfo = super()._proc_pax(tar)  # type: ignore[misc]
        return found

    def _proc_gnulong(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self._check_record()
        found: tarfile.TarInfo = super()._proc_gnulong(tar)  # type: ignore[misc]
        return found

    def _check_record(self) -> None:
        if self.size > MAX_HEADER_RECORD:  # a ReadError leaves tarfile as it is, anywhere
            raise tarfile.ReadError(
                f"an extended header record of {self.size} bytes, over {MAX_HEADER_RECORD}"
            )


def _read_members(tar: tarfile.TarFile, root: Path, max_size: int) -> None:
    """Each member checked and written under ``root`` (empty but for ``blobs/sha256``), in
    memory that does not grow with their number: tarfile's list of members read is emptied
    as it goes (a million members held 560 MB), a name met twice is one already on disk, and
    paths are joined as strings (pathlib interns each part it parses, for good)."""
    total = 0
    try:
        while (member := tar.next()) is not None:
            tar.members.clear()  # type: ignore[attr-defined]  # (not in typeshed)
            name = member.name.removeprefix("./").rstrip("/") if member.isdir() else member.name
            if member.isdir() and name in _DIRECTORIES | {"", "."}:
                continue
            _check_member(member, root)
            total += member.size
            if total > max_size:
                raise OciError(f"the bundle holds more than {max_size} bytes")
            _extract(tar, member, root)
    except tarfile.TarError as e:
        raise OciError(f"the bundle is not a well-formed tar ({type(e).__name__})") from None


def _check_member(member: tarfile.TarInfo, root: Path) -> None:
    name = member.name
    if name not in ("oci-layout", "index.json") and not _BLOB_NAME.fullmatch(name):
        raise OciError(
            f"the bundle holds {name!r:.120}, which is no part of an image layout (oci-layout, "
            "index.json, blobs/sha256/<hex>)"
        )
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):  # isreg() admits sparse ones
        raise OciError(
            f"the bundle's {name} is not a regular file (a link, a device, a sparse file)"
        )
    if os.path.lexists(os.path.join(root, name)):
        raise OciError(f"the bundle holds {name} twice")
    limit = 1024 if name == "oci-layout" else MAX_MANIFEST_BYTES if name == "index.json" else None
    if limit is not None and member.size > limit:
        raise OciError(f"the bundle's {name} is {member.size} bytes, over {limit}")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> None:
    source = tar.extractfile(member)
    if source is None:  # not reached: regular files only
        raise OciError(f"the bundle's {member.name} cannot be read")
    h = hashlib.sha256()

    def chunks() -> Iterator[bytes]:
        while chunk := source.read(CHUNK):
            h.update(chunk)
            yield chunk

    target = os.path.join(root, member.name)  # a temporary layout: written, not synced
    with open(target, "wb") as out:
        for chunk in chunks():
            out.write(chunk)
    found = _BLOB_NAME.fullmatch(member.name)
    if found and h.hexdigest() != found.group(1):
        os.unlink(target)
        raise IntegrityError(
            f"the bundle's blob {found.group(1)[:12]} has the bytes of {h.hexdigest()[:12]}: "
            "it was changed", expected=found.group(1), found=h.hexdigest(),
        )  # fmt: skip


def reachable(layout: OciLayout) -> set[str]:
    """The blobs (hex) that ``index.json`` reaches: tagged manifests and indexes, what they
    list, their configs and layers.

    Raises:
        IntegrityError: a blob reached is missing or of another size than its descriptor's.
        OciError: a malformed manifest or index.
    """
    reached: set[str] = set()
    todo = [d for _, d in layout.entries()]
    while todo:
        d = todo.pop()
        if d.hex in reached:
            continue
        path = layout.blob_path(d.digest)
        if not path.is_file() or path.stat().st_size != d.size:
            raise IntegrityError(
                f"the layout lacks blob {d.digest} of {d.size} bytes (or it has another size)",
                expected=d.hex,
            )
        reached.add(d.hex)
        if d.media_type == IMAGE_INDEX:
            todo += parse_index(path.read_bytes(), d.digest)["manifests"]
        elif d.media_type == IMAGE_MANIFEST:
            doc = parse_manifest(path.read_bytes(), d.digest)
            todo += [doc["config"], *doc["layers"]]
    return reached


def _check_reachable(layout: OciLayout) -> None:
    """Every blob something in ``index.json`` reaches is there with its size, and every blob
    there is reached."""
    reached = reachable(layout)
    present = {p.name for p in layout.root.joinpath("blobs", "sha256").iterdir()}
    extra = sorted(present - reached)
    if extra:
        raise OciError(f"the bundle holds {len(extra)} blob(s) nothing refers to: {extra[0]}")


def _open_blob(path: Path) -> IO[bytes]:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    return os.fdopen(fd, "rb")


def _verified_chunks(f: IO[bytes], digest: str, size: int) -> Iterator[bytes]:
    with f:
        h = hashlib.sha256()
        n = 0
        while chunk := f.read(min(CHUNK, size - n + 1)):
            n += len(chunk)
            if n > size:
                raise IntegrityError(f"blob {digest} is more than {size} bytes")
            h.update(chunk)
            yield chunk
        if n != size or "sha256:" + h.hexdigest() != digest:
            raise IntegrityError(
                f"blob {digest} of {size} bytes reads as sha256:{h.hexdigest()} of {n} bytes",
                expected=hex_of(digest), found=h.hexdigest(),
            )  # fmt: skip


def _read_manifest(path: Path, digest: str) -> bytes:
    try:
        with _open_blob(path) as f:
            body = f.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise NotFoundError(f"the image layout has no manifest {digest}") from None
    return checked_manifest(body, digest)


def _media_type_of(body: bytes) -> str:
    doc = parse_json(body, "a manifest", MAX_MANIFEST_BYTES)
    media_type = doc.get("mediaType")
    if media_type not in (IMAGE_MANIFEST, IMAGE_INDEX):
        media_type = IMAGE_INDEX if "manifests" in doc else IMAGE_MANIFEST
    return str(media_type)


def _check_tag(tag: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", tag):
        raise InvalidNameError(f"not an OCI tag: {tag!r:.80}")
    return tag
