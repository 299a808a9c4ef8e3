"""Model archives in parts: each tensor is a blob of its own, the rest one *skeleton* blob.

A model archive (``jaxport.Model``, schema/FORMAT.md "Model archives") is the preamble, the
header and section 0 (the methods' modules), then one section per tensor (raw or zstd), each
after zero padding. The registry stores

- the *skeleton*: bytes 0 to the end of section 0 (part 0), by its sha256;
- each tensor's section (part i + 1 = tensor i), by its section's sha256 (for a raw section,
  the tensor's own ``TensorInfo.sha256``; for a zstd one, the digest of the frame), so
  versions that share a tensor share its blob: a version that changes one layer stores one
  new tensor blob;

and the parts of each variant in ``variant_parts``. The variant's digest stays the sha256 of
the whole archive, which is the parts in order, each at its offset after zero padding
(``archive_chunks``): ``pull_bytes`` gives back the archive byte for byte. ``open_model`` reads
the skeleton and each tensor's blob when the model first uses it (memory-mapped from a local
store); the model checks each tensor against its digest then.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from jaxport._errors import IntegrityError, NotFoundError, UnsupportedFeatureError
from jaxport.registry._blobs import (
    BlobStore,
    FsspecBlobStore,
    LocalBlobStore,
    read_verified,
)
from jaxport.registry._models import VariantPartRow
from jaxport.schema import fb

if TYPE_CHECKING:
    from jaxport.export import ArchiveInfo, Model, TensorInfo
    from jaxport.export._container import Section
    from jaxport.export._verdicts import VerdictCache

__all__ = [
    "FUNCTION",
    "MODEL",
    "ArchiveChunks",
    "Part",
    "archive_chunks",
    "chunks_info",
    "header_info",
    "joined_archive",
    "open_model",
    "parts_of",
    "ranged_info",
    "split_model",
    "validated_model",
]

FUNCTION = "function"
MODEL = "model"
#: Zero bytes written at a time between parts.
_ZEROS = bytes(64 * 1024)


@dataclasses.dataclass(frozen=True)
class Part:
    """A blob of a model archive: ``position`` 0 the skeleton, i + 1 tensor i; it lies at
    ``offset`` bytes from the archive's start and is ``size`` bytes long."""

    position: int
    digest: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        """The offset just after the part."""
        return self.offset + self.size


def validated_model(
    data: bytes,
    path: str | None,
    verdicts: VerdictCache | None = None,
    allow_custom_calls: Sequence[str] = (),
) -> Model:
    """The model in ``data``, read in full: every method and VJP level, every tensor checked
    against its digest.

    Raises:
        CorruptArchiveError, IntegrityError, UnsupportedVersionError,
            UnsupportedFeatureError: see ``jaxport.loads_model``.
    """
    from jaxport.export import loads_model

    model = loads_model(
        data,
        path=path,
        verdicts=verdicts,
        allow_custom_calls=allow_custom_calls,
        outside_window="allow",
    )
    model.params  # noqa: B018  (reads every tensor and checks its digest)
    for name, exported in model.exported.items():
        current = exported
        for _ in range(model.vjp_orders[name]):
            current = current.vjp()
    return model


class ArchiveChunks:
    """An archive held as consecutive chunks: a ``Model``'s ``dump_chunks()`` (its tensors'
    bytes are views of its arrays, never joined) or one ``bytes``."""

    def __init__(self, chunks: Sequence[bytes | memoryview]):
        self._chunks = [memoryview(c).cast("B") for c in chunks if len(c)]
        self._starts = [0]
        for c in self._chunks:
            self._starts.append(self._starts[-1] + len(c))

    @property
    def size(self) -> int:
        """The archive's length in bytes."""
        return self._starts[-1]

    def view(self, start: int, end: int) -> bytes | memoryview:
        """Bytes ``start`` to ``end``: a view where one chunk holds them, else a copy."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < len(self._chunks) and end <= self._starts[i + 1]:
            return self._chunks[i][start - self._starts[i] : end - self._starts[i]]
        pieces = []
        while start < end:
            i = bisect.bisect_right(self._starts, start) - 1
            stop = min(end, self._starts[i + 1])
            pieces.append(self._chunks[i][start - self._starts[i] : stop - self._starts[i]])
            start = stop
        return b"".join(pieces)

    def sha256(self) -> str:
        """The sha256 (hex) of the whole archive."""
        digest = hashlib.sha256()
        for c in self._chunks:
            digest.update(c)
        return digest.hexdigest()


def split_model(archive: ArchiveChunks, info: ArchiveInfo, path: str | None) -> tuple[Part, ...]:
    """The parts of a (validated) model archive: the skeleton, then each tensor in order.

    Raises:
        UnsupportedFeatureError: the archive is not laid out as jaxport writes model archives
            (sections out of order, a section no tensor owns, bytes after the last section):
            its parts would not give its bytes back.
    """
    from jaxport.export._container import PREAMBLE_LENGTH

    where = path or "the model archive"
    start = PREAMBLE_LENGTH + info.header_length
    modules = info.sections[0]
    skeleton_end = start + modules.offset + modules.length
    digest = hashlib.sha256(archive.view(0, skeleton_end)).hexdigest()
    parts = [Part(0, digest, 0, skeleton_end)]
    if len(info.sections) != len(info.tensors) + 1:
        raise UnsupportedFeatureError(
            f"{where}: {len(info.sections)} sections for {len(info.tensors)} tensors: the "
            "registry stores model archives as jaxport writes them"
        )
    for i, t in enumerate(info.tensors):
        s = info.sections[t.section]
        offset = start + s.offset
        if offset < parts[-1].end:
            raise UnsupportedFeatureError(
                f"{where}: tensor {t.path} is not stored after the one before: the registry "
                "stores model archives as jaxport writes them"
            )
        parts.append(Part(i + 1, s.sha256, offset, s.length))  # the stored bytes' digest
    if parts[-1].end != archive.size:
        raise UnsupportedFeatureError(
            f"{where}: {archive.size - parts[-1].end} bytes after the last section"
        )
    return tuple(parts)


def parts_of(conn: Connection, variant_id: int) -> list[Part]:
    """The parts of a model variant, in position order (empty for a function variant)."""
    rows = conn.execute(
        select(
            VariantPartRow.position,
            VariantPartRow.digest,
            VariantPartRow.offset,
            VariantPartRow.size,
        )
        .where(VariantPartRow.variant_id == variant_id)
        .order_by(VariantPartRow.position)
    )
    return [Part(int(r.position), r.digest, int(r.offset), int(r.size)) for r in rows]


def archive_chunks(
    blobs: BlobStore, parts: Sequence[Part], total: int
) -> Iterator[bytes | memoryview]:
    """The model archive's bytes, one part (or run of zero padding) at a time, each part
    verified against its digest before it is yielded.

    Raises:
        IntegrityError: a part is missing or corrupt, or the parts do not make ``total`` bytes.
    """
    position = 0
    for part in parts:
        if part.offset < position:
            raise IntegrityError(f"part {part.position} overlaps the one before")
        while position < part.offset:
            n = min(len(_ZEROS), part.offset - position)
            yield memoryview(_ZEROS)[:n]
            position += n
        data = read_verified(blobs, part.digest)
        if len(data) != part.size:
            raise IntegrityError(f"part {part.position} is {len(data)} bytes, not {part.size}")
        yield data
        position = part.end
    if position != total:
        raise IntegrityError(f"the parts make {position} bytes, the archive has {total}")


def joined_archive(blobs: BlobStore, parts: Sequence[Part], total: int) -> bytes:
    """The whole model archive in memory (``archive_chunks`` joined). Raises: as it."""
    return b"".join(archive_chunks(blobs, parts, total))


def header_info(blobs: BlobStore, skeleton: str, total: int) -> ArchiveInfo:
    """``jaxport.inspect`` of a model archive from its skeleton's preamble and header alone
    (``total``: the archive's size in bytes).

    Raises:
        IntegrityError: the skeleton is missing, or its header does not match its digest.
        CorruptArchiveError: a malformed header.
    """
    try:
        with _open(blobs, skeleton) as f:
            return _head_info(f.read, total)
    except FileNotFoundError:
        raise IntegrityError(
            f"blob {skeleton} is missing from {blobs.url}", expected=skeleton
        ) from None


def ranged_info(read_range: Callable[[int, int], bytes], total: int) -> ArchiveInfo:
    """``jaxport.inspect`` of an archive of ``total`` bytes read by ``read_range(start, end)``
    (a blob stream, an HTTP range request): its preamble and header only, bounded as any
    header read. Raises: as ``header_info``."""
    position = 0

    def read(n: int) -> bytes:
        nonlocal position
        start, position = position, min(total, position + n)
        return read_range(start, position) if position > start else b""

    return _head_info(read, total)


def chunks_info(archive: ArchiveChunks) -> ArchiveInfo:
    """``jaxport.inspect`` of an archive held as chunks. Raises: as ``header_info``."""
    position = 0

    def read(n: int) -> bytes | memoryview:
        nonlocal position
        start, position = position, min(archive.size, position + n)
        return archive.view(start, position)

    return _head_info(read, archive.size)


def _head_info(read: Callable[[int], bytes | memoryview], total: int) -> ArchiveInfo:
    """The header of an archive of ``total`` bytes, its preamble and header read by ``read``."""
    from jaxport.export import _archive, _container, _fb, _limits
    from jaxport.export._info import _archive_info

    start = bytes(read(_container.PREAMBLE_LENGTH))
    preamble = _container.decode_preamble(start, path=None)
    head = _archive.read_header(start + read(preamble.header_length), total, path=None)
    with _fb.translating_read_errors(None), _limits.header_budget(head.preamble.header_length):
        info: ArchiveInfo = _archive_info(head)
    return info


def open_model(
    blobs: BlobStore,
    parts: Sequence[Part],
    total: int,
    *,
    where: str,
    allow_custom_calls: Sequence[str] = (),
    verdicts: VerdictCache | None = None,
) -> Model:
    """The model of a variant: its skeleton read (and verified) now, each tensor's blob when
    the model first uses it (``tensor_reader``).

    Raises:
        NotFoundError: the variant has no parts (it was deleted meanwhile).
        IntegrityError: the skeleton is missing or corrupt.
        CorruptArchiveError, UnsupportedVersionError, UnsupportedFeatureError,
            UnsafeArchiveError: see ``jaxport.loads_model``.
    """
    from jaxport.export import _archive, _container, _model_io, _vetting

    if not parts:
        raise NotFoundError(f"{where} was deleted while it was being pulled")
    skeleton = memoryview(read_verified(blobs, parts[0].digest))
    head = _archive.read_header(skeleton, total, path=where)
    modules = _container.SectionReader(
        skeleton[head.payload_start :], head.sections, payload_start=head.payload_start, path=where
    )
    return _model_io.open_model(
        head,
        modules,
        tensor_reader(blobs, head.sections, where),
        policy=_vetting.module_policy(allow_custom_calls, verdicts=verdicts),
        path=where,
    )


def tensor_reader(
    blobs: BlobStore, sections: Sequence[Section], where: str
) -> Callable[[TensorInfo], bytes | memoryview]:
    """Reads a tensor's blob (by its section's digest): memory-mapped from a local store, else
    fetched. A raw tensor's bytes are not checked here: the model checks them against the
    tensor's digest when it uses them. A zstd section is checked against its own digest, then
    decompressed to exactly its declared size (within the default compression ratio).

    The reader raises ``IntegrityError`` for a missing blob or a zstd section that does not
    match its digest, ``CorruptArchiveError`` for one that does not decompress as declared.
    """
    from jaxport.export._container import SectionReader

    def read(info: TensorInfo) -> bytes | memoryview:
        s = sections[info.section]
        digest = s.sha256.hex()
        try:
            if isinstance(blobs, LocalBlobStore):
                data = _mapped(blobs.path(digest))
            else:
                data = blobs.get(digest)
        except FileNotFoundError:
            raise IntegrityError(
                f"parameter {info.path}: blob {digest} is missing from {blobs.url}",
                expected=digest,
            ) from None
        if s.compression == fb.Compression.none:
            return data
        alone = dataclasses.replace(s, offset=0)
        reader = SectionReader(memoryview(data), [alone], payload_start=0, path=where)
        return reader.read(0, 0, s.uncompressed_length)

    return read


def _mapped(path: Path) -> bytes | memoryview:
    """A read-only memory map of ``path`` (bytes for an empty file, which cannot be mapped)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _open(blobs: BlobStore, digest: str) -> Any:
    """A blob opened for reading from its start (the whole blob, for another kind of store)."""
    import io

    if isinstance(blobs, LocalBlobStore):
        return blobs.path(digest).open("rb")
    if isinstance(blobs, FsspecBlobStore):
        return blobs.open(digest)
    return io.BytesIO(blobs.get(digest))
