"""A model archive written again with other modules, its tensors' stored bytes kept as they are.

A fleet rescue (``jaxport/_reexport_model_child.py``) re-serializes each method's modules under
another jax; the parameters do not change. ``read_skeleton`` reads only the skeleton of a model
archive file (preamble, header, section 0: what ``export/_parts.py`` calls part 0) and decodes
its methods; no tensor is read. ``rewritten_chunks`` gives the new archive: a header naming the
new methods (and this jax as the producer), the new modules' section, then each tensor's stored
section (raw or zstd) copied from the source file a bounded slice at a time, each 64-byte
aligned as ``_model_archive`` places them. Each tensor section is byte for byte the source's,
so its sha256 (the digest of its part in a registry) is the same: a registry that holds the
source stores none of its tensor bytes again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from jaxport.export import _archive, _container, _model_archive, _vetting
from jaxport.export._parts import ranged_layout
from jaxport.export._sections import Section
from jaxport.export._versions import COMPRESSED_MODEL_FORMAT_VERSION, MODEL_FORMAT_VERSION
from jaxport.schema import fb

__all__ = ["COPY_BYTES", "read_skeleton", "rewritten_chunks"]

#: The most bytes of a tensor section held at once while it is copied.
COPY_BYTES = 4 << 20
_ALIGN = 64


def read_skeleton(
    fd: int, total: int, *, allow_custom_calls: Sequence[str], path: str | None = None
) -> _model_archive.ModelHeader:
    """The checked header of the model archive open as ``fd`` (``total`` bytes long), each
    method's primal module read (VJPs when asked, from the same skeleton); no tensor read.
    The archive's jax window is not checked (a rescue reads archives leaving it).

    Raises:
        CorruptArchiveError: not a model archive, or a malformed one.
        IntegrityError: the header or the modules' section does not match its digest.
        UnsupportedVersionError, UnsupportedFeatureError, UnsafeArchiveError: as
            ``jaxport.loads_model``.
    """

    def read_range(start: int, end: int) -> bytes:
        return os.pread(fd, end - start, start)

    layout, _ = ranged_layout(read_range, total)
    view = memoryview(read_range(0, layout.skeleton_end))
    head = _archive.read_header(view, total, path=path)
    modules = _container.SectionReader(
        view[head.payload_start :], head.sections, payload_start=head.payload_start, path=path
    )
    return _model_archive.read_model_header(
        head, modules, policy=_vetting.module_policy(allow_custom_calls), path=path
    )


def rewritten_chunks(
    fd: int,
    header: _model_archive.ModelHeader,
    exported: Mapping[str, Any],
    metadata: Mapping[str, str],
) -> Iterator[bytes | memoryview]:
    """The model archive of ``header`` (read from ``fd`` by ``read_skeleton``) with the
    methods ``exported`` (the same names, VJP orders and signatures) and ``metadata``: its
    first chunk the preamble and header, then the modules' section, then each tensor's stored
    bytes read from ``fd`` (at most ``COPY_BYTES`` at a time) after zero padding.

    Raises:
        UnsupportedFeatureError: a method with fewer VJP orders than stored, a module MLIR
            cannot parse, a part of an Exported that cannot be stored.
        UnsupportedVersionError: a calling convention version the running jax does not support.
        OSError: ``fd`` cannot be read.
    """
    contents = _model_archive.ModelContents(
        header.params_tree, (), exported, header.vjp_orders, metadata
    )
    names, chains, refs, module_chunks, module_section = _model_archive._encode_modules(contents)
    sections, infos, sources = [module_section], [], []
    position = module_section.length
    for i, tensor in enumerate(header.tensors):
        stored = header.head.sections[tensor.section]
        start = -(-position // _ALIGN) * _ALIGN
        sections.append(dataclasses.replace(stored, offset=start))
        infos.append(dataclasses.replace(tensor, section=i + 1))
        sources.append(stored)
        position = start + stored.length
    encoded = _model_archive._encode_header(contents, names, chains, refs, sections, infos)
    compressed = any(s.compression != fb.Compression.none for s in sections[1:])
    version = COMPRESSED_MODEL_FORMAT_VERSION if compressed else MODEL_FORMAT_VERSION
    yield _container.encode_preamble(encoded, version) + encoded
    yield from module_chunks
    position = module_section.length
    for placed, stored in zip(sections[1:], sources, strict=True):
        if placed.offset > position:
            yield bytes(placed.offset - position)
        yield from _copied(fd, header.head.payload_start, stored)
        position = placed.offset + placed.length


def _copied(fd: int, payload_start: int, section: Section) -> Iterator[bytes]:
    """The stored bytes of ``section`` of the archive open as ``fd``, a slice at a time.

    Raises:
        OSError: the file is shorter than its header says (it changed meanwhile).
    """
    start, left = payload_start + section.offset, section.length
    while left:
        data = os.pread(fd, min(left, COPY_BYTES), start)
        if not data:
            raise OSError(f"the archive ends {left} bytes before its section does")
        yield data
        start, left = start + len(data), left - len(data)
