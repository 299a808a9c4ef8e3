"""HTTP ``Range`` headers (RFC 9110, section 14): one range of bytes, or none."""

from __future__ import annotations

import re

from jaxport import InvalidNameError

__all__ = ["byte_range"]

_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
#: Digits of a position read as a number; a longer one (past 2**63) is past every blob's end.
_DIGITS = 18
_BEYOND = 1 << 63


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` (end exclusive) of a ``Range: bytes=A-B`` header on ``size`` bytes;
    None for no header. Several ranges are not served (the whole is). An end past the last
    byte is clamped to it (RFC 9110); a position may have any number of digits.

    Raises:
        InvalidNameError: a malformed or unsatisfiable range.
    """
    if not header:
        return None
    m = _RANGE.fullmatch(header.strip())
    if m is None:
        if "," in header:
            return None
        raise InvalidNameError(f"a Range header of the form bytes=START-END, got {header!r:.60}")
    first, last = m.groups()
    if not first and not last:
        raise InvalidNameError("a Range header needs a start or an end")
    if not first:  # the last N bytes
        start, end = max(0, size - _number(last)), size
    else:
        start = _number(first)
        end = size if not last else min(size, _number(last) + 1)
    if start >= size or start >= end:
        raise InvalidNameError(f"the range {header!r:.60} is outside the {size} bytes")
    return start, end


def _number(digits: str) -> int:
    """A position's digits as an int; one too long to be a position is ``_BEYOND`` (never
    ``int()`` of thousands of digits, which Python refuses)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= _DIGITS else _BEYOND
