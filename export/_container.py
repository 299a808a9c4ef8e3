"""The container: preamble, header, payload sections (schema/FORMAT.md, "Byte layout").

    offset  size  field
    0       8     magic  b"\\x89JXP\\r\\n\\x1a\\n"
    8       4     format version (uint32, little-endian)
    12      4     flags (uint32, must be 0)
    16      8     header length H in bytes (uint64)
    24      32    sha256 of the header
    56      H     header: a FlatBuffer, root ``jaxport.fb.Archive``, identifier "JXPA"
    56+H    ...   payload: the sections, contiguous, in order, nothing after the last

The reader checks, in this order: magic, version, flags, header length <= cap and inside the
input, header digest, (then the FlatBuffer, by the caller), the number of sections and every
section range, every declared decompressed size against the compression-ratio bound, every
section digest, and decompression bounded by the declared sizes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import struct
from collections.abc import Sequence

import zstandard

from jaxport import CorruptArchiveError, IntegrityError, UnsupportedVersionError
from jaxport.export import _limits
from jaxport.export._versions import (
    MAX_SUPPORTED_FORMAT_VERSION,
    MIN_SUPPORTED_FORMAT_VERSION,
    section_alignment,
)
from jaxport.schema import fb

__all__ = [
    "MAGIC",
    "MAX_COMPRESSION_RATIO",
    "MAX_HEADER_LENGTH",
    "MAX_MODEL_SECTIONS",
    "MAX_SECTIONS",
    "PREAMBLE_LENGTH",
    "Preamble",
    "Section",
    "SectionReader",
    "check_header",
    "check_padding",
    "check_section_count",
    "check_sections",
    "compress_section",
    "compress_tensor",
    "decode_preamble",
    "encode_preamble",
    "section_start",
]

MAGIC = b"\x89JXP\r\n\x1a\n"
_PREAMBLE = struct.Struct("<8sIIQ32s")
#: Bytes before the header.
PREAMBLE_LENGTH = _PREAMBLE.size
#: The largest header a reader accepts, in bytes (64 MiB).
MAX_HEADER_LENGTH = 64 * 2**20
#: The most payload sections a reader accepts in a version-1 archive (its writer writes one).
MAX_SECTIONS = 1024
#: The most payload sections of a version-2 archive (a model: one per tensor, plus one).
MAX_MODEL_SECTIONS = 2**16
#: The default bound on a section's declared decompressed size over its stored size.
MAX_COMPRESSION_RATIO = _limits.MAX_COMPRESSION_RATIO
_MAX_WINDOW_LOG = 31


@dataclasses.dataclass(frozen=True)
class Preamble:
    """The fixed-size start of an archive."""

    format_version: int
    header_length: int
    header_sha256: bytes


@dataclasses.dataclass(frozen=True)
class Section:
    """A payload section: ``offset`` is from the start of the payload; sizes in bytes."""

    offset: int
    length: int
    compression: int
    uncompressed_length: int
    sha256: bytes


def encode_preamble(header: bytes, format_version: int = 1) -> bytes:
    """The 56-byte preamble for a FlatBuffer ``header`` of an archive of ``format_version``."""
    digest = hashlib.sha256(header).digest()
    return _PREAMBLE.pack(MAGIC, format_version, 0, len(header), digest)


def section_start(position: int, *, payload_start: int, format_version: int) -> int:
    """Where a section after payload offset ``position`` starts, as a payload offset.

    Version 1: at ``position`` (sections tile the payload). Version 2: at the first multiple
    of 64 bytes from the start of the archive, so that a tensor can be mapped in place.
    """
    alignment = section_alignment(format_version)
    return -(-(payload_start + position) // alignment) * alignment - payload_start


def decode_preamble(buf: bytes | memoryview, *, path: str | None = None) -> Preamble:
    """Checks and decodes the preamble of ``buf``, which holds at least the preamble.

    Raises:
        CorruptArchiveError: too short, wrong magic, non-zero flags, or a header length over
            MAX_HEADER_LENGTH.
        UnsupportedVersionError: a format version outside the supported range.
    """
    if len(buf) < PREAMBLE_LENGTH:
        raise CorruptArchiveError(
            f"truncated: {len(buf)} bytes, a jaxport archive has at least {PREAMBLE_LENGTH}",
            path=path,
        )
    magic, version, flags, header_length, digest = _PREAMBLE.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptArchiveError(
            f"not a jaxport archive: magic bytes are {bytes(magic)!r}, expected {MAGIC!r}",
            offset=0,
            path=path,
        )
    if not MIN_SUPPORTED_FORMAT_VERSION <= version <= MAX_SUPPORTED_FORMAT_VERSION:
        hint = (
            "upgrade jaxport to read it"
            if version > MAX_SUPPORTED_FORMAT_VERSION
            else "it was written by a jaxport release this one no longer reads"
        )
        raise UnsupportedVersionError(
            "archive format version",
            version,
            (MIN_SUPPORTED_FORMAT_VERSION, MAX_SUPPORTED_FORMAT_VERSION),
            hint,
        )
    if flags != 0:
        raise CorruptArchiveError(f"unknown flags {flags:#x} in the preamble", offset=12, path=path)
    if header_length > MAX_HEADER_LENGTH:
        raise CorruptArchiveError(
            f"header length {header_length} bytes exceeds the limit of {MAX_HEADER_LENGTH}",
            offset=16,
            path=path,
        )
    return Preamble(version, header_length, bytes(digest))


def check_header(header: bytes | memoryview, preamble: Preamble, *, path: str | None) -> None:
    """Checks the header's length and sha256 against the preamble.

    Raises:
        CorruptArchiveError: the input ends inside the header.
        IntegrityError: the header's digest does not match.
    """
    if len(header) != preamble.header_length:
        raise CorruptArchiveError(
            f"truncated: the header is {preamble.header_length} bytes, only {len(header)} present",
            offset=PREAMBLE_LENGTH,
            path=path,
        )
    found = hashlib.sha256(header).digest()
    if found != preamble.header_sha256:
        raise IntegrityError(
            "header digest mismatch",
            expected=preamble.header_sha256.hex(),
            found=found.hex(),
            offset=PREAMBLE_LENGTH,
            path=path,
        )
    if not fb.Archive.ArchiveBufferHasIdentifier(header, 0):
        raise CorruptArchiveError(
            "the header is not a jaxport.fb.Archive FlatBuffer (identifier is not JXPA)",
            offset=PREAMBLE_LENGTH,
            path=path,
        )


def check_section_count(n: int, *, format_version: int = 1, path: str | None) -> None:
    """Checks the number of sections before they are decoded.

    Raises:
        CorruptArchiveError: more than MAX_SECTIONS (version 1) or MAX_MODEL_SECTIONS.
    """
    limit = MAX_SECTIONS if format_version < 2 else MAX_MODEL_SECTIONS
    if n > limit:
        raise CorruptArchiveError(f"{n} payload sections (limit {limit})", path=path)


def check_sections(
    sections: Sequence[Section],
    payload_length: int,
    *,
    payload_start: int,
    path: str | None,
    format_version: int = 1,
) -> None:
    """Checks that the sections tile the payload exactly: in order, no holes, no trailing bytes.

    In a version-2 archive each section starts at the next multiple of 64 bytes from the start
    of the archive (``section_start``); the padding bytes between are checked to be zero by
    the reader that maps the sections (``check_padding``).

    Raises:
        CorruptArchiveError: a section out of range, overlapping, leaving a hole, of an unknown
            compression, or bytes after the last section (this prevents polyglot files).
    """
    position = 0
    for i, s in enumerate(sections):
        where = payload_start + s.offset
        position = section_start(
            position, payload_start=payload_start, format_version=format_version
        )
        if s.offset != position:
            raise CorruptArchiveError(
                f"section {i} starts at payload offset {s.offset}, expected {position}",
                offset=where,
                path=path,
            )
        if s.offset + s.length > payload_length:
            raise CorruptArchiveError(
                f"truncated: section {i} ends at byte {payload_start + s.offset + s.length}, "
                f"the archive has {payload_start + payload_length}",
                offset=where,
                path=path,
            )
        if s.compression not in (fb.Compression.none, fb.Compression.zstd):
            raise CorruptArchiveError(
                f"section {i} has unknown compression {s.compression}", offset=where, path=path
            )
        if s.compression == fb.Compression.none and s.length != s.uncompressed_length:
            raise CorruptArchiveError(
                f"section {i} is uncompressed but declares {s.uncompressed_length} bytes "
                f"for {s.length} stored",
                offset=where,
                path=path,
            )
        if len(s.sha256) != 32:
            raise CorruptArchiveError(f"section {i} has no sha256 digest", path=path)
        position = s.offset + s.length
    if position != payload_length:
        raise CorruptArchiveError(
            f"{payload_length - position} bytes after the last section",
            offset=payload_start + position,
            path=path,
        )


def check_padding(
    payload: memoryview, sections: Sequence[Section], *, payload_start: int, path: str | None
) -> None:
    """Checks that the bytes before each section, after the previous one, are zero.

    Raises:
        CorruptArchiveError: a padding byte is not zero (the bytes would not be canonical).
    """
    position = 0
    for i, s in enumerate(sections):
        if any(payload[position : s.offset]):
            raise CorruptArchiveError(
                f"non-zero padding before section {i}", offset=payload_start + position, path=path
            )
        position = s.offset + s.length


#: The largest zstd window of a tensor section (16 MiB), see ``compress_tensor``.
_TENSOR_WINDOW_LOG = 24


def compress_section(parts: Sequence[bytes | memoryview]) -> tuple[list[bytes], Section]:
    """zstd-compresses ``parts`` as one frame with long-distance matching.

    Long-distance matching finds the constants that the primal and each VJP module repeat
    across tens of MB, so they are stored about once. The parameters depend only on the
    input's size, so the output is deterministic. Returns the stored chunks and the Section
    (``offset`` 0, for the caller to place).
    """
    total = sum(len(p) for p in parts)
    params = zstandard.ZstdCompressionParameters.from_level(
        _level_for(total),
        window_log=_window_log(total, _MAX_WINDOW_LOG),
        enable_ldm=True,
        write_content_size=True,
    )
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj(size=total)
    chunks = [c for c in (compressor.compress(p) for p in parts) if c]
    chunks.append(compressor.flush())
    return chunks, _frame_section(chunks, total)


def compress_tensor(data: memoryview, at_most: float = 1.0) -> tuple[list[bytes], Section] | None:
    """One zstd frame of a tensor's bytes (level 3, content size written), streamed in 4 MiB
    pieces; None as soon as the frame grows past ``at_most`` times the bytes read so far (and
    1 MiB, the output's lag): an incompressible tensor costs no frame of its size. The window
    is at most ``2**_TENSOR_WINDOW_LOG``: a tensor repeats little at long range, and a window
    the size of a large tensor would cost the writer that much memory per thread. Returns the
    frame's chunks and its Section (``offset`` 0)."""
    params = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=_window_log(len(data), _TENSOR_WINDOW_LOG), write_content_size=True
    )
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj(size=len(data))
    piece, produced, chunks = 4 * 2**20, 0, []
    for i in range(0, len(data), piece):
        chunk = compressor.compress(data[i : i + piece])
        produced += len(chunk)
        if produced > at_most * (i + piece) + 2**20:
            return None
        if chunk:
            chunks.append(chunk)
    chunks.append(compressor.flush())
    return chunks, _frame_section(chunks, len(data))


def _window_log(total: int, most: int) -> int:
    """The zstd window for ``total`` input bytes: their next power of two, within 2^10..2^most."""
    return min(most, max(10, math.ceil(math.log2(max(total, 1)))))


def _frame_section(chunks: Sequence[bytes], total: int) -> Section:
    """The Section (``offset`` 0) of a zstd frame stored as ``chunks``, ``total`` bytes
    decompressed: its stored length and the sha256 of the stored bytes."""
    digest = hashlib.sha256()
    for c in chunks:
        digest.update(c)
    stored = sum(len(c) for c in chunks)
    return Section(0, stored, fb.Compression.zstd, total, digest.digest())


def _level_for(total: int) -> int:
    # Below 1 MiB, modules are mostly code: entropy coding pays and costs little time.
    # Above, they are mostly constants: fast mode keeps literals raw, so decompression runs at
    # memory speed, and long-distance matching still removes the repeats.
    return 3 if total < 2**20 else -1


class SectionReader:
    """Verifies and decompresses sections of one archive, on demand, with bounded output.

    A section's declared decompressed size is believed only up to ``max_compression_ratio``
    times its stored size (or ``_limits.RATIO_FREE_BYTES``), and so is the total of all zstd
    sections (``_limits.within_ratio``), checked when the reader is made.
    A section's digest is checked once, before its bytes reach the decompressor, and the
    decompressor never writes more than the declared size. A prefix of a section can be
    decompressed alone, so loading the primal module does not pay for the VJPs.

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
    ):
        self._payload = payload
        self._sections = sections
        self._payload_start = payload_start
        self._path = path
        self._verified: set[int] = set()
        self._decompressed: dict[int, bytes | bytearray] = {}
        for i, s in enumerate(sections):
            self._check_ratio(i, s, max_compression_ratio)
        self._check_total_ratio(max_compression_ratio)

    def _check_ratio(self, index: int, s: Section, ratio: float) -> None:
        within = _limits.within_ratio(s.uncompressed_length, s.length, ratio)
        if s.compression == fb.Compression.zstd and not within:
            raise CorruptArchiveError(
                f"section {index} declares {s.uncompressed_length} bytes decompressed from "
                f"{s.length} stored, a ratio over the limit of {ratio:g} (pass a larger "
                "max_compression_ratio to read an archive known to be this compressible)",
                offset=self._payload_start + s.offset,
                path=self._path,
            )

    def _check_total_ratio(self, ratio: float) -> None:
        zstd = [s for s in self._sections if s.compression == fb.Compression.zstd]
        declared, stored = sum(s.uncompressed_length for s in zstd), sum(s.length for s in zstd)
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

    def read(self, index: int, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of section ``index`` after decompression.

        Raises:
            CorruptArchiveError: no such section, a range outside it, or a zstd frame that does
                not decompress to exactly its declared size.
            IntegrityError: the section's stored bytes do not match its digest.
        """
        self.check(index, offset, length)
        s = self._sections[index]
        stored = self._stored(index)
        if s.compression == fb.Compression.none:
            return bytes(stored[offset : offset + length])
        data = self._decompressed.get(index, b"")
        if len(data) < offset + length:
            data = self._decompress(index, stored, offset + length)
            self._decompressed[index] = data
        if isinstance(data, bytes) and (offset, length) == (0, len(data)):
            return data
        return bytes(data[offset : offset + length])

    def _stored(self, index: int) -> memoryview:
        s = self._sections[index]
        stored = self._payload[s.offset : s.offset + s.length]
        if index not in self._verified:
            found = hashlib.sha256(stored).digest()
            if found != s.sha256:
                raise IntegrityError(
                    f"section {index} digest mismatch",
                    expected=s.sha256.hex(),
                    found=found.hex(),
                    offset=self._payload_start + s.offset,
                    path=self._path,
                )
            self._verified.add(index)
        return stored

    def _decompress(self, index: int, stored: memoryview, end: int) -> bytes | bytearray:
        s = self._sections[index]
        where = self._payload_start + s.offset
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
        dctx = zstandard.ZstdDecompressor(max_window_size=2**_MAX_WINDOW_LOG)
        data: bytes | bytearray
        try:
            if end == s.uncompressed_length:
                data = dctx.decompress(  # one frame, nothing after it (no polyglots)
                    stored, max_output_size=s.uncompressed_length, allow_extra_data=False
                )
            else:
                data = _decompress_prefix(dctx, stored, end)
        except zstandard.ZstdError as e:
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
        if len(data) < end:
            raise CorruptArchiveError(
                f"section {index} decompresses to {len(data)} bytes, fewer than {end} declared",
                offset=where,
                path=self._path,
            )
        return data


def _which(zstd: Sequence[Section], sections: Sequence[Section]) -> str:
    """``(the modules and N tensors) `` where the first zstd section is the modules'."""
    if len(zstd) > 1 and zstd[0] is sections[0]:
        return f"(the modules and {len(zstd) - 1} tensors) "
    return ""


def _decompress_prefix(dctx: zstandard.ZstdDecompressor, stored: memoryview, end: int) -> bytearray:
    """The first ``end`` bytes (or fewer, at the frame's end) in one buffer of ``end`` bytes."""
    out = bytearray(end)
    view = memoryview(out)
    filled = 0
    with dctx.stream_reader(stored, read_size=2**20) as reader:
        while filled < end and (n := reader.readinto(view[filled:])):
            filled += n
    view.release()
    del out[filled:]
    return out
