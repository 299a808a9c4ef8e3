"""The FlatBuffers schema of the jaxport archive header.

``jaxport.fbs`` is the schema, ``FORMAT.md`` the normative byte layout around it, and
``jaxport.schema.fb`` the code flatc generates from the schema (committed, never edited).
"""

from __future__ import annotations

from jaxport.schema import _generated as fb

__all__ = ["FILE_IDENTIFIER", "fb"]

#: The FlatBuffers ``file_identifier`` of the header (bytes 4..8 of the FlatBuffer).
FILE_IDENTIFIER = b"JXPA"
