"""Payload sections at the machine's limits (issue 18): zstd's threads, digests beside the work.

``_compress.compress_section`` compresses a large section with zstd's worker threads while a
thread hashes the frame, and stores it raw where the frame would not pay;
``SectionReader`` checks a section's digest while it decompresses, decompresses a module
straight into its ``bytes`` and hashes it on the way. None of it may change what is written
(the same bytes whatever the number of threads) or which error a bad archive gives.
"""

from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zstandard

import jaxport
from jaxport.export import _buffers, _compress, _container, _hashing, _section_reader
from jaxport.schema import fb

_MB = 1 << 20


def _modules(size: int, seed: int = 0) -> list[bytes]:
    """A "primal" of random bytes and a "VJP" that repeats it around new bytes."""
    rng = np.random.default_rng(seed)
    primal = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    return [primal, b"head" + primal[: size // 2] + b"middle" + primal[size // 2 :] + b"tail"]


def _reader(
    chunks: list[bytes | memoryview], section: _container.Section
) -> _container.SectionReader:
    return _container.SectionReader(
        memoryview(b"".join(chunks)), [section], payload_start=0, path=None
    )


def test_a_large_section_is_the_same_whatever_the_number_of_threads(monkeypatch):
    parts = _modules(6 * _MB)  # 12 MiB in all: zstd's worker threads
    assert sum(map(len, parts)) >= _compress.PARALLEL_BYTES
    frames = set()
    for threads in (1, 2, 4, 1):
        monkeypatch.setattr(_compress, "THREADS", threads)
        chunks, section = _compress.compress_section(parts)
        stored = b"".join(chunks)
        assert section.compression == fb.Compression.zstd
        assert section.length < 0.55 * section.uncompressed_length  # the repeat stored once
        assert hashlib.sha256(stored).digest() == section.sha256
        frames.add(stored)
    assert len(frames) == 1


def test_a_section_that_does_not_compress_is_stored_raw():
    parts = [np.random.default_rng(1).integers(0, 256, 9 * _MB, dtype=np.uint8).tobytes()]
    chunks, section = _compress.compress_section(parts)
    assert section.compression == fb.Compression.none
    assert section.length == section.uncompressed_length == 9 * _MB
    assert chunks == parts  # the bytes themselves, not a copy
    assert section.sha256 == hashlib.sha256(parts[0]).digest()
    data, digest = _reader(chunks, section).read_hashed(0, 5, 4 * _MB)
    assert data == parts[0][5 : 5 + 4 * _MB]
    assert digest == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", [1000, 3 * _MB])  # below and above the threaded size
def test_ranges_read_and_hashed_in_any_order(size):
    parts = _modules(size)
    chunks, section = _compress.compress_section(parts)
    whole = b"".join(parts)
    reader = _reader(chunks, section)
    n = len(parts[0])
    ranges = [(0, n), (n, len(parts[1])), (7, 100), (0, len(whole)), (n - 3, 10)]
    with reader.in_order():  # a later range continues the decompression, an earlier restarts
        for offset, length in ranges:
            data, digest = reader.read_hashed(0, offset, length)
            assert data == whole[offset : offset + length]
            assert type(data) is bytes
            assert digest == hashlib.sha256(data).hexdigest()
    for offset, length in ranges:
        assert reader.read(0, offset, length) == whole[offset : offset + length]


def test_a_bad_digest_is_the_error_even_when_the_frame_is_bad_too():
    parts = _modules(3 * _MB)
    chunks, section = _compress.compress_section(parts)
    stored = bytearray(b"".join(chunks))
    block = zstandard.frame_header_size(bytes(stored))
    stored[block : block + 3] = b"\xff\xff\xff"  # the first block is of the reserved type
    bad = _container.SectionReader(memoryview(stored), [section], payload_start=0, path=None)
    with pytest.raises(jaxport.IntegrityError, match="section 0 digest mismatch"):
        bad.read_hashed(0, 0, len(parts[0]) + 10)
    fixed = dataclasses.replace(section, sha256=hashlib.sha256(stored).digest())
    with pytest.raises(jaxport.CorruptArchiveError, match="does not decompress"):
        _container.SectionReader(memoryview(stored), [fixed], payload_start=0, path=None).read(
            0, 0, section.uncompressed_length
        )


@pytest.mark.parametrize("extra", [b"junk", b"\x50\x2a\x4d\x18\x04\x00\x00\x00junk"])
def test_bytes_after_the_frame_are_refused_when_a_module_reaches_the_end(extra):
    parts = _modules(3 * _MB)
    chunks, section = _compress.compress_section(parts)
    stored = b"".join(chunks) + extra
    section = dataclasses.replace(
        section, length=len(stored), sha256=hashlib.sha256(stored).digest()
    )
    reader = _container.SectionReader(memoryview(stored), [section], payload_start=0, path=None)
    assert reader.read(0, 0, len(parts[0])) == parts[0]  # a prefix does not see them
    with pytest.raises(jaxport.CorruptArchiveError, match=f"{len(extra)} bytes after its zstd"):
        reader.read_hashed(0, len(parts[0]), len(parts[1]))


@pytest.mark.parametrize("checksum", [False, True])
def test_frame_length_walks_the_blocks(checksum):
    data = _modules(1 * _MB)[1] + bytes(300_000)  # raw, compressed and RLE blocks
    frame = zstandard.ZstdCompressor(write_checksum=checksum).compress(data)
    assert _section_reader.frame_length(frame + b"more") == len(frame)


def test_bytes_writer_gives_the_bytes_it_was_filled_with():
    for n in (10, 3 * _MB):
        writer = _buffers.BytesWriter(n)
        writer.view[:] = (bytes(range(256)) * (n // 256 + 1))[:n]
        value = writer.value()
        assert type(value) is bytes and len(value) == n and value[:3] == b"\0\1\2"
    writer = _buffers.BytesWriter(2 * _MB)
    writer.view[:5] = b"hello"
    assert writer.value(5) == b"hello"
    with pytest.raises(ValueError, match="bytes of a"):
        _buffers.BytesWriter(4).value(5)


def test_sha256_jobs_give_every_digest_in_order_and_can_be_cancelled():
    datas = [bytes([i]) * (i * 1000) for i in range(10)]
    expected = [hashlib.sha256(d).digest() for d in datas]
    jobs = _hashing.Sha256Jobs(datas, [None, expected[1]])
    jobs.start(2)
    assert jobs.digests(3) == expected
    cancelled = _hashing.Sha256Jobs(datas, [])
    cancelled.cancel()
    with pytest.raises(RuntimeError, match="cancelled"):
        cancelled.digests(1)


def _constants(size: int) -> jax.export.Exported:
    w = np.random.default_rng(0).standard_normal(size // 4).astype(np.float32)
    return jax.export.export(jax.jit(lambda x: x * w))(jax.ShapeDtypeStruct(w.shape, w.dtype))


def test_large_random_constants_are_raw_alone_and_stored_once_with_their_vjp(tmp_path):
    exp = _constants(10 * _MB)
    x = np.ones(exp.in_avals[0].shape, np.float32)
    # version 4: the primal raw in section 0, the VJP's frame against it in section 1
    for order, compression in ((0, ["none"]), (1, ["none", "zstd"])):
        path = tmp_path / f"c{order}.jaxport"
        jaxport.save(exp, path, vjp_order=order)
        info = jaxport.inspect(path)
        assert [s.compression for s in info.sections] == compression
        assert path.stat().st_size < 10.5 * _MB  # the VJP's copy of the constants is not stored
        back = jaxport.load(path)
        np.testing.assert_array_equal(back.call(x), exp.call(x))
        if order:
            grad = jax.grad(lambda x, f=back.call: jnp.sum(f(x)))(x)
            np.testing.assert_array_equal(grad, exp.call(np.ones_like(x)))  # w
        assert jaxport.dumps(back, vjp_order=order) == path.read_bytes()


def test_a_streamed_save_that_cannot_list_custom_calls_leaves_nothing(tmp_path):
    from jaxport.export import _streamed

    modules = [b"module {" + b" " * (9 * _MB)]  # MLIR text, not MLIR that jaxlib reads
    with pytest.raises(jaxport.UnsupportedFeatureError, match="cannot write the Exported"):
        _streamed.save_streamed(tmp_path / "f.jaxport", modules, "the Exported", lambda r, s: b"")
    assert list(tmp_path.iterdir()) == []


def test_one_large_module_is_judged_on_samples():
    size = _compress.SAMPLED_BYTES + 8 * _MB
    rng = np.random.default_rng(2)
    random = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    assert not _compress.samples_pay(random)
    chunks, section = _compress.compress_section([random])
    assert section.compression == fb.Compression.none and chunks == [random]
    mostly_zeros = random[: 4 * _MB] + bytes(size - 4 * _MB)
    assert _compress.samples_pay(mostly_zeros)
    chunks, section = _compress.compress_section([mostly_zeros])
    assert section.compression == fb.Compression.zstd and section.length < 5 * _MB
    assert _reader(chunks, section).read(0, 0, size) == mostly_zeros


def test_a_mapped_archive_replaced_by_save_still_gives_its_vjp(tmp_path):
    exp = _constants(2 * _MB)  # over _mapped.MAP_BYTES: load maps the file
    path = tmp_path / "f.jaxport"
    jaxport.save(exp, path, vjp_order=1)
    back = jaxport.load(path)
    jaxport.save(_constants(2 * _MB + 4), path)  # renamed over the mapped file
    x = np.ones(exp.in_avals[0].shape, np.float32)
    grad = jax.grad(lambda x: jnp.sum(back.call(x)))(x)
    np.testing.assert_array_equal(grad, exp.call(x))
