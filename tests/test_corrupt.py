"""Bad input: one hand-made corrupt archive per error class, and fuzzing.

Every failure must be a ``jaxport.JaxportError`` that says what is wrong and where; never a
raw ``struct.error``, ``IndexError``, ``KeyError`` or zstd error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import struct
from pathlib import Path

import flatbuffers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxport
from jaxport.export import _container
from jaxport.schema import fb

_PRE = _container.PREAMBLE_LENGTH


def version_1(exp: jax.export.Exported, vjp_order: int, metadata: dict[str, str]) -> bytes:
    """``exp`` as jaxport wrote a function archive with VJPs before version 4: every module in
    one section (still read; version 4's own layout is tests/test_level_sections.py's)."""
    from jaxport.export import _archive

    chain = _archive.vjp_chain(exp, vjp_order)
    chunks, section, refs = _archive.module_section(chain, "the Exported")
    entries = sorted(metadata.items())
    header = _archive._encode_header(chain, refs, [section], vjp_order, entries)
    return _container.encode_preamble(header, 1) + header + b"".join(chunks)


@pytest.fixture(scope="module")
def archive() -> bytes:
    exp = jax.export.export(jax.jit(lambda x: jnp.sin(x) * 2))(jnp.zeros((4, 4)))
    return version_1(exp, 1, {"k": "v"})


def _header_length(data: bytes) -> int:
    return struct.unpack_from("<Q", data, 16)[0]


def _with_header(data: bytes, header: bytes) -> bytes:
    """``data`` with its header replaced, the preamble's length and digest made consistent."""
    old = _header_length(data)
    return _container.encode_preamble(header) + header + data[_PRE + old :]


def _rebuild_section(data: bytes, **changes: int) -> bytes:
    """``data`` with its section record changed, everything else (digests too) consistent."""
    head = jaxport.export._archive.read_header(data, len(data), path=None)
    s = dataclasses.replace(head.sections[0], **changes)
    exported = jaxport.loads(data)
    # Re-encode the same header with the altered section record.
    from jaxport.export import _archive, _modules

    modules = [exported.mlir_module_serialized, exported.vjp().mlir_module_serialized]
    refs, off = [], 0
    for m in modules:
        refs.append(_modules.ModuleRef(0, off, len(m), _modules.stablehlo_version(m), ()))
        off += len(m)
    header = _archive._encode_header([exported, exported.vjp()], refs, [s], 1, [])
    return _container.encode_preamble(header) + header + data[head.payload_start :]


def test_valid_archive_loads(archive):
    jaxport.loads(archive)


def test_truncated_preamble(archive):
    with pytest.raises(jaxport.CorruptArchiveError, match="truncated"):
        jaxport.loads(archive[:20])


@pytest.mark.parametrize("cut", [_PRE + 10, -1, -100])
def test_truncated_anywhere(archive, cut):
    with pytest.raises(jaxport.CorruptArchiveError, match="truncated"):
        jaxport.loads(archive[:cut])


def test_wrong_magic(archive):
    with pytest.raises(jaxport.CorruptArchiveError, match="not a jaxport archive"):
        jaxport.loads(b"PK\x03\x04" + archive[4:])


def test_jax_native_bytes_are_not_an_archive(archive):
    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3))
    with pytest.raises(jaxport.CorruptArchiveError, match="magic"):
        jaxport.loads(exp.serialize())


@pytest.mark.parametrize("version", [0, jaxport.MAX_SUPPORTED_FORMAT_VERSION + 1, 2**32 - 1])
def test_unsupported_format_version(archive, version):
    data = archive[:8] + struct.pack("<I", version) + archive[12:]
    with pytest.raises(jaxport.UnsupportedVersionError) as e:
        jaxport.loads(data)
    assert e.value.found_version == version
    assert e.value.supported == (1, 4)
    assert "archive format version" in str(e.value)


def test_a_version_1_layout_labelled_version_2_is_refused():
    """Version 2 sections start 64-byte aligned; a version 1 archive's at 56 + H, anywhere."""
    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3))
    archives = (jaxport.dumps(exp, metadata={"k": "v" * n}) for n in range(64))
    v1 = next(a for a in archives if (56 + _header_length(a)) % 64)
    data = v1[:8] + struct.pack("<I", 2) + v1[12:]
    with pytest.raises(jaxport.CorruptArchiveError, match="section 0 starts at payload offset"):
        jaxport.loads(data)


def test_nonzero_flags(archive):
    data = archive[:12] + struct.pack("<I", 1) + archive[16:]
    with pytest.raises(jaxport.CorruptArchiveError, match="flags"):
        jaxport.loads(data)


def test_oversized_header_length(archive):
    data = archive[:16] + struct.pack("<Q", 2**40) + archive[24:]
    with pytest.raises(jaxport.CorruptArchiveError, match="exceeds the limit") as e:
        jaxport.loads(data)
    assert e.value.offset == 16


def test_bit_flip_in_header_is_an_integrity_error(archive):
    data = bytearray(archive)
    data[_PRE + 40] ^= 0x01
    with pytest.raises(jaxport.IntegrityError, match="header digest"):
        jaxport.loads(bytes(data))


def test_bit_flip_in_payload_is_an_integrity_error(archive):
    data = bytearray(archive)
    data[-5] ^= 0x80
    with pytest.raises(jaxport.IntegrityError, match="section 0 digest") as e:
        jaxport.loads(bytes(data))
    assert e.value.expected != e.value.found


def test_trailing_bytes(archive):
    with pytest.raises(jaxport.CorruptArchiveError, match="after the last section"):
        jaxport.loads(archive + b"\0")


def test_wrong_file_identifier(archive):
    header = bytearray(archive[_PRE : _PRE + _header_length(archive)])
    header[4:8] = b"XXXX"
    with pytest.raises(jaxport.CorruptArchiveError, match="identifier"):
        jaxport.loads(_with_header(archive, bytes(header)))


def test_garbage_flatbuffer_with_consistent_digest(archive):
    header = b"\x10\x00\x00\x00JXPA" + bytes(range(256)) * 4
    with pytest.raises(jaxport.CorruptArchiveError):
        jaxport.loads(_with_header(archive, header))


def test_archive_without_exported(archive):
    builder = flatbuffers.Builder(64)
    fb.ArchiveStart(builder)
    builder.Finish(fb.ArchiveEnd(builder), file_identifier=b"JXPA")
    header = bytes(builder.Output())
    with pytest.raises(jaxport.CorruptArchiveError):
        jaxport.loads(_with_header(archive, header))


def test_section_declaring_a_wrong_uncompressed_size(archive):
    head = jaxport.export._archive.read_header(archive, len(archive), path=None)
    bad = _rebuild_section(archive, uncompressed_length=head.sections[0].uncompressed_length * 1000)
    with pytest.raises(jaxport.CorruptArchiveError, match="declares"):
        jaxport.loads(bad)


def test_section_out_of_range(archive):
    head = jaxport.export._archive.read_header(archive, len(archive), path=None)
    bad = _rebuild_section(archive, length=head.sections[0].length + 100)
    with pytest.raises(jaxport.CorruptArchiveError, match="truncated: section 0"):
        jaxport.loads(bad)


def test_section_not_zstd(archive):
    head = jaxport.export._archive.read_header(archive, len(archive), path=None)
    payload = b"\0" * head.sections[0].length
    digest = hashlib.sha256(payload).digest()
    bad = _rebuild_section(archive, sha256=digest)  # type: ignore[arg-type]
    bad = bad[: len(bad) - len(payload)] + payload
    with pytest.raises(jaxport.CorruptArchiveError, match="zstd"):
        jaxport.loads(bad)


def test_unknown_compression(archive):
    with pytest.raises(jaxport.CorruptArchiveError, match="unknown compression"):
        jaxport.loads(_rebuild_section(archive, compression=7))


def test_calling_convention_is_read_and_refused_at_call(monkeypatch):
    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3))
    data = jaxport.dumps(exp)
    hi = jax.export.maximum_supported_calling_convention_version
    from jaxport.export import _calls

    monkeypatch.setattr(_calls, "runnable_calling_conventions", lambda: (hi + 1, hi + 2))
    back = jaxport.loads(data)  # every version is read (issue 16)
    assert back.calling_convention_version == exp.calling_convention_version
    with pytest.raises(jaxport.UnsupportedVersionError, match="calling convention") as e:
        back.call(jnp.zeros(3))
    assert e.value.supported == (hi + 1, hi + 2)


def test_unregistered_custom_pytree_on_read():
    class Box:
        def __init__(self, v):
            self.v = v

    jax.tree_util.register_pytree_node(Box, lambda b: ((b.v,), None), lambda _, c: Box(*c))
    jax.export.register_pytree_node_serialization(
        Box,
        serialized_name="tests.corrupt.Box",
        serialize_auxdata=lambda _: b"",
        deserialize_auxdata=lambda _: None,
    )
    exp = jax.export.export(jax.jit(lambda b: b.v + 1))(Box(jnp.zeros(2)))
    data = jaxport.dumps(exp)
    from jax._src.export import _export

    saved = _export.deserialization_registry.pop("tests.corrupt.Box")
    try:
        with pytest.raises(jaxport.UnsupportedFeatureError, match=r"tests\.corrupt\.Box"):
            jaxport.loads(data)
    finally:
        _export.deserialization_registry["tests.corrupt.Box"] = saved
    np.testing.assert_array_equal(jaxport.loads(data).call(Box(np.ones(2, np.float32))), [2, 2])


def test_unregistered_custom_pytree_on_write():
    class Opaque:
        def __init__(self, v):
            self.v = v

    jax.tree_util.register_pytree_node(Opaque, lambda b: ((b.v,), None), lambda _, c: Opaque(*c))
    exp = jax.export.export(jax.jit(lambda b: b.v + 1))(Opaque(jnp.zeros(2)))
    with pytest.raises(jaxport.UnsupportedFeatureError, match="register_pytree_node_serialization"):
        jaxport.dumps(exp)


def test_errors_carry_the_path(tmp_path, archive):
    path = tmp_path / "bad.jaxport"
    path.write_bytes(archive[:-3])
    with pytest.raises(jaxport.CorruptArchiveError) as e:
        jaxport.load(path)
    assert e.value.path == str(path) and str(path) in str(e.value)


def test_inspect_reads_only_the_header(tmp_path, archive):
    path = tmp_path / "a.jaxport"
    head_len = _PRE + _header_length(archive)
    # Same size, payload zeroed: inspect does not look at the payload.
    path.write_bytes(archive[:head_len] + b"\0" * (len(archive) - head_len))
    info = jaxport.inspect(path)
    assert info.fun_name.endswith("lambda>") and info.metadata == {"k": "v"}
    with pytest.raises(jaxport.IntegrityError):
        jaxport.load(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutations_raise_only_jaxport_errors(archive, data):
    """Random byte edits anywhere give a JaxportError or a valid load, nothing else."""
    buf = bytearray(archive)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(buf))))
    fuzz_one(bytes(buf if cut is None else buf[:cut]))


@settings(max_examples=200, deadline=None)
@given(header=st.binary(min_size=0, max_size=600))
def test_fuzz_headers_with_consistent_digest(archive, header):
    """Arbitrary header bytes behind a consistent preamble: the FlatBuffer parser's path."""
    fuzz_one(_with_header(archive, b"\x10\x00\x00\x00JXPA" + header))


def fuzz_one(data: bytes) -> None:
    """The fuzz entry point: loads and inspect either succeed or raise a JaxportError.

    Use it with atheris (``atheris.Setup(sys.argv, fuzz_one)``) for coverage-guided fuzzing.
    """
    for reader in (jaxport.loads, jaxport.inspect):
        with contextlib.suppress(jaxport.JaxportError):
            reader(data)


def test_errors_name_the_vjp_order_the_field_and_the_file(tmp_path):
    """A bad VJP table is a ``CorruptArchiveError`` naming the order, the field and the file
    (issue 9), raised by the ``.vjp()`` that reads it (issue 27: a VJP level is decoded when
    ``.vjp()`` first asks; trusted: the corpus's module is a stand-in only the sandbox
    refuses)."""
    corpus = Path(__file__).parent / "reliability" / "corpus"
    path = tmp_path / "bad.jaxport"
    path.write_bytes((corpus / "vjp_bad_effect.jaxport").read_bytes())
    loaded = jaxport.load(path, trusted=True)
    with pytest.raises(jaxport.CorruptArchiveError) as e:
        loaded.vjp()
    message = str(e.value)
    assert message.startswith("the VJP of order 1: unordered_effects[0]: TypeError: ")
    assert e.value.path == str(path) and message.endswith(f"({path})")
