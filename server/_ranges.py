"""HTTP ``Range`` headers (RFC 9110, section 14): one range of bytes, or none."""

from __future__ import annotations

import re

from jaxport._errors import InvalidNameError

__all__ = ["byte_range"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` (end exclusive) of a ``Range: bytes=A-B`` header on ``size`` bytes;
    None for no header. Several ranges are not served (the whole is).

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
        start, end = max(0, size - int(last)), size
    else:
        start = int(first)
        end = size if not last else min(size, int(last) + 1)
    if start >= size or start >= end:
        raise InvalidNameError(f"the range {header!r:.60} is outside the {size} bytes")
    return start, end
