"""``save`` of a large function archive with VJPs writes each section as soon as it and those
before it are known (``export/_streamed_levels``), and the bytes are those of ``dumps``:
with the placeholder header the right size, with one that turns out another size (the
archive written again in one pass), and when the custom calls cannot be listed (nothing left).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import jaxport
from jaxport.export import _compress, _level_sections, _streamed_levels
from jaxport.schema import fb

_MB = 1 << 20
_RECORD = struct.Struct("<QQBQ32s")


@pytest.fixture
def no_custom_calls(monkeypatch):
    """Random bytes stand for modules: none calls a custom target."""
    monkeypatch.setattr(
        _level_sections._modules, "writable_targets", lambda modules, what: [()] * len(modules)
    )


def _header(calls: list[list[object]], raw_costs: int = 0):
    """A stand-in for ``_archive``'s preamble and header: each section's record at a fixed
    size (as FlatBuffers writes them), padded to 64 bytes; ``raw_costs`` more bytes for each
    raw section, so that a placeholder expecting zstd is the wrong size."""

    def first(refs, sections):
        calls.append(list(sections))
        body = b"".join(
            struct.pack(
                "<QQBQ32s", s.offset, s.length, s.compression, s.uncompressed_length, s.sha256
            )
            + bytes(raw_costs if s.compression == fb.Compression.none else 0)
            for s in sections
        )
        return body + bytes(-len(body) % 64)

    return first


def _expected(modules, first) -> bytes:
    chunks, sections, refs = _level_sections.level_sections(modules, "the Exported")
    sections = _level_sections.placed(sections)
    padded = _level_sections.padded_chunks(chunks, sections)
    return first(refs, sections) + b"".join(bytes(c) for c in padded)


def _random(size: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def test_a_raw_primal_is_written_while_its_vjp_compresses(tmp_path, no_custom_calls):
    primal = _random(_compress.SAMPLED_BYTES + _MB, 0)  # judged raw on samples
    modules = [primal, b"head" + primal + b"tail"]  # the VJP's frame against it pays
    calls: list[list[object]] = []
    path = tmp_path / "f.jaxport"
    _streamed_levels.save_levels_streamed(path, modules, "the Exported", _header(calls))
    placeholder, final = calls
    assert [s.compression for s in final] == [fb.Compression.none, fb.Compression.zstd]
    assert [s.compression for s in placeholder] == [s.compression for s in final]
    assert path.read_bytes() == _expected(modules, _header([]))
    assert [p.name for p in tmp_path.iterdir()] == ["f.jaxport"]


def test_a_header_of_another_size_than_expected_is_written_again_in_one_pass(
    tmp_path, no_custom_calls
):
    modules = [bytes(9 * _MB), _random(4 * _MB, 1)]  # the VJP's frame does not pay: raw
    calls: list[list[object]] = []
    path = tmp_path / "f.jaxport"
    first = _header(calls, raw_costs=64)
    _streamed_levels.save_levels_streamed(path, modules, "the Exported", first)
    assert len(calls) == 3  # placeholder, the real header (not its size), the one-pass write
    assert calls[1][1].compression == fb.Compression.none
    assert path.read_bytes() == _expected(modules, _header([], raw_costs=64))
    assert [p.name for p in tmp_path.iterdir()] == ["f.jaxport"]


def test_a_streamed_save_that_cannot_list_custom_calls_leaves_nothing(tmp_path):
    modules = [b"module {" + b" " * (9 * _MB), b"module {}"]  # MLIR text: jaxlib cannot read
    with pytest.raises(jaxport.UnsupportedFeatureError, match="cannot write the Exported"):
        _streamed_levels.save_levels_streamed(
            tmp_path / "f.jaxport", modules, "the Exported", _header([])
        )
    assert list(tmp_path.iterdir()) == []


def test_save_of_large_constants_with_vjps_is_dumps(tmp_path):
    import jax

    w = np.random.default_rng(0).standard_normal(3 * _MB).astype(np.float32)  # 12 MB
    exp = jax.export.export(jax.jit(lambda x: x * w))(jax.ShapeDtypeStruct(w.shape, w.dtype))
    path = tmp_path / "f.jaxport"
    jaxport.save(exp, path, vjp_order=1)
    assert path.read_bytes() == jaxport.dumps(exp, vjp_order=1)
