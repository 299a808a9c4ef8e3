"""One push that stops between writing its blob and committing, until a gate file exists.

Usage::

    python _gated_push.py URL BLOBS ARCHIVE GATE

Prints ``written PID`` (its pid as its own PID namespace numbers it) once the blob is in place
and its pending rows are committed, waits for the file GATE, then finishes the push and prints
``pushed NAME:VERSION``. ``test_pending_rows.py`` runs it in a PID namespace of its own.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


class GatedBlobStore:
    """A local blob store whose first ``put`` waits for ``gate`` after writing."""

    def __init__(self, inner: Any, gate: Path):
        self._inner = inner
        self.url = inner.url
        self._gate = gate

    def put(self, digest: str, data: bytes, *, replace: bool = False) -> None:
        self._inner.put(digest, data, replace=replace)
        print(f"written {os.getpid()}", flush=True)
        while not self._gate.exists():
            time.sleep(0.05)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def main(argv: list[str]) -> None:
    """Pushes ARCHIVE as ``gated`` (see the module docstring)."""
    url, blobs, archive, gate = argv
    import jaxport
    from jaxport.registry import LocalBlobStore

    store = GatedBlobStore(LocalBlobStore(blobs), Path(gate))
    with jaxport.Registry(url, blobs=store) as reg:
        ref = reg.push(Path(archive).read_bytes(), "gated")
    print(f"pushed {ref.name}:{ref.version}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
