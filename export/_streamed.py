"""Saving a function archive while its modules compress: compressing, hashing and writing at
once.

The header comes first in the file but holds what is known last: the section's stored length
and digest. ``save_streamed`` writes a placeholder of the header's size (the length and the
digest are fixed-size fields), then each chunk of the zstd frame as soon as zstd makes it
(zstd's worker threads go on compressing meanwhile, and a thread hashes the chunk), then the
real header over the placeholder (``atomic_write(..., head=...)``). The custom calls are
listed in a thread meanwhile; the chunks made before they are known wait in memory. A frame
that stops paying (``_compress.DoesNotPay``) abandons its temporary file, and the raw section
is written instead. The bytes are those of ``dumps``: the same frame, the same header.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from jaxport._io import atomic_write
from jaxport.export import _modules
from jaxport.export._compress import DoesNotPay, frame_chunks, raw_section
from jaxport.export._hashing import Sha256Beside
from jaxport.export._sections import Section
from jaxport.schema import fb

__all__ = ["FirstChunk", "save_streamed"]

#: The preamble and header of an archive, given its modules' references and its section.
FirstChunk = Callable[[list[_modules.ModuleRef], Section], bytes]


def save_streamed(
    path: str | os.PathLike[str], modules: Sequence[bytes], what: str, first: FirstChunk
) -> None:
    """Writes the archive ``first(refs, section)`` + section 0 (``modules``) to ``path``
    atomically, compressing, hashing and writing at once.

    Raises:
        OSError: the directory is missing or not writable.
        UnsupportedFeatureError: a module MLIR cannot parse where its custom calls must be read
            (``_modules.writable_targets``, ``what`` names the archive's contents).
    """
    total = sum(len(m) for m in modules)
    with ThreadPoolExecutor(1, "jaxport-targets") as pool:
        listed = pool.submit(_modules.writable_targets, modules, what)
        with Sha256Beside(threaded=True) as digest:
            frame = frame_chunks(modules, digest)
            refs: list[_modules.ModuleRef] = []
            stored = placeholder = 0

            def chunks() -> Iterator[bytes]:
                nonlocal refs, stored, placeholder
                early = []
                for chunk in frame:  # compressing while the targets are listed
                    early.append(chunk)
                    if listed.done():
                        break
                refs = _modules.module_refs(modules, listed.result())
                head = first(refs, _placeholder(total))
                placeholder = len(head)
                yield head
                for chunk in itertools.chain(early, frame):
                    stored += len(chunk)
                    yield chunk

            def head() -> bytes:
                section = Section(0, stored, fb.Compression.zstd, total, digest.digest())
                data = first(refs, section)
                assert len(data) == placeholder  # only fixed-size fields changed
                return data

            try:
                atomic_write(path, chunks(), head=head)
                return
            except DoesNotPay:
                pass
        parts, section = raw_section(modules)
        atomic_write(path, [first(_modules.module_refs(modules, listed.result()), section), *parts])


def _placeholder(total: int) -> Section:
    """A zstd section's record of the final one's size: every field that the final one
    writes, written (FlatBuffers omits a field equal to its default, 0)."""
    return Section(0, 1, fb.Compression.zstd, total, bytes(32))
