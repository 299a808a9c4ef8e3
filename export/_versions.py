"""Archive format versions.

The format version is written in every archive's preamble and checked on every read
(schema/FORMAT.md, "Versions"). A writer writes the lowest version that holds what it writes:
function archives are still version 1, so every reader since the first reads them and their
bytes (and registry digests) did not change; model archives are version 2, or 3 where a tensor
section is compressed. Changelog, one line per version:

  1 (2026-11-21): first release. FlatBuffers header `jaxport.fb.Archive` ("JXPA"), one zstd
    payload section holding the StableHLO modules of the primal and of each VJP order.
  2 (2026-11-22): model archives. `Archive.model` (parameter tree, one uncompressed section
    per tensor with its own sha256, named methods each an Exported with its VJPs); in a
    version-2 archive every section starts at a multiple of 64 bytes from the start of the
    archive, after zero padding.
  3 (2026-11-22): a model archive's tensor section may be one zstd frame (its section digest
    is the frame's, the tensor's digest that of the decompressed bytes); no schema change. The
    compression-ratio bound also holds for all zstd sections together (every version).
  4 (2026-11-28): a function archive with VJPs has one section per VJP level (the module of
    order k is the whole of section k), 64-byte aligned after a padded header; a level's zstd
    frame may match into the module of the order before it (a raw-content prefix), so each
    level is read alone. No schema change. Function archives without VJPs are still version 1.
"""

from __future__ import annotations

__all__ = [
    "COMPRESSED_MODEL_FORMAT_VERSION",
    "FORMAT_VERSION",
    "FUNCTION_FORMAT_VERSION",
    "LEVELS_FORMAT_VERSION",
    "MAX_SUPPORTED_FORMAT_VERSION",
    "MIN_SUPPORTED_FORMAT_VERSION",
    "MODEL_FORMAT_VERSION",
    "section_alignment",
]

#: The newest format version this writer writes.
FORMAT_VERSION = 4
#: The version of a function archive (``dumps``): the first, unchanged.
FUNCTION_FORMAT_VERSION = 1
#: The version of a function archive with VJPs: one section per VJP level, each level's frame
#: against the module before it (``_level_sections``).
LEVELS_FORMAT_VERSION = 4
#: The version of a model archive (``Model.dumps``) whose tensor sections are all raw.
MODEL_FORMAT_VERSION = 2
#: The version of a model archive with a compressed tensor section (``compress=True``).
COMPRESSED_MODEL_FORMAT_VERSION = 3
#: The oldest format version this reader reads.
MIN_SUPPORTED_FORMAT_VERSION = 1
#: The newest format version this reader reads.
MAX_SUPPORTED_FORMAT_VERSION = 4


def section_alignment(format_version: int) -> int:
    """Where sections start, in bytes from the start of the archive: a multiple of this."""
    return 1 if format_version < 2 else 64
