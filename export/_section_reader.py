"""Reading payload sections: digests checked, zstd frames decompressed within their bounds.

A section's stored bytes are checked against its sha256 once, and nothing decompressed from
them is given out before that check passes (schema/FORMAT.md, "Reading", steps 9 and 10). For
a large section the digest is computed in a thread while the frame is decompressed (hashlib
and zstandard release the GIL): a digest that does not match is still the error reported,
whatever the decompressor made of the bytes. A module is decompressed straight into the
``bytes`` object jax keeps (``_buffers.BytesWriter``), and ``read_hashed`` also gives its
sha256, computed in a third thread piece by piece behind the decompressor (the module
sandbox's verdicts are cached by it); a raw section read whole gives its section digest, hashed
once. In a version-4 function archive (``chained``), the zstd frame of section ``k >= 1`` is
decompressed with the decompressed section ``k - 1`` (the module of the order before) as a
raw-content dictionary (``_level_sections``): the caller passes those bytes where it holds
them (``prefix``), else they are read, checked, first. python-zstandard's C backend copies a
dictionary's bytes; its cffi backend refers to them, and is used for this where it imports.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zstandard

from jaxport import CorruptArchiveError, IntegrityError
from jaxport.export import _limits
from jaxport.export._buffers import BytesWriter
from jaxport.export._hashing import THREADED_BYTES, Sha256Beside, sha256_beside
from jaxport.export._sections import Section
from jaxport.schema import fb

__all__ = ["SectionReader", "frame_length"]

#: Bytes decompressed (or copied) per step, each hashed while the next is made.
_PIECE = 8 << 20

_Check = Callable[[], None]


class SectionReader:
    """Verifies and decompresses sections of one archive, on demand, with bounded output.

    A section's declared decompressed size is believed only up to ``max_compression_ratio``
    times its stored size (or ``_limits.RATIO_FREE_BYTES``), and so is the total of all zstd
    sections (``_limits.within_ratio``), checked when the reader is made.
    A section's digest is checked once, before any byte decompressed from it is given out, and
    the decompressor never writes more than the declared size. A range of a section is
    decompressed alone (a primal module does not pay for its VJPs); inside ``in_order()``,
    reads of ranges in increasing order continue one decompression.

    Raises:
        CorruptArchiveError: a section declares more decompressed bytes than the ratio allows.
    """

    def __init__(
        self,
        payload: memoryview,
        sections: Sequence[Section],
        *,
        payload_start: int,
        path: str | None,
        max_compression_ratio: float = _limits.MAX_COMPRESSION_RATIO,
        chained: bool = False,
    ):
        self.chained = chained
        self._payload = payload
        self._sections = sections
        self._payload_start = payload_start
        self._path = path
        self._verified: set[int] = set()
        self._lock = threading.Lock()  # guards the cursors
        self._cursors: dict[int, _Cursor] | None = None
        self._last: tuple[int, bytes] | None = None  # a chained reader's last whole section
        for i, s in enumerate(sections):
            self._check_ratio(i, s, max_compression_ratio)
        self._check_total_ratio(max_compression_ratio)

    @property
    def sections(self) -> Sequence[Section]:
        """The archive's sections, as the header records them."""
        return self._sections

    def _own(self, index: int) -> int:
        """What section ``index`` declares beyond its prefix (a ``chained`` section's frame
        may copy each byte of the section before it: those are not counted)."""
        declared = self._sections[index].uncompressed_length
        if self.chained and index > 0:
            return max(0, declared - self._sections[index - 1].uncompressed_length)
        return declared

    def _check_ratio(self, index: int, s: Section, ratio: float) -> None:
        within = _limits.within_ratio(self._own(index), s.length, ratio)
        if s.compression == fb.Compression.zstd and not within:
            beyond = " beyond the section before it" if self.chained and index > 0 else ""
            raise CorruptArchiveError(
                f"section {index} declares {self._own(index)} bytes decompressed{beyond} from "
                f"{s.length} stored, a ratio over the limit of {ratio:g} (pass a larger "
                "max_compression_ratio to read an archive known to be this compressible)",
                offset=self._payload_start + s.offset,
                path=self._path,
            )

    def _check_total_ratio(self, ratio: float) -> None:
        indices = [i for i, s in enumerate(self._sections) if s.compression == fb.Compression.zstd]
        zstd = [self._sections[i] for i in indices]
        declared, stored = sum(map(self._own, indices)), sum(s.length for s in zstd)
        if not _limits.within_ratio(declared, stored, ratio):
            raise CorruptArchiveError(
                f"{len(zstd)} zstd sections {_which(zstd, self._sections)}declare {declared} bytes "
                f"decompressed from {stored} "
                f"stored, a ratio over the limit of {ratio:g} (pass a larger "
                "max_compression_ratio to read an archive known to be this compressible)",
                path=self._path,
            )

    def check(self, index: int, offset: int, length: int) -> None:
        """Checks that ``[offset, offset + length)`` lies in section ``index`` decompressed.

        Raises:
            CorruptArchiveError: no such section, or a range outside it.
        """
        if not 0 <= index < len(self._sections):
            raise CorruptArchiveError(
                f"module refers to section {index}, which does not exist", path=self._path
            )
        size = self._sections[index].uncompressed_length
        if offset + length > size:
            raise CorruptArchiveError(
                f"range [{offset}, {offset + length}) outside section {index} of {size} bytes",
                path=self._path,
            )

    @contextlib.contextmanager
    def in_order(self) -> Iterator[None]:
        """Within the block, a read that starts at or after where the previous read of the
        same zstd section ended continues its decompression instead of starting over (a
        model's methods' modules, read one after the other). The decompressors are freed when
        the block ends."""
        with self._lock:
            self._cursors = {}
        try:
            yield
        finally:
            with self._lock:
                cursors, self._cursors = self._cursors or {}, None
            for c in cursors.values():
                c.close()

    def read(self, index: int, offset: int, length: int, *, prefix: bytes | None = None) -> bytes:
        """Bytes ``[offset, offset + length)`` of section ``index`` after decompression
        (``prefix``: the decompressed section ``index - 1`` of a ``chained`` reader, where the
        caller holds it, checked).

        Raises:
            CorruptArchiveError: no such section, a range outside it, or a zstd frame that does
                not decompress to exactly its declared size (or has bytes after it, when the
                range reaches the section's end).
            IntegrityError: the section's stored bytes do not match its digest.
        """
        return self._read(index, offset, length, None, prefix)

    def read_hashed(
        self, index: int, offset: int, length: int, *, prefix: bytes | None = None
    ) -> tuple[bytes, str]:
        """``read(index, offset, length)`` and the sha256 (hex) of those bytes, hashed while
        they are decompressed (a raw section read whole: its checked section digest). Raises:
        as ``read``."""
        s = self._sections[index] if 0 <= index < len(self._sections) else None
        whole = s is not None and (offset, length) == (0, s.length)
        if whole and s is not None and s.compression == fb.Compression.none:
            return self._read(index, 0, length, None, None), s.sha256.hex()
        with Sha256Beside(threaded=length >= THREADED_BYTES) as digest:
            data = self._read(index, offset, length, digest, prefix)
            return data, digest.digest().hex()

    def _read(
        self,
        index: int,
        offset: int,
        length: int,
        digest: Sha256Beside | None,
        prefix: bytes | None,
    ) -> bytes:
        self.check(index, offset, length)
        s = self._sections[index]
        if self._needs_prefix(index) and prefix is None:
            prefix = self._prefix(index)
        stored = self._payload[s.offset : s.offset + s.length]
        threaded = index not in self._verified and len(stored) >= THREADED_BYTES
        with contextlib.ExitStack() as stack:
            pool = None
            if threaded:
                pool = stack.enter_context(ThreadPoolExecutor(1, "jaxport-verify"))
            verify = self._verifier(index, stored, pool)
            try:
                data = self._contents(index, stored, offset, length, digest, prefix)
            except BaseException:
                verify()  # a digest that does not match is the error, as if checked first
                raise
            verify()
        if self.chained and (offset, length) == (0, s.uncompressed_length):
            with self._lock:
                self._last = (index, data)
        return data

    def _needs_prefix(self, index: int) -> bool:
        """Section ``index`` is decompressed with the section before it (``chained``)."""
        return (
            self.chained and index > 0 and self._sections[index].compression != fb.Compression.none
        )

    def _prefix(self, index: int) -> bytes:
        """Section ``index - 1`` decompressed, for a caller that does not hold it: the
        sections from the nearest one read whole last (``_last``) or needing no prefix of its
        own, each with the one before it, in a loop. Reads of every level in order
        (``module_custom_calls``, audits) thus decompress each section once, and a chain of
        any length recurses nowhere."""
        with self._lock:
            last = self._last
        start = index - 1
        while self._needs_prefix(start) and (last is None or last[0] != start):
            start -= 1
        data = last[1] if last is not None and last[0] == start else None
        for j in range(start, index):
            if j > start or data is None:
                size = self._sections[j].uncompressed_length
                data = self._read(j, 0, size, None, data if j > start else None)
        assert data is not None
        return data

    def _verifier(self, index: int, stored: memoryview, pool: ThreadPoolExecutor | None) -> _Check:
        """Checks section ``index``'s digest: hashed now in ``pool``, compared when called."""
        if index in self._verified:
            return lambda: None
        s = self._sections[index]
        found = sha256_beside(stored, pool)

        def verify() -> None:
            digest = found()
            if digest != s.sha256:
                raise IntegrityError(
                    f"section {index} digest mismatch",
                    expected=s.sha256.hex(),
                    found=digest.hex(),
                    offset=self._payload_start + s.offset,
                    path=self._path,
                )
            self._verified.add(index)

        return verify

    def _contents(
        self,
        index: int,
        stored: memoryview,
        offset: int,
        length: int,
        digest: Sha256Beside | None,
        prefix: bytes | None,
    ) -> bytes:
        s = self._sections[index]
        if s.compression == fb.Compression.none:
            return _copy(stored[offset : offset + length], digest)
        where = self._payload_start + s.offset
        self._check_frame_header(index, stored, where)
        try:
            whole = (offset, length) == (0, s.uncompressed_length)
            if whole and (digest is None or length < THREADED_BYTES):
                data = self._decompress_all(index, stored, where, prefix)
                if digest is not None:  # small: hashed after, nothing to overlap
                    digest.update(data)
                return data
            return self._decompress_range(index, stored, offset, length, digest, prefix)
        except _zstd_errors() as e:
            raise CorruptArchiveError(
                f"section {index} does not decompress: {e}", offset=where, path=self._path
            ) from None
        except MemoryError:  # within the ratio bound, but more than this process may allocate
            raise CorruptArchiveError(
                f"section {index} declares {s.uncompressed_length} bytes decompressed from "
                f"{s.length}, more than this process can allocate (the default bound is "
                f"{_limits.MAX_COMPRESSION_RATIO:g}x: max_compression_ratio lowers it)",
                offset=where,
                path=self._path,
            ) from None

    def _check_frame_header(self, index: int, stored: memoryview, where: int) -> None:
        """The frame's declared content size is the header's ``uncompressed_length``."""
        s = self._sections[index]
        try:
            content_size = zstandard.frame_content_size(stored)
        except zstandard.ZstdError as e:
            raise CorruptArchiveError(
                f"section {index} is not a zstd frame: {e}", offset=where, path=self._path
            ) from None
        if content_size != s.uncompressed_length:
            raise CorruptArchiveError(
                f"section {index}'s zstd frame holds {content_size} bytes, the header declares "
                f"{s.uncompressed_length}",
                offset=where,
                path=self._path,
            )

    def _decompress_all(
        self, index: int, stored: memoryview, where: int, prefix: bytes | None
    ) -> bytes:
        """The whole section in one call, into one ``bytes`` (a tensor)."""
        size = self._sections[index].uncompressed_length
        decompressor = _decompressor(prefix, one_shot=True)  # one frame, nothing after it
        data: bytes = decompressor.decompress(stored, max_output_size=size, allow_extra_data=False)
        if len(data) < size:
            raise CorruptArchiveError(
                f"section {index} decompresses to {len(data)} bytes, fewer than {size} declared",
                offset=where,
                path=self._path,
            )
        return data

    def _decompress_range(
        self,
        index: int,
        stored: memoryview,
        offset: int,
        length: int,
        digest: Sha256Beside | None,
        prefix: bytes | None,
    ) -> bytes:
        """Bytes ``[offset, offset + length)``: the frame decompressed from its start (or from
        where an earlier read ``in_order`` stopped), the range written into its ``bytes``."""
        s = self._sections[index]
        with self._lock:
            cursor = (self._cursors or {}).pop(index, None)
        if cursor is None or cursor.position > offset:
            if cursor is not None:
                cursor.close()
            cursor = _Cursor(stored, prefix)
        keep = False
        try:
            cursor.skip_to(offset)
            data = cursor.read(length, digest)
            end = offset + length
            if len(data) < length:
                raise CorruptArchiveError(
                    f"section {index} decompresses to {offset + len(data)} bytes, fewer than "
                    f"{end} declared",
                    offset=self._payload_start + s.offset,
                    path=self._path,
                )
            if end == s.uncompressed_length:
                self._check_frame_end(index, stored)
            else:
                keep = self._keep(index, cursor)
            return data
        finally:
            if not keep:
                cursor.close()

    def _keep(self, index: int, cursor: _Cursor) -> bool:
        with self._lock:
            if self._cursors is None:
                return False
            self._cursors[index] = cursor
            return True

    def _check_frame_end(self, index: int, stored: memoryview) -> None:
        """Nothing after the frame in its section: no junk, skippable or second frame."""
        try:
            extra = f"{len(stored) - frame_length(stored)} bytes after its zstd frame"
        except (CorruptArchiveError, zstandard.ZstdError) as e:
            extra = str(e)
        if extra != "0 bytes after its zstd frame":
            raise CorruptArchiveError(
                f"section {index} does not decompress: {extra}",
                offset=self._payload_start + self._sections[index].offset,
                path=self._path,
            )


class _Cursor:
    """One decompression of a frame, from its start, that reads forward."""

    def __init__(self, stored: memoryview, prefix: bytes | None = None):
        self._reader = _decompressor(prefix).stream_reader(
            stored, read_size=(1 if prefix is None else 8) << 20, read_across_frames=False
        )
        self.position = 0
        # With a prefix, a frame read in pieces goes through zstd's window buffer (the size of
        # the module: 400 MB allocated and copied again); read whole, zstd decompresses it in
        # one pass into the output (0.6 s -> 0.35 s at 400 MB, hashed after; measured).
        self._piece = _PIECE if prefix is None else None

    def skip_to(self, offset: int) -> None:
        """Decompresses (and drops) the bytes up to ``offset``; fewer at the frame's end."""
        if self.position >= offset:
            return
        scratch = memoryview(bytearray(min(offset - self.position, _PIECE)))
        while self.position < offset:
            n = self._reader.readinto(scratch[: offset - self.position])
            if not n:
                return
            self.position += n

    def read(self, length: int, digest: Sha256Beside | None) -> bytes:
        """The next ``length`` bytes (fewer at the frame's end), each piece given to
        ``digest`` as soon as it is written."""
        writer = BytesWriter(length)
        filled, piece = 0, self._piece or length
        while filled < length:
            n = self._reader.readinto(writer.view[filled : filled + piece])
            if not n:
                break
            if digest is not None:
                digest.update(writer.view[filled : filled + n], owner=writer)
            filled += n
        self.position += filled
        return writer.value(filled)

    def close(self) -> None:
        self._reader.close()


def frame_length(frame: bytes | memoryview) -> int:
    """The size in bytes of the zstd frame at the start of ``frame``: its header, its blocks
    (each a 3-byte header and its content) and its checksum (RFC 8878, section 3.1.1).

    Raises:
        zstandard.ZstdError: no frame header.
        CorruptArchiveError: a reserved block type, or blocks past the end of ``frame``.
    """
    position = zstandard.frame_header_size(frame)
    checksum = 4 if zstandard.get_frame_parameters(frame).has_checksum else 0
    while True:
        if position + 3 > len(frame):
            raise CorruptArchiveError("a zstd frame ends inside a block header")
        header = int.from_bytes(frame[position : position + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise CorruptArchiveError("a zstd block of the reserved type")
        position += 3 + (1 if kind == 1 else size)  # an RLE block stores its byte once
        if last:
            return position + checksum


def _decompressor(prefix: bytes | None = None, *, one_shot: bool = False) -> Any:
    """A decompressor whose window is bounded (``MAX_WINDOW_LOG``), with ``prefix`` as its
    raw-content dictionary where given (by reference, where the cffi backend imports).
    ``one_shot``: for one ``decompress`` call, the calling thread's own (making one costs
    about 25 us, a small archive's whole section read; a stream reader gets a new one)."""
    if prefix is None and one_shot:
        kept = getattr(_THREAD, "decompressor", None)
        if kept is None:
            kept = _THREAD.decompressor = _decompressor()
        return kept
    if prefix is None:
        return zstandard.ZstdDecompressor(max_window_size=2**_limits.MAX_WINDOW_LOG)
    z = _by_reference()
    dictionary = z.ZstdCompressionDict(bytes(prefix), dict_type=z.DICT_TYPE_RAWCONTENT)
    return z.ZstdDecompressor(dict_data=dictionary, max_window_size=2**_limits.MAX_WINDOW_LOG)


_THREAD = threading.local()


@functools.cache
def _by_reference() -> Any:
    """python-zstandard's cffi backend, whose dictionaries refer to their bytes (its C
    backend copies them: 0.3 s for a 400 MB module), else the default backend."""
    try:
        from zstandard import backend_cffi
    except ImportError:  # no cffi
        return zstandard
    return backend_cffi


@functools.cache
def _zstd_errors() -> tuple[type[Exception], ...]:
    """zstandard's error, and its cffi backend's (another class) where it imports."""
    return tuple({zstandard.ZstdError, _by_reference().ZstdError})


def _copy(view: memoryview, digest: Sha256Beside | None) -> bytes:
    """``bytes(view)``, each piece given to ``digest`` as soon as it is copied."""
    if digest is None:
        return bytes(view)
    writer = BytesWriter(len(view))
    for i in range(0, len(view), _PIECE):
        writer.view[i : i + _PIECE] = view[i : i + _PIECE]
        digest.update(writer.view[i : i + _PIECE], owner=writer)
    return writer.value()


def _which(zstd: Sequence[Section], sections: Sequence[Section]) -> str:
    """``(the modules and N tensors) `` where the first zstd section is the modules'."""
    if len(zstd) > 1 and zstd[0] is sections[0]:
        return f"(the modules and {len(zstd) - 1} tensors) "
    return ""
