"""Pushes in parts, as a content-addressed registry takes them (``jaxport serve``'s uploads).

A client splits each archive into parts (a function archive is one part; a model archive its
skeleton and one part per tensor section, ``jaxport.export._internal.split_archive``), asks which
part
digests the store lacks (``missing``), sends only those (``receive``: each one's sha256 checked
as it arrives; a part that does not match is never stored), then commits the version: the
archives are put together from their parts (``assemble``: every part verified, the whole
archive's sha256 checked) and pushed as files, through the same validation as any push. Before
a byte is written, a commit's parts must be the archive's layout as its header (in the first
part) declares it (``plan_parts``): a model's skeleton, then each tensor's section once, in
order; any other archive one part, whole. So what a commit writes to its temporary file is the
archive's declared size, and the memory its push needs (the sections it decompresses) is
known. Parts stored before a commit are blobs nothing refers to yet: ``gc`` keeps them for
``min_age`` (an hour by default), so an interrupted upload resumes by asking ``missing``
again.

Where the store recorded each tensor part's sha256 itself (an S3 store, the parts uploaded
straight to it through presigned URLs: ``_store_urls``), a model is committed without reading
its tensors (``sources``: a ``StoredModel`` instead of an assembled file): the skeleton is read
and validated in full, each tensor part is checked by the store's checksum and size (a HEAD),
compressed tensors are read and checked as ever; the whole archive's sha256 is then the
client's word, checked by every whole read (a pull) and refused where it names another
archive's parts (``_publish``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import mmap
import os
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jaxport import IntegrityError, InvalidNameError, JaxportError
from jaxport._io import atomic_write
from jaxport.export._internal import Part
from jaxport.registry._blobs import BlobStore, signing
from jaxport.registry._model_parts import archive_chunks, header_info
from jaxport.registry._names import check_digest

__all__ = [
    "ArchiveParts",
    "StoredModel",
    "assemble",
    "missing",
    "plan_parts",
    "receive",
    "sources",
    "vouched",
]

#: Most parts one archive may name: a model's skeleton and its tensors, one section each
#: besides the modules' (the format's ``MAX_MODEL_SECTIONS``, 2**16).
MAX_PARTS = 1 << 16
#: Most zero bytes before a part: a model archive pads its sections to 64 bytes
#: (``schema/FORMAT.md``); a larger gap would have a commit write zeros without end.
MAX_GAP = 4096
#: Requests to the store at once where a commit asks it about each part (``vouched``).
PARALLEL_HEADS = 16


@dataclasses.dataclass(frozen=True)
class ArchiveParts:
    """An archive as parts: its sha256 ``digest``, ``size`` in bytes and ``parts`` in order
    (each at its offset, zero padding between)."""

    digest: str
    size: int
    parts: tuple[Part, ...]

    def check(self) -> None:
        """Refuses parts that cannot make the archive.

        Raises:
            InvalidNameError: a malformed digest, a negative or overlapping part, more than
                ``MAX_GAP`` zero bytes before a part, too many parts, parts that end past
                ``size``.
        """
        check_digest(self.digest)
        if not 1 <= len(self.parts) <= MAX_PARTS:
            raise InvalidNameError(f"an archive has 1 to {MAX_PARTS} parts, got {len(self.parts)}")
        end = 0
        for p in self.parts:
            check_digest(p.digest)
            if p.offset < end or p.size < 0:
                raise InvalidNameError(f"part {p.position} overlaps the one before or is negative")
            if p.offset - end > MAX_GAP:
                raise InvalidNameError(
                    f"part {p.position} starts {p.offset - end} bytes after the one before: "
                    f"padding is at most {MAX_GAP}"
                )
            end = p.offset + p.size
        if end > self.size:
            raise InvalidNameError(f"the parts end at byte {end}, past the archive's {self.size}")


def plan_parts(blobs: BlobStore, archive: ArchiveParts) -> int:
    """Checks that ``archive``'s parts are its layout as the header in its first part
    declares it (``jaxport.export._internal.split_archive``'s, from the header alone); returns the
    bytes
    of memory its push may hold: the decompressed size of every compressed section, plus the
    archive itself (a function archive, or bytes that are no jaxport archive) or its skeleton
    (a model, whose raw tensors are mapped, not held). Reads the first part's header only.

    Raises:
        InvalidNameError: see ``ArchiveParts.check``; parts that are not the layout (a part
            named where the header has another, or more or fewer parts than it has
            sections), or a size that is not the header's.
        IntegrityError: the first part is missing (``.expected`` names it), or its header
            does not match its digest.
    """
    from jaxport.export._internal import PREAMBLE_LENGTH

    archive.check()
    first = archive.parts[0]
    try:
        info = header_info(blobs, first.digest, archive.size)
    except IntegrityError:
        raise
    except JaxportError:  # no jaxport archive this jax reads: one part, the whole (converted)
        info = None
    if info is None or info.kind != "model":
        expected: tuple[Part, ...] = (Part(0, first.digest, 0, archive.size),)
        held = archive.size
    else:
        start = PREAMBLE_LENGTH + info.header_length
        modules = info.sections[0]
        held = start + modules.offset + modules.length
        tensors = [info.sections[t.section] for t in info.tensors]
        expected = (
            Part(0, first.digest, 0, held),
            *(Part(i + 1, s.sha256, start + s.offset, s.length) for i, s in enumerate(tensors)),
        )
    if info is not None and info.total_length != archive.size:
        raise InvalidNameError(
            f"archive {archive.digest}: its header says {info.total_length} bytes, the "
            f"commit {archive.size}"
        )
    if tuple(archive.parts) != expected:
        raise InvalidNameError(
            f"archive {archive.digest}: its {len(archive.parts)} part(s) are not the "
            f"{len(expected)} its header lays out (a skeleton, then each tensor's section once, "
            "in order; any other archive one part, whole)"
        )
    if info is None:
        return held
    return held + sum(s.uncompressed_length for s in info.sections if s.compression != "none")


def missing(blobs: BlobStore, digests: Sequence[str]) -> list[str]:
    """The digests (each checked) the store does not hold, in the order given, once each.

    Raises:
        InvalidNameError: a digest that is not 64 lowercase hex digits.
    """
    seen: set[str] = set()
    out = []
    for d in digests:
        if check_digest(d) not in seen and not blobs.exists(d):
            out.append(d)
        seen.add(d)
    return out


def receive(blobs: BlobStore, digest: str, chunks: Iterable[bytes], max_size: int) -> int:
    """Stores the blob ``chunks`` make if their sha256 is ``digest``; returns its size.

    The bytes are spooled to a temporary file while hashed, then stored (``BlobStore.put``:
    atomic, a no-op if the blob is there already).

    Raises:
        IntegrityError: the bytes' sha256 is not ``digest`` (nothing is stored).
        InvalidNameError: more than ``max_size`` bytes, or a malformed digest.
    """
    check_digest(digest)
    h = hashlib.sha256()
    size = 0
    with tempfile.TemporaryFile(prefix="jaxport-upload-") as spool:
        for chunk in chunks:
            size += len(chunk)
            if size > max_size:
                raise InvalidNameError(f"an upload is at most {max_size} bytes")
            h.update(chunk)
            spool.write(chunk)
        if h.hexdigest() != digest:
            raise IntegrityError(
                f"the uploaded bytes' sha256 is {h.hexdigest()}, not {digest}: not stored",
                expected=digest, found=h.hexdigest(),
            )  # fmt: skip
        spool.flush()
        if size == 0:
            blobs.put(digest, b"")
            return 0
        with mmap.mmap(spool.fileno(), 0, access=mmap.ACCESS_READ) as view:
            blobs.put(digest, memoryview(view))
    return size


def assemble(blobs: BlobStore, archive: ArchiveParts, directory: str | os.PathLike[str]) -> Path:
    """Writes the archive ``archive``'s parts make into ``directory``; returns its path.

    Raises:
        IntegrityError: a part is missing (``.expected`` names it) or corrupt, or the whole
            archive's sha256 is not ``archive.digest``.
        InvalidNameError: see ``ArchiveParts.check``.
    """
    plan_parts(blobs, archive)
    path = Path(directory) / f"{archive.digest}.jaxport"
    h = hashlib.sha256()

    def hashed() -> Iterable[bytes | memoryview]:
        for chunk in archive_chunks(blobs, archive.parts, archive.size):
            h.update(chunk)
            yield chunk

    atomic_write(path, hashed())
    if h.hexdigest() != archive.digest:
        path.unlink(missing_ok=True)
        raise IntegrityError(
            f"the parts make an archive with sha256 {h.hexdigest()}, not {archive.digest}",
            expected=archive.digest, found=h.hexdigest(),
        )  # fmt: skip
    return path


@dataclasses.dataclass(frozen=True)
class StoredModel:
    """A model archive whose parts ``blobs`` holds, to push without reading its tensors
    (``_publish`` checks each tensor part's checksum recorded by the store)."""

    archive: ArchiveParts
    blobs: BlobStore


def sources(
    blobs: BlobStore, archives: Sequence[ArchiveParts], directory: str | os.PathLike[str]
) -> list[Path | StoredModel]:
    """What ``push`` takes for archives whose parts are stored: ``StoredModel``s where every
    archive is a model with tensors and the store records checksums (an S3 store), else each
    archive put together from its parts into ``directory`` (``assemble``).

    Raises:
        (see ``assemble``; a ``StoredModel`` is checked by ``push``)
    """
    if all(len(a.parts) > 1 and vouched(blobs, a.parts[1:]) is None for a in archives):
        return [StoredModel(a, blobs) for a in archives]
    return [assemble(blobs, a, directory) for a in archives]


def vouched(blobs: BlobStore, parts: Sequence[Part]) -> Part | None:
    """The first of ``parts`` that ``blobs`` does not hold with the sha256 it computed itself
    and the part's size (one HEAD each, ``StoreUrls.stat``), or None: the store vouches for
    all. A store that keeps no checksums vouches for none."""
    urls = signing(blobs)
    if urls is None:
        return parts[0] if parts else None
    with ThreadPoolExecutor(PARALLEL_HEADS) as pool:  # HEADs wait on the store, not here
        found = list(pool.map(lambda p: urls.stat(p.digest), parts))
    return next((p for p, f in zip(parts, found, strict=True) if f != (p.size, p.digest)), None)
