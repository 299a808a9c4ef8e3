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

Sections are written by ``_compress`` and read by ``_section_reader`` (``Section``,
``SectionReader``, ``compress_section`` and ``compress_tensor`` are re-exported here).
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Sequence

from jaxport import CorruptArchiveError, IntegrityError, UnsupportedVersionError
from jaxport.export import _fb, _limits
from jaxport.export._compress import compress_section, compress_tensor
from jaxport.export._section_reader import SectionReader
from jaxport.export._sections import Section
from jaxport.export._versions import (
    LEVELS_FORMAT_VERSION,
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
    "ArchiveHeader",
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
    "read_header",
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


@dataclasses.dataclass(frozen=True)
class Preamble:
    """The fixed-size start of an archive."""

    format_version: int
    header_length: int
    header_sha256: bytes


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


@dataclasses.dataclass(frozen=True)
class ArchiveHeader:
    """A checked preamble and header, and the payload's place; read by ``read_header``."""

    preamble: Preamble
    archive: fb.Archive
    sections: list[Section]
    payload_start: int
    total_length: int

    @property
    def chained(self) -> bool:
        """A version-4 function archive: section ``k`` is decompressed with section ``k - 1``
        as its prefix (``SectionReader(chained=True)``, ``_level_sections``)."""
        return (
            self.preamble.format_version >= LEVELS_FORMAT_VERSION and self.archive.Model() is None
        )


def read_header(head: bytes | memoryview, total_length: int, *, path: str | None) -> ArchiveHeader:
    """Checks and parses the preamble and header at the start of an archive.

    Args:
        head: the archive's first bytes: at least the preamble and the header.
        total_length: the archive's whole length in bytes, to check section ranges.
        path: the file, for error messages.

    Raises:
        CorruptArchiveError, IntegrityError, UnsupportedVersionError: see ``loads``.
    """
    preamble = decode_preamble(head, path=path)
    payload_start = PREAMBLE_LENGTH + preamble.header_length
    header = bytes(head[PREAMBLE_LENGTH:payload_start])
    check_header(header, preamble, path=path)
    with _fb.translating_read_errors(path):
        archive = fb.Archive.GetRootAs(header, 0)
        check_section_count(
            archive.SectionsLength(), format_version=preamble.format_version, path=path
        )
        sections = [_decode_section(s) for s in _fb.read_tables(archive, "Sections")]
        _limits.check_vjp_order(archive.VjpOrder())
    check_sections(
        sections,
        total_length - payload_start,
        payload_start=payload_start,
        path=path,
        format_version=preamble.format_version,
    )
    return ArchiveHeader(preamble, archive, sections, payload_start, total_length)


def _decode_section(table: fb.Section) -> Section:
    return Section(
        offset=table.Offset(),
        length=table.Length(),
        compression=table.Compression(),
        uncompressed_length=table.UncompressedLength(),
        sha256=_fb.read_bytes(table, "Sha256") or b"",
    )
