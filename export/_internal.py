"""What jaxport's own packages use of ``jaxport.export`` beyond its public names: the one
private module of the package another may import (``tests/test_layering.py``). Anything here
may change between releases.

- ``ArchiveLayout`` and ``chunks_layout``: what splitting an archive into parts needs of its
  header, read without jax (a registry server's client pushing a file); ``ranged_layout``:
  the same read by ranges (a client reading a model's skeleton and tensors from a server).
"""

from __future__ import annotations

from jaxport.export._parts import ArchiveLayout, chunks_layout, ranged_layout

__all__ = ["ArchiveLayout", "chunks_layout", "ranged_layout"]
