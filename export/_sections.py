"""A payload section as the header records it (schema/FORMAT.md, "Sections")."""

from __future__ import annotations

import dataclasses

__all__ = ["Section"]


@dataclasses.dataclass(frozen=True)
class Section:
    """A payload section: ``offset`` is from the start of the payload; sizes in bytes.

    Attributes:
        offset: where its stored bytes start, from the first byte of the payload.
        length: its stored bytes.
        compression: ``fb.Compression.none`` (the bytes themselves) or ``zstd`` (one frame).
        uncompressed_length: its bytes once decompressed (``length`` for a raw section).
        sha256: the digest of its stored bytes (32 bytes).
    """

    offset: int
    length: int
    compression: int
    uncompressed_length: int
    sha256: bytes
