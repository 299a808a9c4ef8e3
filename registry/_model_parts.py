"""Model archives in parts, the database and blob-store side: each tensor is a blob of its own,
the rest one *skeleton* blob.

The layout (what a part is, how parts make the archive) is the format's:
``jaxport.export._internal.split_archive`` and ``assemble_chunks`` (export/_parts.py). The registry
stores

- the *skeleton* (part 0) and each tensor's section (part i + 1 = tensor i) as blobs, by their
  sha256, so versions that share a tensor share its blob: a version that changes one layer
  stores one new tensor blob;

and the parts of each variant in ``variant_parts``. The variant's digest stays the sha256 of
the whole archive, which is the parts in order, each at its offset after zero padding
(``archive_chunks``): ``pull_bytes`` gives back the archive byte for byte. ``open_model`` reads
the skeleton and each tensor's blob when the model first uses it (memory-mapped from a local
store); the model checks each tensor against its digest then. SQLAlchemy is imported by
``parts_of`` only: a push through a server splits archives here without it.
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from jaxport import IntegrityError, NotFoundError
from jaxport.export._internal import Part, assemble_chunks
from jaxport.registry._blobs import (
    BlobStore,
    FsspecBlobStore,
    LocalBlobStore,
    read_verified,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from jaxport.export import ArchiveInfo, Model
    from jaxport.export._internal import VerdictCache

__all__ = [
    "FUNCTION",
    "MODEL",
    "archive_chunks",
    "header_info",
    "joined_archive",
    "open_model",
    "parts_of",
]

#: The kinds of variant (``variants.kind``): a function archive, a model archive (in parts).
FUNCTION = "function"
MODEL = "model"


def parts_of(conn: Connection, variant_id: int) -> list[Part]:
    """The parts of a model variant, in position order (empty for a function variant)."""
    from sqlalchemy import select

    from jaxport.registry._models import VariantPartRow

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
    return assemble_chunks(parts, total, lambda digest: read_verified(blobs, digest))


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
    from jaxport.export._internal import stream_info

    try:
        with _open(blobs, skeleton) as f:
            return stream_info(f.read, total)
    except FileNotFoundError:
        raise IntegrityError(
            f"blob {skeleton} is missing from {blobs.url}", expected=skeleton
        ) from None


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
    the model first uses it (memory-mapped from a local store, else fetched;
    ``jaxport.export._internal.model_from_parts``).

    Raises:
        NotFoundError: the variant has no parts (it was deleted meanwhile).
        IntegrityError: the skeleton is missing or corrupt.
        CorruptArchiveError, UnsupportedVersionError, UnsupportedFeatureError,
            UnsafeArchiveError: see ``jaxport.loads_model``.
    """
    from jaxport.export._internal import model_from_parts

    if not parts:
        raise NotFoundError(f"{where} was deleted while it was being pulled")
    skeleton = memoryview(read_verified(blobs, parts[0].digest))
    return model_from_parts(
        skeleton,
        total,
        lambda digest: _read_tensor(blobs, digest),
        where=where,
        store=blobs.url,
        allow_custom_calls=allow_custom_calls,
        verdicts=verdicts,
    )


def _read_tensor(blobs: BlobStore, digest: str) -> bytes | memoryview:
    """A tensor's blob, unverified (the model checks it): memory-mapped from a local store,
    else fetched. Raises: FileNotFoundError."""
    if isinstance(blobs, LocalBlobStore):
        return _mapped(blobs, digest)
    return blobs.get(digest)


def _mapped(blobs: LocalBlobStore, digest: str) -> bytes | memoryview:
    """A read-only memory map of a local blob (bytes for an empty file, which cannot be
    mapped); a regular file only (``LocalBlobStore.open``)."""
    with blobs.open(digest) as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _open(blobs: BlobStore, digest: str) -> Any:
    """A blob opened for reading from its start (the whole blob, for another kind of store)."""
    if isinstance(blobs, (LocalBlobStore, FsspecBlobStore)):
        return blobs.open(digest)
    return io.BytesIO(blobs.get(digest))
