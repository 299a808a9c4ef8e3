"""Digest-valid model archives written by a hostile author, built with the real header encoder
(found by a review of the model reader; each was accepted, or cost memory, before its fix)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zstandard

import jaxport
from jaxport.export import _container, _model_archive, _tensors
from jaxport.schema import fb

F32 = jnp.float32


def _model(fns: dict[str, Any] | None = None) -> jaxport.Model:
    params = {"w": np.ones((4, 3), np.float32), "b": np.zeros(3, np.float32)}
    fns = fns or {"f": lambda p, x: x @ p["w"] + p["b"]}
    return jaxport.Model(params, fns, {n: [jax.ShapeDtypeStruct((2, 4), F32)] for n in fns})


def _build(
    model: jaxport.Model,
    *,
    payloads: Sequence[tuple[bytes, int, int]] | None = None,
    version: int = 2,
    rename: Callable[[str], str] = lambda n: n,
) -> bytes:
    """A model archive of ``model`` whose tensor sections hold ``payloads`` (stored bytes,
    compression, uncompressed length), under preamble ``version``, methods renamed."""
    arrays = [model._store.array(i) for i in range(len(model._store))]
    contents = _model_archive.ModelContents(
        model.params_tree, arrays, model.exported, model.vjp_orders, {}
    )
    names, chains, refs, module_chunks, msec = _model_archive._encode_modules(contents)
    names = [rename(n) for n in names]
    chains = {rename(n): c for n, c in chains.items()}
    contents = _model_archive.ModelContents(
        model.params_tree,
        arrays,
        {rename(n): e for n, e in model.exported.items()},
        {rename(n): o for n, o in model.vjp_orders.items()},
        {},
    )
    modules = b"".join(module_chunks)
    datas = [bytes(_tensors.tensor_bytes(a)) for a in arrays]
    payloads = payloads or [(d, fb.Compression.none, len(d)) for d in datas]
    paths = _model_archive.tensor_paths(model.params_tree)
    infos = [
        _tensors.TensorInfo(
            paths[i],
            a.shape,
            a.dtype.name,
            len(datas[i]),
            hashlib.sha256(datas[i]).hexdigest(),
            i + 1,
        )
        for i, (a, d) in enumerate(zip(arrays, datas, strict=True))
    ]
    sections = [msec]
    payload = bytearray(modules)
    for stored, compression, length in payloads:
        start = -(-len(payload) // 64) * 64
        payload += bytes(start - len(payload)) + stored
        sections.append(
            _container.Section(
                start, len(stored), compression, length, hashlib.sha256(stored).digest()
            )
        )
    header = _model_archive._encode_header(contents, names, chains, refs, sections, infos)
    return _container.encode_preamble(header, version) + header + bytes(payload)


def test_the_builder_writes_what_the_writer_writes() -> None:
    model = _model()
    assert _build(model) == model.dumps()


def test_compressed_tensors_are_believed_only_within_the_archive_ratio() -> None:
    """32 tensors declaring 4 MiB each in 160-byte zstd frames: 128 MiB from a 12 KB archive,
    each section within the per-section allowance (16 MiB), refused by the archive's total
    (``_limits.within_ratio``) before anything is decompressed; 2 such tensors are believed."""
    params = {f"t{i:02d}": np.zeros(2**20, np.float32) for i in range(32)}
    model = jaxport.Model(params, lambda p, x: x + p["t00"][:4], [jax.ShapeDtypeStruct((4,), F32)])
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(4 * 2**20))
    bomb = _build(model, payloads=[(frame, fb.Compression.zstd, 4 * 2**20)] * 32, version=3)
    assert len(bomb) < 64 * 2**10
    total = r"33 zstd sections \(the modules and 32 tensors\) declare"
    with pytest.raises(jaxport.CorruptArchiveError, match=total):
        jaxport.loads_model(bomb)
    loaded = jaxport.loads_model(bomb, max_compression_ratio=1e6)  # the reader's opt-in
    np.testing.assert_array_equal(loaded.tensor("['t31']"), params["t31"])

    two = {"a": np.zeros(2**20, np.float32), "b": np.zeros(2**20, np.float32)}
    small = jaxport.Model(two, lambda p, x: x + p["a"][:4], [jax.ShapeDtypeStruct((4,), F32)])
    data = _build(small, payloads=[(frame, fb.Compression.zstd, 4 * 2**20)] * 2, version=3)
    jax.tree.map(np.testing.assert_array_equal, jaxport.loads_model(data).params, two)
    as_v2 = _build(small, payloads=[(frame, fb.Compression.zstd, 4 * 2**20)] * 2)
    for read in (jaxport.loads_model, jaxport.inspect):
        with pytest.raises(jaxport.CorruptArchiveError, match="version-2 archive's tensor"):
            read(as_v2)


def test_bytes_after_a_tensor_frame_are_refused() -> None:
    """A section is exactly one zstd frame: junk, a skippable frame or a second frame after
    it would make a polyglot file."""
    model = _model()
    b, w = (bytes(_tensors.tensor_bytes(model._store.array(i))) for i in range(2))
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(w)
    skippable = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"junk"
    for extra in (b"junk", skippable, frame):
        payloads = [(b, fb.Compression.none, len(b)), (frame + extra, fb.Compression.zstd, len(w))]
        loaded = jaxport.loads_model(_build(model, payloads=payloads, version=3))
        with pytest.raises(jaxport.CorruptArchiveError, match="does not decompress"):
            loaded.tensor("['w']")


def test_a_compressed_tensor_is_checked_against_its_own_digest_after_decompression() -> None:
    """A frame whose section digest is valid but whose bytes are not the tensor's."""
    model = _model()
    b, w = (bytes(_tensors.tensor_bytes(model._store.array(i))) for i in range(2))
    other = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(len(w)))
    data = _build(
        model,
        payloads=[(b, fb.Compression.none, len(b)), (other, fb.Compression.zstd, len(w))],
        version=3,
    )
    loaded = jaxport.loads_model(data)
    np.testing.assert_array_equal(loaded.tensor("['b']"), np.zeros(3, np.float32))
    with pytest.raises(jaxport.IntegrityError, match=r"parameter \['w'\] digest mismatch"):
        loaded.tensor("['w']")


def test_an_archive_with_an_exported_and_a_model_is_refused_by_every_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: ``loads`` and ``inspect`` read it as a function, ``loads_model`` as a model."""
    from jaxport.export import _archive, _avals, _exported, _modules

    model = _model()
    exp = model.exported["f"]
    encode_producer = _archive.encode_producer
    stash: list[int] = []

    def producer_and_exported(builder: Any) -> int:  # called before ArchiveStart
        ref = _modules.ModuleRef(0, 0, 1, "", ())
        stash.append(_exported.encode_exported(builder, exp, ref, None, _avals.AvalTables()))
        return encode_producer(builder)

    add_model = fb.ArchiveAddModel

    def add_both(builder: Any, model_offset: int) -> None:
        fb.ArchiveAddExported(builder, stash[0])
        add_model(builder, model_offset)

    monkeypatch.setattr(_archive, "encode_producer", producer_and_exported)
    monkeypatch.setattr(fb, "ArchiveAddModel", add_both)
    data = _build(model)
    monkeypatch.undo()
    for read in (jaxport.loads, jaxport.loads_model, jaxport.inspect):
        with pytest.raises(jaxport.CorruptArchiveError):
            read(data)


def test_a_model_labelled_format_version_1_is_refused() -> None:
    data = _build(_model(), version=1)
    # Version 1 sections tile the payload (no alignment): the header check comes first.
    with pytest.raises(jaxport.CorruptArchiveError):
        jaxport.loads_model(data)
    aligned = _model()
    data = _build(aligned, version=2)
    relabelled = data[:8] + (1).to_bytes(4, "little") + data[12:]
    for read in (jaxport.loads_model, jaxport.inspect):
        with pytest.raises(jaxport.CorruptArchiveError):
            read(relabelled)


@pytest.mark.parametrize("name", ["params", "save", "_placed", "__class__"])
def test_reserved_method_names_are_refused(name: str) -> None:
    # A leading "_" is outside the grammar of method names (jaxport._grammar.METHOD).
    why = "attribute of Model" if name[0] != "_" else "starting with a letter"
    with pytest.raises(jaxport.UnsupportedFeatureError, match=why):
        _model({name: lambda p, x: x})
    data = _build(_model(), rename=lambda _: name)
    with pytest.raises(jaxport.JaxportError, match=why):
        jaxport.loads_model(data)


def test_tensors_read_from_a_bytearray_are_read_only() -> None:
    model = jaxport.loads_model(bytearray(_model().dumps()))
    w = model.tensor("['w']")
    assert not w.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        w[0, 0] = 99.0
