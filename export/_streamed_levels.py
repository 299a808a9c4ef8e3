"""Saving a large function archive with VJPs (format version 4) while its levels compress:
the sections already known are written while the later ones are still being made.

The header comes first in the file but holds what is known last (each section's stored
length and digest). Its padded size is known earlier: FlatBuffers writes every numeric field
at a fixed size and omits only a field equal to its default (0), and the header is padded to
a multiple of 64 bytes (``_level_sections.pad_header``). So once the custom calls are listed,
``save_levels_streamed`` writes a placeholder of the header's padded size (``_placeholders``:
each section's record as the final one will be, but for its length and digest), then each
section at its offset as soon as it and every section before it are known: a raw section 0
(a module of large constants that do not compress, judged on samples) at once, its digest
taken in a thread meanwhile, so that its bytes go to the page cache while zstd compresses the
VJP levels against it. The real header is written over the placeholder at the end
(``atomic_write(..., head=...)``). Where the real header's padded size differs (a level that
was expected to pay and was stored raw, which moves a field across a 64-byte boundary), the
temporary file is dropped and the archive is written again in one pass, as ``dumps`` makes it.
The bytes are always those of ``dumps``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from jaxport._io import atomic_write
from jaxport.export import _compress, _level_sections, _modules
from jaxport.export._container import section_start
from jaxport.export._sections import Section
from jaxport.export._versions import LEVELS_FORMAT_VERSION
from jaxport.schema import fb

__all__ = ["FirstChunk", "save_levels_streamed"]

#: The preamble and padded header of a version-4 archive, given its modules' references and
#: its placed sections.
FirstChunk = Callable[[list[_modules.ModuleRef], list[Section]], bytes]
_Made = tuple[list[bytes | memoryview], Section]


class _Misfit(Exception):
    """The real header's padded size differs from the placeholder's."""


def save_levels_streamed(
    path: str | os.PathLike[str], modules: Sequence[bytes], what: str, first: FirstChunk
) -> None:
    """Writes the version-4 archive of ``modules`` (module ``k`` the VJP of order ``k``) to
    ``path`` atomically, each section as soon as it and those before it are known; the bytes
    of ``dumps``.

    Raises:
        OSError: the directory is missing or not writable.
        UnsupportedFeatureError: a module MLIR cannot parse where its custom calls must be read
            (``_modules.writable_targets``, ``what`` names the archive's contents).
    """
    # as _compress.compress_section decides for one large module: raw when samples do not pay
    raw_first = len(modules[0]) >= _compress.SAMPLED_BYTES and not _compress.samples_pay(modules[0])
    with ThreadPoolExecutor(len(modules) + 1, "jaxport-levels") as pool:
        listed = pool.submit(_modules.writable_targets, modules, what)
        made: list[Future[_Made]] = [
            pool.submit(_compress.raw_section, [modules[0]])
            if raw_first
            else pool.submit(_level_sections.level_section, modules, 0)
        ]
        made += [
            pool.submit(_level_sections.level_section, modules, k) for k in range(1, len(modules))
        ]
        refs: list[_modules.ModuleRef] = []
        reserved = 0

        def chunks() -> Iterator[bytes | memoryview]:
            nonlocal refs, reserved
            refs = _level_sections.level_refs(modules, listed.result())
            reserved = len(first(refs, _placeholders(modules, raw_first)))
            yield bytes(reserved)
            position = 0
            for k, future in enumerate(made):
                if k == 0 and raw_first:  # the module's own bytes; its digest comes later
                    stored: Sequence[bytes | memoryview] = [modules[0]]
                    length = len(modules[0])
                else:
                    stored, section = future.result()
                    length = section.length
                start = _start(position)
                if start > position:
                    yield bytes(start - position)
                yield from stored
                position = start + length

        def head() -> bytes:
            data = first(refs, _level_sections.placed([f.result()[1] for f in made]))
            if len(data) != reserved:
                raise _Misfit
            return data

        try:
            atomic_write(path, chunks(), head=head)
            return
        except _Misfit:  # written again in one pass
            pass
        sections = _level_sections.placed([f.result()[1] for f in made])
        stored_chunks = [f.result()[0] for f in made]
        atomic_write(
            path, [first(refs, sections), *_level_sections.padded_chunks(stored_chunks, sections)]
        )


def _start(position: int) -> int:
    """Where a section after payload offset ``position`` starts (``_level_sections.placed``)."""
    return section_start(position, payload_start=0, format_version=LEVELS_FORMAT_VERSION)


def _placeholders(modules: Sequence[bytes], raw_first: bool) -> list[Section]:
    """Placed sections whose records have the size of the final ones where each level pays as
    expected (section 0 raw when ``raw_first``, every other one a zstd frame): every field the
    final record writes is written (FlatBuffers omits a field equal to its default, 0), with a
    length of 1 and a zero digest."""
    return _level_sections.placed(
        [
            Section(
                0,
                1,
                fb.Compression.none if k == 0 and raw_first else fb.Compression.zstd,
                len(m),
                bytes(32),
            )
            for k, m in enumerate(modules)
        ]
    )
