"""Format version 4: a function archive with VJPs keeps each level's module in a section of its
own, the VJP's frame against the module before it (export/_level_sections.py); ``load`` reads
the primal's section alone, and ``.vjp()`` its level's, digest first (issue 27 §3)."""

from __future__ import annotations

import gc
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxport
from jaxport.export import _archive, _container, _level_sections, _limits
from jaxport.schema import fb

_MB = 1 << 20


@pytest.fixture(scope="module")
def exported() -> jax.export.Exported:
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    return jax.export.export(jax.jit(lambda x: jnp.tanh(x @ w)))(jnp.zeros((4, 64)))


def _head(data: bytes) -> _container.ArchiveHeader:
    return _container.read_header(memoryview(data), len(data), path=None)


def test_each_level_is_a_section_of_its_own(exported):
    data = jaxport.dumps(exported, vjp_order=2)
    head = _head(data)
    assert head.preamble.format_version == 4 and head.chained
    assert head.payload_start % 64 == 0 and all(s.offset % 64 == 0 for s in head.sections)
    back = jaxport.loads(data)
    modules = [back, back.vjp(), back.vjp().vjp()]
    assert [s.uncompressed_length for s in head.sections] == [
        len(m.mlir_module_serialized) for m in modules
    ]
    expected = _archive.vjp_chain(exported, 2)  # the modules as dumps stores them
    assert [m.mlir_module_serialized for m in modules] == [
        e.mlir_module_serialized for e in expected
    ]
    assert jaxport.dumps(back, vjp_order=2) == data  # deterministic, read back byte for byte
    assert jaxport.inspect(jaxport.dumps(exported)).format_version == 1  # no VJP: version 1


def test_a_corrupt_vjp_section_fails_its_vjp_not_the_load(exported):
    data = bytearray(jaxport.dumps(exported, vjp_order=1))
    head = _head(bytes(data))
    vjp = head.sections[1]
    data[head.payload_start + vjp.offset + vjp.length // 2] ^= 0x40
    loaded = jaxport.loads(bytes(data))  # the primal's section alone is read
    x = np.ones((4, 64), np.float32)
    np.testing.assert_array_equal(loaded.call(x), exported.call(x))
    with pytest.raises(jaxport.IntegrityError, match="section 1 digest") as e:
        loaded.vjp()
    assert e.value.expected == vjp.sha256.hex() != e.value.found


def test_nothing_of_a_corrupt_vjp_section_is_vetted_or_given_out(exported, monkeypatch):
    """The decompressor may run beside the digest (FORMAT.md step 9); its output reaches
    nothing (the sandbox, jax) before the digest matched."""
    from jaxport.export import _vetting

    data = bytearray(jaxport.dumps(exported, vjp_order=1))
    head = _head(bytes(data))
    data[head.payload_start + head.sections[1].offset + 20] ^= 0x01
    loaded = jaxport.loads(bytes(data))
    vetted: list[int] = []
    real = _vetting.vet_module
    monkeypatch.setattr(
        _vetting, "vet_module", lambda *a, **k: vetted.append(k["order"]) or real(*a, **k)
    )
    with pytest.raises(jaxport.IntegrityError):
        loaded.vjp()
    assert vetted == []


def test_no_decompressor_outlives_the_vjp_read(exported):
    loaded = jaxport.loads(jaxport.dumps(exported, vjp_order=1))
    loaded.vjp()
    gc.collect()
    names = {f"{type(o).__module__}.{type(o).__name__}" for o in gc.get_objects()}
    assert not [n for n in names if n.startswith("zstandard") and "Decompress" in n]


def test_a_module_inside_another_section_is_refused_in_version_4(exported):
    """A version-1 layout (both modules in section 0) labelled version 4 is refused."""
    chain = _archive.vjp_chain(exported, 1)
    chunks, section, refs = _archive.module_section(chain, "the Exported")
    for n in range(64):  # a header that ends 64-byte aligned, as version 4 needs
        header = _archive._encode_header(chain, refs, [section], 1, [("k", "v" * n)])
        if (56 + len(header)) % 64 == 0:
            break
    data = _container.encode_preamble(header, 4) + header + b"".join(chunks)
    with pytest.raises(jaxport.CorruptArchiveError, match="1 sections for 2 modules"):
        jaxport.loads(data)


def test_nonzero_padding_between_levels_is_refused(exported):
    data = bytearray(jaxport.dumps(exported, vjp_order=1))
    head = _head(bytes(data))
    gap = head.payload_start + head.sections[0].offset + head.sections[0].length
    assert head.sections[1].offset > head.sections[0].length, "no padding to corrupt"
    data[gap] = 1
    with pytest.raises(jaxport.CorruptArchiveError, match="non-zero padding before section 1"):
        jaxport.loads(bytes(data))


def test_a_level_declares_at_most_the_ratio_beyond_the_module_before_it():
    digest = bytes(32)
    sections = [
        _container.Section(0, 4 * _MB, fb.Compression.none, 4 * _MB, digest),
        _container.Section(4 * _MB, 64, fb.Compression.zstd, 4 * _MB + 17 * _MB, digest),
    ]
    payload = memoryview(bytes(4 * _MB + 64))
    with pytest.raises(jaxport.CorruptArchiveError, match="beyond the section before it"):
        _container.SectionReader(payload, sections, payload_start=0, path=None, chained=True)
    sections[1] = _container.Section(4 * _MB, 64, fb.Compression.zstd, 4 * _MB + 15 * _MB, digest)
    _container.SectionReader(payload, sections, payload_start=0, path=None, chained=True)


def _levels(modules: list[bytes]) -> tuple[memoryview, list[_container.Section]]:
    """A chained payload of ``modules``, each level's frame against the module before it."""
    chunks: list[list[bytes | memoryview]] = []
    sections: list[_container.Section] = []
    for k in range(len(modules)):
        stored, section = _level_sections.level_section(modules, k)
        chunks.append(stored)
        sections.append(section)
    sections = _level_sections.placed(sections)
    return memoryview(b"".join(_level_sections.padded_chunks(chunks, sections))), sections


def test_every_level_read_in_order_is_decompressed_once(monkeypatch):
    """A reader that does not hold the module before a level (``module_custom_calls``, audits)
    reads every level in order: each section is decompressed once, in a loop. It recursed into
    the level before, again for each level (quadratic; 1,100 levels: RecursionError, a valid
    archive refused as a malformed header; found by fuzzing)."""
    from jaxport.export import _section_reader

    modules = [b"module %d " % k + b"constant " * 40 for k in range(1100)]
    payload, sections = _levels(modules)
    assert all(s.compression == fb.Compression.zstd for s in sections[1:])
    reader = _container.SectionReader(payload, sections, payload_start=0, path=None, chained=True)
    made: list[bytes | None] = []
    real = _section_reader._decompressor
    monkeypatch.setattr(
        _section_reader, "_decompressor", lambda p=None, **k: made.append(p) or real(p, **k)
    )
    for k, module in enumerate(modules):
        assert reader.read(k, 0, len(module)) == module
    assert [p for p in made if p is not None] == modules[:-1]  # each level's prefix, once


def test_a_level_read_alone_reads_the_levels_before_it_in_a_loop():
    modules = [b"module %d " % k + b"constant " * 40 for k in range(1100)]
    payload, sections = _levels(modules)
    reader = _container.SectionReader(payload, sections, payload_start=0, path=None, chained=True)
    assert reader.read(1099, 0, len(modules[-1])) == modules[-1]
    assert reader.read(1098, 0, len(modules[-2])) == modules[-2]


def _long_chain(exported: jax.export.Exported, n: int) -> bytes:
    """A version-4 archive of ``n`` levels, each ``exported``'s module (its frame against the
    same module before it: a few bytes a level)."""
    module = bytes(exported.mlir_module_serialized)
    modules = [module] * n
    first, second = (_level_sections.level_section(modules, k) for k in (0, 1))
    chunks = [first[0]] + [second[0]] * (n - 1)
    sections = _level_sections.placed([first[1]] + [second[1]] * (n - 1))
    refs = _level_sections.level_refs(modules, [()] * n)
    header = _archive._encode_header([exported] * n, refs, sections, n - 1, [])
    header = _level_sections.pad_header(header)
    payload = _level_sections.padded_chunks(chunks, sections)
    return _container.encode_preamble(header, 4) + header + b"".join(payload)


def test_a_server_reads_a_level_after_the_levels_before_it_in_a_loop(exported):
    """``module_of`` (the registry server's module route) of the last level reads the header
    once and each section once; it recursed into the level before, reading the header again
    each time (before ``MAX_VJP_ORDER``, a 1 MB archive of 1,200 levels: 16 s for level 200,
    minutes for 1,199; found by fuzzing)."""
    from jaxport.export._internal import module_of

    n = _limits.MAX_VJP_ORDER + 1
    data = _long_chain(exported, n)
    reads: list[int] = []

    def read_range(start: int, end: int) -> bytes:
        reads.append(start)
        return data[start:end]

    module, sha256 = module_of(read_range, len(data), n - 1)
    assert module == exported.mlir_module_serialized
    assert sha256 == hashlib.sha256(module).hexdigest()
    assert reads.count(0) == 1 and len(reads) == 2 + n  # preamble, header, each section


def test_more_vjp_orders_than_the_limit_are_refused_by_every_reader_and_writer(exported):
    """A level of format version 4 declares only what it adds to the module before it, so
    identical levels cost a few bytes each while a reader walking the chain holds and hashes
    each whole: an 828 KB archive of 200 levels of one 16 MiB module made a push hold 3.4 GB
    (found by fuzzing). Past ``MAX_VJP_ORDER`` every reader refuses the archive before reading
    a module, and writers refuse to write one."""
    from jaxport.export._internal import module_of

    at_limit = _long_chain(exported, _limits.MAX_VJP_ORDER + 1)
    assert jaxport.inspect(at_limit).vjp_order == _limits.MAX_VJP_ORDER
    over = _long_chain(exported, _limits.MAX_VJP_ORDER + 2)
    for read in (
        jaxport.loads,
        jaxport.inspect,
        lambda d: module_of(lambda a, b: d[a:b], len(d), 1),
    ):
        with pytest.raises(jaxport.CorruptArchiveError, match="VJP orders up to 9; at most 8"):
            read(over)
    with pytest.raises(jaxport.UnsupportedFeatureError, match="at most 8 VJP orders"):
        jaxport.dumps(exported, vjp_order=_limits.MAX_VJP_ORDER + 1)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_large_level_frame_does_not_depend_on_the_threads(monkeypatch, threads):
    rng = np.random.default_rng(1)
    prefix = rng.standard_normal(3 * _MB, dtype=np.float32).tobytes()  # 12 MiB
    module = b"vjp" + prefix + rng.integers(0, 4, _MB, dtype=np.uint8).tobytes()
    baseline = _level_sections._chained(module, prefix)
    monkeypatch.setattr(_level_sections, "THREADS", threads)
    chunks, section = _level_sections._chained(module, prefix)
    assert b"".join(chunks) == b"".join(baseline[0]) and section == baseline[1]
    assert section.compression == fb.Compression.zstd and section.length < 2 * _MB
    reader = _container.SectionReader(
        memoryview(prefix + b"".join(chunks)),
        [
            _container.Section(0, len(prefix), fb.Compression.none, len(prefix), bytes(32)),
            _container.Section(len(prefix), section.length, section.compression,
                               section.uncompressed_length, section.sha256),
        ],
        payload_start=0, path=None, chained=True,
    )  # fmt: skip
    assert reader.read(1, 0, len(module), prefix=prefix) == module
