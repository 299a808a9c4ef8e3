"""A function archive's modules one section per VJP level (format version 4; schema/FORMAT.md,
"Modules"): ``level_sections`` writes them, ``check_level_sections`` checks a header's layout.

Section ``k`` holds the module of VJP order ``k`` (0: the primal) and nothing else. Section 0
is compressed as version 1's one section (``_compress.compress_section``: a zstd frame with
long-distance matching, or raw where that does not pay). Section ``k >= 1`` is one zstd frame
whose matches may reach back into the module of order ``k - 1``, given to zstd as a raw-content
*prefix* (``ZSTD_CCtx_refPrefix``; a reader decompresses the frame with that module as a
raw-content dictionary): the constants a VJP module repeats from its primal are stored about
once, as in version 1's one frame, yet each level is read alone, from its own section and the
module before it, which a reader already holds (the ``Exported`` of that order keeps it). A
level's frame that would keep more than ``RAW_ABOVE`` of its module is stored raw instead.

python-zstandard cannot compress against a prefix (its dictionaries go through a ``CDict``,
whose content long-distance matching does not search: 400 MB of repeated constants stay 400
MB), so level frames are made by the standard library's ``compression.zstd`` (Python 3.14;
``backports.zstd`` before). Its multi-threaded output does not depend on the number of
threads, as python-zstandard's does not (the same zstd).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jaxport import CorruptArchiveError
from jaxport.export import _compress, _modules
from jaxport.export._container import PREAMBLE_LENGTH, Section, section_start
from jaxport.export._hashing import THREADS, Sha256Beside
from jaxport.export._limits import MAX_WINDOW_LOG, within_ratio
from jaxport.export._versions import LEVELS_FORMAT_VERSION
from jaxport.schema import fb

__all__ = [
    "check_level_sections",
    "level_refs",
    "level_section",
    "level_sections",
    "pad_header",
    "padded_chunks",
    "placed",
]

#: The input is fed to zstd in pieces of this size (views of the module, not copies).
_PIECE = 16 << 20
_ALIGN = 64


def level_sections(
    modules: Sequence[bytes], what: str
) -> tuple[list[list[bytes | memoryview]], list[Section], list[_modules.ModuleRef]]:
    """Each module in its own section (module ``k`` in section ``k``): each section's stored
    chunks, its ``Section`` (``offset`` 0, for ``placed``), and each module's reference.

    Large modules are compressed at once, each in a thread (zstd's own worker threads
    beside), while a thread lists the custom calls.

    Raises:
        UnsupportedFeatureError: a module MLIR cannot parse where its custom calls must be read.
    """
    large = sum(len(m) for m in modules) >= _compress.PARALLEL_BYTES
    if not large:
        targets = _modules.writable_targets(modules, what)  # refused before compressing
        sections = [level_section(modules, k) for k in range(len(modules))]
    else:
        with ThreadPoolExecutor(len(modules) + 1, "jaxport-levels") as pool:
            listed = pool.submit(_modules.writable_targets, modules, what)
            futures = [pool.submit(level_section, modules, k) for k in range(len(modules))]
            sections = [f.result() for f in futures]
            targets = listed.result()
    return [c for c, _ in sections], [s for _, s in sections], level_refs(modules, targets)


def level_refs(
    modules: Sequence[bytes], targets: Sequence[tuple[str, ...]]
) -> list[_modules.ModuleRef]:
    """Each module's reference: the whole of its own section, ``targets`` its custom calls."""
    return [
        _modules.ModuleRef(k, 0, len(m), _modules.stablehlo_version(m), listed)
        for k, (m, listed) in enumerate(zip(modules, targets, strict=True))
    ]


def level_section(modules: Sequence[bytes], k: int) -> tuple[list[bytes | memoryview], Section]:
    """Section ``k`` (``offset`` 0, for ``placed``): against the module before it where a
    default reader believes its size (what it declares beyond that module within
    ``MAX_COMPRESSION_RATIO`` of its stored bytes, ``_section_reader``), else alone."""
    if k > 0:
        chunks, section = _chained(modules[k], modules[k - 1])
        beyond = max(0, len(modules[k]) - len(modules[k - 1]))
        if section.compression == fb.Compression.none or within_ratio(beyond, section.length):
            return chunks, section
    return _compress.compress_section([modules[k]])


def _chained(module: bytes, prefix: bytes) -> tuple[list[bytes | memoryview], Section]:
    """``module`` as one zstd frame against ``prefix``, or raw where that does not pay."""
    with Sha256Beside(threaded=len(module) >= _compress.PARALLEL_BYTES) as digest:
        try:
            chunks: list[bytes | memoryview] = list(_frame_chunks(module, prefix, digest))
        except _compress.DoesNotPay:
            return _compress.raw_section([module])
        stored = sum(len(c) for c in chunks)
        return chunks, Section(0, stored, fb.Compression.zstd, len(module), digest.digest())


def _frame_chunks(module: bytes, prefix: bytes, digest: Sha256Beside) -> Iterator[bytes]:
    """The frame, chunk by chunk as zstd makes them, each given to ``digest`` first.

    Raises:
        DoesNotPay: as soon as the frame has grown past ``RAW_ABOVE`` of the module's bytes.
    """
    zstd = _zstd()
    compressor = zstd.ZstdCompressor(
        options=_options(zstd, len(module), len(prefix)),
        zstd_dict=zstd.ZstdDict(prefix, is_raw=True).as_prefix,
    )
    compressor.set_pledged_input_size(len(module))
    view, produced, most = memoryview(module).cast("B"), 0, _compress.RAW_ABOVE * len(module)
    pieces = (view[i : i + _PIECE] for i in range(0, len(view), _PIECE))
    for chunk in (*map(compressor.compress, pieces), compressor.flush()):
        produced += len(chunk)
        if produced > most:
            raise _compress.DoesNotPay
        if chunk:
            digest.update(chunk)
            yield chunk


def _options(zstd: Any, size: int, prefix: int) -> dict[Any, int]:
    """The frame's parameters, which depend only on the sizes (deterministic output): the
    level of ``_compress`` for ``size`` bytes, a window that reaches the prefix's start, and
    long-distance matching (its sparser settings and zstd's worker threads from
    ``PARALLEL_BYTES`` on, as ``_compress``)."""
    p = zstd.CompressionParameter
    large = size >= _compress.PARALLEL_BYTES
    window = _compress._window_log(size + prefix, MAX_WINDOW_LOG)
    options = {
        p.compression_level: _compress._level_for(size),
        p.window_log: window,
        p.enable_long_distance_matching: 1,
        p.content_size_flag: 1,
        p.checksum_flag: 0,
        p.dict_id_flag: 0,
    }
    if large:
        options |= {
            p.ldm_hash_rate_log: _compress._LDM_HASH_RATE_LOG,
            p.ldm_min_match: _compress._LDM_MIN_MATCH,
            p.nb_workers: THREADS,
        }
    return options


@functools.cache
def _zstd() -> Any:
    """The standard library's zstd (``compression.zstd``, Python 3.14), else its backport."""
    try:
        from compression import zstd  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        from backports import zstd  # type: ignore[import-not-found, no-redef, unused-ignore]
    return zstd


def placed(sections: Sequence[Section]) -> list[Section]:
    """``sections`` one after the other from the payload's start, each at a multiple of 64
    bytes (version 4; the header is padded so that the payload starts at one, ``pad_header``)."""
    result, position = [], 0
    for s in sections:
        start = section_start(position, payload_start=0, format_version=LEVELS_FORMAT_VERSION)
        result.append(Section(start, s.length, s.compression, s.uncompressed_length, s.sha256))
        position = start + s.length
    return result


def padded_chunks(
    chunks: Sequence[Sequence[bytes | memoryview]], sections: Sequence[Section]
) -> list[bytes | memoryview]:
    """Each section's chunks after the zero bytes that put it at its (placed) offset."""
    result: list[bytes | memoryview] = []
    position = 0
    for c, s in zip(chunks, sections, strict=True):
        if s.offset > position:
            result.append(bytes(s.offset - position))
        result.extend(c)
        position = s.offset + s.length
    return result


def pad_header(header: bytes) -> bytes:
    """``header`` with zero bytes after it, so that the payload starts at a multiple of 64."""
    return header + bytes(-(PREAMBLE_LENGTH + len(header)) % _ALIGN)


def check_level_sections(refs: Sequence[_modules.ModuleRef], sections: Sequence[Section]) -> None:
    """A version-4 function archive's layout: the module of order ``k`` is the whole of
    section ``k``, and there is no other section.

    Raises:
        CorruptArchiveError: another layout (a module range inside a section, a section no
            module owns).
    """
    if len(sections) != len(refs):
        raise CorruptArchiveError(
            f"{len(sections)} sections for {len(refs)} modules (format version 4: one a level)"
        )
    for k, (ref, s) in enumerate(zip(refs, sections, strict=True)):
        if (ref.section, ref.offset, ref.length) != (k, 0, s.uncompressed_length):
            name = "the primal" if k == 0 else f"the VJP of order {k}"
            raise CorruptArchiveError(
                f"{name}'s module is bytes [{ref.offset}, {ref.offset + ref.length}) of section "
                f"{ref.section}, not the whole of section {k} (format version 4)"
            )
