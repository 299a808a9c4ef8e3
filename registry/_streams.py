"""A stored archive or blob as a stream of chunks, for serving it (``jaxport serve``).

``BlobStream`` gives a blob's size, then its bytes (or a byte range) a chunk at a time. A whole
read is verified as it goes (a local file once, while it stays the same file: ``_VERIFIED``):
its last chunk is yielded only after the sha256 of everything
before it matches the digest, so a reader that stops at a mismatch never holds a corrupt blob
(a server's client sees the response end early). A model archive's digest (stored as parts)
reads its parts in order, each verified before it is yielded. A range read is not verified
(it is a part of the bytes: ``inspect`` of a header, say; the reader checks what it reads).
"""

from __future__ import annotations

import collections
import hashlib
import os
from collections.abc import Iterator
from typing import BinaryIO

from jaxport import IntegrityError, NotFoundError
from jaxport.export._internal import Part
from jaxport.registry._blobs import BlobStore, LocalBlobStore, read_verified

__all__ = ["CHUNK", "BlobStream", "open_stream"]

#: Bytes read and yielded at a time.
CHUNK = 4 << 20


class BlobStream:
    """The bytes stored under ``digest``: one blob, or a model archive's ``parts``."""

    def __init__(self, blobs: BlobStore, digest: str, size: int, parts: list[Part] | None):
        self.blobs, self.digest, self.size, self._parts = blobs, digest, size, parts

    @property
    def parts(self) -> list[Part]:
        """Where the bytes are: a model archive's parts, else one part, the blob whole."""
        if self._parts is not None:
            return list(self._parts)
        return [Part(0, self.digest, 0, self.size)]

    def chunks(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` (default: the end), a chunk at a time; verified when it
        is the whole (see the module's doc).

        Raises:
            IntegrityError: a whole read whose bytes do not match the digest, or a part that
                is missing or corrupt.
        """
        end = self.size if end is None else end
        whole = start == 0 and end == self.size
        source = self._model(start, end) if self._parts is not None else self._blob(start, end)
        if not whole or self._parts is not None:  # a model's parts are each verified
            yield from source
            return
        identity = _identity(self.blobs, self.digest)
        if identity is not None and _VERIFIED.get(self.digest) == identity:
            yield from source  # this very file matched its digest when read before
            return
        digest = hashlib.sha256()
        held: bytes | None = None
        for chunk in source:
            if held is not None:
                yield held
            digest.update(chunk)
            held = chunk
        if digest.hexdigest() != self.digest:
            raise IntegrityError(
                f"blob {self.digest} in {self.blobs.url} does not match its digest",
                expected=self.digest, found=digest.hexdigest(),
            )  # fmt: skip
        if identity is not None:
            _remember(self.digest, identity)
        if held is not None:
            yield held

    def _part(self, part: Part, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` of a model's part, verified whole first unless it is the
        very local file that matched its digest before (``_VERIFIED``)."""
        identity = _identity(self.blobs, part.digest)
        if identity is not None and _VERIFIED.get(part.digest) == identity:
            if self.blobs.size(part.digest) != part.size:
                raise IntegrityError(f"part {part.position} is not {part.size} bytes")
            yield from BlobStream(self.blobs, part.digest, part.size, None)._blob(start, end)
            return
        data = memoryview(read_verified(self.blobs, part.digest))
        if len(data) != part.size:
            raise IntegrityError(f"part {part.position} is {len(data)} bytes, not {part.size}")
        if identity is not None:
            _remember(part.digest, identity)
        for at in range(start, end, CHUNK):
            yield bytes(data[at : min(end, at + CHUNK)])

    def _blob(self, start: int, end: int) -> Iterator[bytes]:
        with _open(self.blobs, self.digest) as f:
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    raise IntegrityError(
                        f"blob {self.digest} is shorter than recorded", expected=self.digest
                    )
                left -= len(chunk)
                yield chunk

    def _model(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` of a model archive: only the parts that overlap them are
        read (each verified whole), zero padding between them; a range of one tensor reads
        that tensor's blob alone (a lazy remote model reads one tensor per range)."""
        position = 0
        assert self._parts is not None
        for part in self._parts:
            if part.offset < position:
                raise IntegrityError(f"part {part.position} overlaps the one before")
            if position < part.offset and start < part.offset and position < end:  # padding
                yield bytes(min(part.offset, end) - max(position, start))
            if part.end > start and part.offset < end:
                first, last = max(0, start - part.offset), min(part.size, end - part.offset)
                yield from self._part(part, first, last)
            position = part.end
            if position >= end:
                return
        if position != self.size:
            raise IntegrityError(f"the parts make {position} bytes, the archive has {self.size}")


#: Local blob files read whole that matched their digest: digest -> (device, inode, size,
#: mtime in ns) of the file then. Blobs are written once, by rename, so an unchanged identity
#: is the same bytes: a whole read of it is not hashed again (a client still checks what it
#: receives). Corruption that keeps a file's identity (bit rot) is then caught by the reader
#: and by ``Registry.verify``, not here.
_VERIFIED: collections.OrderedDict[str, tuple[int, int, int, int]] = collections.OrderedDict()
_VERIFIED_MAX = 4096


def _remember(digest: str, identity: tuple[int, int, int, int]) -> None:
    _VERIFIED[digest] = identity
    while len(_VERIFIED) > _VERIFIED_MAX:
        _VERIFIED.popitem(last=False)


def _identity(blobs: BlobStore, digest: str) -> tuple[int, int, int, int] | None:
    if not isinstance(blobs, LocalBlobStore):
        return None
    try:
        st = os.stat(blobs.path(digest))
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _open(blobs: BlobStore, digest: str) -> BinaryIO:
    try:
        opener = getattr(blobs, "open", None)
        if opener is not None:
            return opener(digest)  # type: ignore[no-any-return]
        import io

        return io.BytesIO(blobs.get(digest))
    except FileNotFoundError:
        raise IntegrityError(
            f"blob {digest} is missing from {blobs.url}", expected=digest
        ) from None


def open_stream(
    blobs: BlobStore, digest: str, model_parts: list[Part] | None, size: int | None
) -> BlobStream:
    """A ``BlobStream`` of a blob (``model_parts`` None) or of a model archive of ``size`` bytes.

    Raises:
        NotFoundError: no such blob.
    """
    if model_parts is None:
        try:
            size = blobs.size(digest)
        except FileNotFoundError:
            raise NotFoundError(f"no blob {digest}") from None
    assert size is not None
    return BlobStream(blobs, digest, size, model_parts)
