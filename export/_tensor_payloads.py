"""How a model archive stores each tensor's section: its raw bytes, or one zstd frame where
compression pays (``Model.save(path, compress=True)``).

Raw sections are what a reader maps without copying, so they are the default. A compressed
section is kept only where it is at most 7/8 of the raw bytes and within the compression ratio
every reader accepts by default, for the section and for all the archive's zstd sections
together (``_limits.within_ratio``): a writer never makes an archive that a default reader
refuses, so a large all-zero tensor stays raw.

Memory: the frames kept are held until they are written (at most 7/8 of the tensors they
hold), plus one compressor (about 16 MiB of window and its tables) per thread; a frame that
stops paying is dropped as soon as it grows past 7/8 of what it has read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from jaxport.export import _container, _limits
from jaxport.export._tensors import THREADS
from jaxport.schema import fb

__all__ = ["MIN_COMPRESSED_BYTES", "TensorPayload", "tensor_payloads"]

#: Tensors smaller than this are stored raw: a frame's overhead would eat the gain.
MIN_COMPRESSED_BYTES = 4096
#: At most this many tensors are compressed at once (each compressor holds a window of up to
#: 16 MiB and its tables).
_COMPRESS_THREADS = 4


@dataclasses.dataclass(frozen=True)
class TensorPayload:
    """A tensor's section as stored: ``chunks`` (the raw bytes, or a zstd frame), its
    ``compression`` (``fb.Compression``) and, for a compressed one, the sha256 of the stored
    bytes (a raw section's digest is the tensor's own, known once it is hashed)."""

    chunks: Sequence[bytes | memoryview]
    compression: int
    stored_sha256: bytes | None

    @property
    def length(self) -> int:
        """Stored bytes."""
        return sum(len(c) for c in self.chunks)


def tensor_payloads(
    datas: Sequence[memoryview], *, compress: bool, modules: _container.Section
) -> list[TensorPayload]:
    """Each tensor's payload: raw, or (``compress``) zstd where it pays (compressed in threads:
    zstandard releases the GIL). ``modules``: the archive's modules section, which counts
    toward the archive's total ratio where it is zstd."""
    if not compress:
        return [_raw(d) for d in datas]
    with ThreadPoolExecutor(min(THREADS, _COMPRESS_THREADS)) as pool:
        candidates = list(pool.map(_candidate, datas))
    declared, stored = 0, 0
    if modules.compression == fb.Compression.zstd:  # a raw modules' section counts for nothing
        declared, stored = modules.uncompressed_length, modules.length
    payloads = []
    for data, candidate in zip(datas, candidates, strict=True):
        total = (declared + len(data), stored + (candidate.length if candidate else 0))
        if candidate is None or not _limits.within_ratio(*total):
            payloads.append(_raw(data))
            continue
        declared, stored = total
        payloads.append(candidate)
    return payloads


def _raw(data: memoryview) -> TensorPayload:
    return TensorPayload([data], fb.Compression.none, None)


def _candidate(data: memoryview) -> TensorPayload | None:
    """``data`` as one zstd frame, if that saves an eighth and stays within the ratio."""
    if len(data) < MIN_COMPRESSED_BYTES:
        return None
    frame = _container.compress_tensor(data, at_most=7 / 8)
    if frame is None:
        return None
    chunks, section = frame
    if section.length > len(data) * 7 // 8 or not _limits.within_ratio(len(data), section.length):
        return None
    return TensorPayload(chunks, fb.Compression.zstd, section.sha256)
