"""Compressing payload sections on write (schema/FORMAT.md, "Writing").

Section 0 holds the modules: one zstd frame with long-distance matching (LDM), so that the
constants the primal and each VJP module repeat are stored about once. A section of at least
``PARALLEL_BYTES`` is compressed by zstd's own worker threads (zstandard's ``threads=``) while
a thread of ours hashes the frame as it grows; the module bytes are fed to zstd as views, never
copied by jaxport. zstd's streaming multi-threaded output does not depend on the number of
threads (facebook/zstd#2238, #2327), so the same input gives the same archive on any machine.
A section whose frame would keep more than ``RAW_ABOVE`` of its bytes (400 MB of random
constants without their VJP, say) is stored raw (``none``): a reader then copies it instead of
decompressing it. That is known for sure only once the frame has grown past that size, so a
section of one module (no VJP to repeat its constants) of ``SAMPLED_BYTES`` or more is first
judged on samples: ``_SAMPLES`` pieces of ``_SAMPLE`` bytes spread across it, each compressed
alone on one thread (deterministic), whose frames keep more than ``RAW_ABOVE`` of them make it
raw at once; a 2.5 GiB module of random constants is then written without being compressed.

Tensor sections: ``compress_tensor`` (``Model.save(path, compress=True)``,
``_tensor_payloads``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import zstandard

from jaxport.export._hashing import THREADS, Sha256Beside
from jaxport.export._limits import MAX_WINDOW_LOG
from jaxport.export._sections import Section
from jaxport.schema import fb

__all__ = [
    "PARALLEL_BYTES",
    "RAW_ABOVE",
    "SAMPLED_BYTES",
    "DoesNotPay",
    "compress_section",
    "compress_tensor",
    "frame_chunks",
    "raw_section",
    "samples_pay",
]

#: A section whose zstd frame would be more than this fraction of its bytes is stored raw.
RAW_ABOVE = 0.9
#: Sections of at least this many bytes (8 MiB) are compressed by zstd's worker threads.
PARALLEL_BYTES = 8 << 20
#: A one-module section of at least this many bytes (64 MiB) is first judged on samples.
SAMPLED_BYTES = 64 << 20
_SAMPLES, _SAMPLE = 4, 8 << 20
#: The input is fed to zstd in pieces of this size (views of the modules, not copies).
_PIECE = 16 << 20
#: Long-distance matching of large sections: a candidate every 2^10 bytes, matches of at least
#: 256 bytes. zstd's defaults (every 2^7 bytes, 64) find the same repeats of 4 KiB and more
#: at 0.36 GB/s instead of 0.59 GB/s (400 MB of float32 constants, one core; measured).
_LDM_HASH_RATE_LOG = 10
_LDM_MIN_MATCH = 256
#: The largest zstd window of a tensor section (16 MiB), see ``compress_tensor``.
_TENSOR_WINDOW_LOG = 24


class DoesNotPay(Exception):
    """A section's zstd frame would keep more than ``RAW_ABOVE`` of its bytes: store it raw."""


def compress_section(
    parts: Sequence[bytes | memoryview],
) -> tuple[list[bytes | memoryview], Section]:
    """``parts`` as one section: a zstd frame with long-distance matching, or the parts
    themselves (``none``) where the frame would keep more than ``RAW_ABOVE`` of their bytes.

    The parameters depend only on the input's size, so the output is deterministic. Returns
    the stored chunks (for a raw section, ``parts``) and the Section (``offset`` 0, for the
    caller to place).
    """
    total = sum(len(p) for p in parts)
    with Sha256Beside(threaded=total >= PARALLEL_BYTES) as digest:
        try:
            chunks: list[bytes | memoryview] = list(frame_chunks(parts, digest))
        except DoesNotPay:
            return raw_section(parts)
        stored = sum(len(c) for c in chunks)
        return chunks, Section(0, stored, fb.Compression.zstd, total, digest.digest())


def frame_chunks(parts: Sequence[bytes | memoryview], digest: Sha256Beside) -> Iterator[bytes]:
    """The zstd frame of ``parts`` (``compress_section``'s), chunk by chunk as zstd makes
    them, each given to ``digest`` first.

    Raises:
        DoesNotPay: as soon as the frame has grown past ``RAW_ABOVE`` of the parts' bytes (it
            can only grow), or at once for one large part whose samples do not compress.
    """
    total = sum(len(p) for p in parts)
    if len(parts) == 1 and total >= SAMPLED_BYTES and not samples_pay(parts[0]):
        raise DoesNotPay
    compressor = zstandard.ZstdCompressor(compression_params=_section_parameters(total))
    stream = compressor.compressobj(size=total)
    produced, most = 0, RAW_ABOVE * total
    for chunk in _outputs(stream, parts):
        produced += len(chunk)
        if produced > most:
            raise DoesNotPay
        if chunk:
            digest.update(chunk)
            yield chunk


def samples_pay(part: bytes | memoryview) -> bool:
    """Whether ``_SAMPLES`` pieces of ``part``, spread across it and each compressed alone at
    the section's level, keep at most ``RAW_ABOVE`` of their bytes."""
    view = memoryview(part).cast("B")
    step = len(view) // _SAMPLES
    compressor = zstandard.ZstdCompressor(level=_level_for(len(view)))
    stored = sum(
        len(compressor.compress(view[i * step : i * step + _SAMPLE])) for i in range(_SAMPLES)
    )
    return stored <= RAW_ABOVE * _SAMPLES * _SAMPLE


def _section_parameters(total: int) -> zstandard.ZstdCompressionParameters:
    """Level, window and LDM for a section of ``total`` bytes (see ``_level_for``)."""
    large = total >= PARALLEL_BYTES
    return zstandard.ZstdCompressionParameters.from_level(
        _level_for(total),
        window_log=_window_log(total, MAX_WINDOW_LOG),
        enable_ldm=True,
        ldm_hash_rate_log=_LDM_HASH_RATE_LOG if large else 0,
        ldm_min_match=_LDM_MIN_MATCH if large else 0,
        threads=THREADS if large else 0,
        write_content_size=True,
    )


def _outputs(stream: Any, parts: Sequence[bytes | memoryview]) -> Iterator[bytes]:
    """What ``stream`` (a ``ZstdCompressionObj``) gives for each piece of ``parts``, then for
    its flush."""
    for piece in _pieces(parts):
        yield stream.compress(piece)
    yield stream.flush()


def _pieces(parts: Sequence[bytes | memoryview]) -> Iterator[memoryview]:
    """``parts`` in order, as views of at most ``_PIECE`` bytes."""
    for part in parts:
        view = memoryview(part).cast("B")
        for i in range(0, len(view), _PIECE):
            yield view[i : i + _PIECE]


def raw_section(
    parts: Sequence[bytes | memoryview],
) -> tuple[list[bytes | memoryview], Section]:
    """``parts`` as a raw (``none``) section: the parts themselves and their Section."""
    digest = hashlib.sha256()
    for p in parts:
        digest.update(p)
    total = sum(len(p) for p in parts)
    return list(parts), Section(0, total, fb.Compression.none, total, digest.digest())


def compress_tensor(data: memoryview, at_most: float = 1.0) -> tuple[list[bytes], Section] | None:
    """One zstd frame of a tensor's bytes (level 3, content size written), streamed in 4 MiB
    pieces; None as soon as the frame grows past ``at_most`` times the bytes read so far (and
    1 MiB, the output's lag): an incompressible tensor costs no frame of its size. The window
    is at most ``2**_TENSOR_WINDOW_LOG``: a tensor repeats little at long range, and a window
    the size of a large tensor would cost the writer that much memory per thread. Returns the
    frame's chunks and its Section (``offset`` 0)."""
    params = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=_window_log(len(data), _TENSOR_WINDOW_LOG), write_content_size=True
    )
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj(size=len(data))
    piece, produced, chunks = 4 * 2**20, 0, []
    for i in range(0, len(data), piece):
        chunk = compressor.compress(data[i : i + piece])
        produced += len(chunk)
        if produced > at_most * (i + piece) + 2**20:
            return None
        if chunk:
            chunks.append(chunk)
    chunks.append(compressor.flush())
    return chunks, _frame_section(chunks, len(data))


def _window_log(total: int, most: int) -> int:
    """The zstd window for ``total`` input bytes: their next power of two, within 2^10..2^most."""
    return min(most, max(10, math.ceil(math.log2(max(total, 1)))))


def _frame_section(chunks: Sequence[bytes], total: int) -> Section:
    """The Section (``offset`` 0) of a zstd frame stored as ``chunks``, ``total`` bytes
    decompressed: its stored length and the sha256 of the stored bytes."""
    digest = hashlib.sha256()
    for c in chunks:
        digest.update(c)
    stored = sum(len(c) for c in chunks)
    return Section(0, stored, fb.Compression.zstd, total, digest.digest())


def _level_for(total: int) -> int:
    # Below 1 MiB, modules are mostly code: entropy coding pays and costs little time.
    # Above, they are mostly constants: fast mode keeps literals raw, so decompression runs at
    # memory speed, and long-distance matching still removes the repeats.
    return 3 if total < 2**20 else -1
