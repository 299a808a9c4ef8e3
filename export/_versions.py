"""Archive format versions.

The format version is written in every archive's preamble and checked on every read
(schema/FORMAT.md, "Versions"). Changelog, one line per version:

  1 (2026-11-21): first release. FlatBuffers header `jaxport.fb.Archive` ("JXPA"), one zstd
    payload section holding the StableHLO modules of the primal and of each VJP order.
"""

from __future__ import annotations

__all__ = ["FORMAT_VERSION", "MAX_SUPPORTED_FORMAT_VERSION", "MIN_SUPPORTED_FORMAT_VERSION"]

#: The format version this writer writes.
FORMAT_VERSION = 1
#: The oldest format version this reader reads.
MIN_SUPPORTED_FORMAT_VERSION = 1
#: The newest format version this reader reads.
MAX_SUPPORTED_FORMAT_VERSION = 1
