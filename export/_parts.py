"""Archives in parts, as a content-addressed store keeps them: the layout side (no store here).

A model archive (``jaxport.Model``, schema/FORMAT.md "Model archives") is the preamble, the
header and section 0 (the methods' modules), then one section per tensor (raw or zstd), each
after zero padding. Its parts (``split_archive``) are

- the *skeleton*: bytes 0 to the end of section 0 (part 0), by its sha256;
- each tensor's section (part i + 1 = tensor i), by its section's sha256 (for a raw section,
  the tensor's own ``TensorInfo.sha256``; for a zstd one, the digest of the frame), so
  archives that share a tensor share that part: a version that changes one layer has one new
  tensor part.

Any other archive (a function archive) is one part, the whole. The archive is its parts in
order, each at its offset after zero padding (``assemble_chunks``), so it comes back byte for
byte. A caller reads its header from the skeleton alone (``stream_info``, ``ranged_info``,
``chunks_info``) and opens the model with each tensor's part fetched by digest when the model
first uses it (``model_from_parts``); where the parts are kept (a blob store, a server) is the
caller's business: it hands in a function from digest to bytes.

Only ``hashlib`` and the standard library at import: the registry imports ``Part`` and
``ArchiveChunks`` without jax; reading an archive imports the format modules when called.
``chunks_layout`` reads what splitting needs (the kind, the sections, each tensor's section, a
function's name) from the header's FlatBuffer alone, without jax: a registry server's client
splits a file it pushes without loading jax; ``chunks_info`` reads the whole header.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from jaxport import CorruptArchiveError, IntegrityError, UnsupportedFeatureError

if TYPE_CHECKING:
    from jaxport.export._container import ArchiveHeader, Section
    from jaxport.export._info import ArchiveInfo
    from jaxport.export._model import Model
    from jaxport.export._tensors import TensorInfo
    from jaxport.export._verdicts import VerdictCache

__all__ = [
    "ArchiveChunks",
    "ArchiveLayout",
    "Part",
    "assemble_chunks",
    "chunks_info",
    "chunks_layout",
    "model_from_parts",
    "ranged_info",
    "ranged_layout",
    "split_archive",
    "stream_info",
]

#: Zero bytes yielded at a time between parts.
_ZEROS = bytes(64 * 1024)

#: What reads a part by its digest (sha256, hex): its bytes, or ``FileNotFoundError``.
PartReader = Callable[[str], bytes | memoryview]


@dataclasses.dataclass(frozen=True)
class Part:
    """A part of an archive: ``position`` 0 the skeleton (or the whole), i + 1 tensor i; it
    lies at ``offset`` bytes from the archive's start and is ``size`` bytes long."""

    position: int
    digest: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        """The offset just after the part."""
        return self.offset + self.size


class ArchiveChunks:
    """An archive held as consecutive chunks: a ``Model``'s ``dump_chunks()`` (its tensors'
    bytes are views of its arrays, never joined) or one ``bytes``."""

    def __init__(self, chunks: Sequence[bytes | memoryview]):
        self._chunks = [memoryview(c).cast("B") for c in chunks if len(c)]
        self._starts = [0]
        for c in self._chunks:
            self._starts.append(self._starts[-1] + len(c))

    @property
    def size(self) -> int:
        """The archive's length in bytes."""
        return self._starts[-1]

    def view(self, start: int, end: int) -> bytes | memoryview:
        """Bytes ``start`` to ``end``: a view where one chunk holds them, else a copy."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < len(self._chunks) and end <= self._starts[i + 1]:
            return self._chunks[i][start - self._starts[i] : end - self._starts[i]]
        pieces = []
        while start < end:
            i = bisect.bisect_right(self._starts, start) - 1
            stop = min(end, self._starts[i + 1])
            pieces.append(self._chunks[i][start - self._starts[i] : stop - self._starts[i]])
            start = stop
        return b"".join(pieces)

    def sha256(self) -> str:
        """The sha256 (hex) of the whole archive."""
        digest = hashlib.sha256()
        for c in self._chunks:
            digest.update(c)
        return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class LayoutSection:
    """A payload section as splitting sees it: ``offset`` from the payload's start, ``length``
    in bytes, the ``sha256`` (hex) of its stored bytes."""

    offset: int
    length: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class LayoutTensor:
    """A model's tensor as splitting sees it: the ``section`` holding it, a ``path`` for
    messages."""

    section: int
    path: str


@dataclasses.dataclass(frozen=True)
class ArchiveLayout:
    """What ``split_archive`` and a push's default name need of an archive's header
    (``chunks_layout``): ``kind`` (``"function"`` or ``"model"``), ``header_length`` in
    bytes, the ``sections``, each tensor's section (a model's), a function's ``fun_name``."""

    kind: str
    header_length: int
    sections: tuple[LayoutSection, ...]
    tensors: tuple[LayoutTensor, ...]
    fun_name: str

    @property
    def skeleton_end(self) -> int:
        """Where a model's skeleton (part 0) ends: the end of section 0, in bytes from the
        archive's start (the end of the header for an archive without sections)."""
        from jaxport.export._container import PREAMBLE_LENGTH

        start = PREAMBLE_LENGTH + self.header_length
        return start + (self.sections[0].offset + self.sections[0].length if self.sections else 0)


def chunks_layout(archive: ArchiveChunks) -> ArchiveLayout:
    """The ``ArchiveLayout`` of an archive held as chunks: its preamble and header checked
    (``read_header``: magic, version, header size, FlatBuffer, section ranges), the few fields
    splitting needs read; nothing of jax imported.

    Raises:
        CorruptArchiveError: a malformed preamble or header, or a tensor whose section does
            not exist.
        IntegrityError: a header that does not match its digest.
    """
    return ranged_layout(lambda start, end: archive.view(start, end), archive.size)[0]


def ranged_layout(
    read_range: Callable[[int, int], bytes | memoryview], total: int
) -> tuple[ArchiveLayout, bytes]:
    """The ``ArchiveLayout`` of an archive of ``total`` bytes read by ``read_range(start,
    end)`` (an HTTP range request), and the bytes it read: the preamble and the header, two
    reads, nothing of jax imported. ``ArchiveLayout.skeleton_end`` then says how far a
    model's skeleton goes. Raises: as ``chunks_layout``."""
    from jaxport.export import _container

    start = bytes(read_range(0, min(total, _container.PREAMBLE_LENGTH)))
    preamble = _container.decode_preamble(start, path=None)
    end = min(total, _container.PREAMBLE_LENGTH + preamble.header_length)
    prefix = start + bytes(read_range(len(start), end)) if end > len(start) else start
    head = _container.read_header(prefix, total, path=None)
    return _layout(head, preamble.header_length), prefix


def _layout(head: ArchiveHeader, header_length: int) -> ArchiveLayout:
    """The layout of a checked header (``_container.read_header``)."""
    from jaxport.export import _fb, _limits

    sections = tuple(LayoutSection(s.offset, s.length, s.sha256.hex()) for s in head.sections)
    with _fb.translating_read_errors(None), _limits.header_budget(header_length):
        model = head.archive.Model()
        if model is None:
            exported = head.archive.Exported()
            name = _fb.read_str(exported.FunName()) if exported is not None else ""
            return ArchiveLayout("function", header_length, sections, (), name)
        tables = _fb.read_tables(model, "Tensors")
        tensors = tuple(LayoutTensor(t.Section(), f"#{i}") for i, t in enumerate(tables))
    if any(t.section >= len(sections) for t in tensors):
        raise CorruptArchiveError("a tensor's section does not exist")
    return ArchiveLayout("model", header_length, sections, tensors, "")


def split_archive(
    archive: ArchiveChunks,
    info: ArchiveInfo | ArchiveLayout | None,
    *,
    path: str | None = None,
    digest: str | None = None,
) -> tuple[Part, ...]:
    """The parts of an archive: a (validated) model archive's skeleton, then each tensor in
    order; any other archive (``info`` None: bytes that are no jaxport archive) is one part,
    the whole (``digest``: its sha256 where the caller has it already).

    Raises:
        UnsupportedFeatureError: a model archive not laid out as jaxport writes them (sections
            out of order, a section no tensor owns, bytes after the last section): its parts
            would not give its bytes back.
    """
    if info is None or info.kind != "model":
        return (Part(0, digest or archive.sha256(), 0, archive.size),)
    from jaxport.export._container import PREAMBLE_LENGTH

    where = path or "the model archive"
    start = PREAMBLE_LENGTH + info.header_length
    modules = info.sections[0]
    skeleton_end = start + modules.offset + modules.length
    skeleton = hashlib.sha256(archive.view(0, skeleton_end)).hexdigest()
    parts = [Part(0, skeleton, 0, skeleton_end)]
    if len(info.sections) != len(info.tensors) + 1:
        raise UnsupportedFeatureError(
            f"{where}: {len(info.sections)} sections for {len(info.tensors)} tensors: the "
            "registry stores model archives as jaxport writes them"
        )
    tensors: Sequence[TensorInfo | LayoutTensor] = info.tensors
    for i, t in enumerate(tensors):
        s = info.sections[t.section]
        offset = start + s.offset
        if offset < parts[-1].end:
            raise UnsupportedFeatureError(
                f"{where}: tensor {t.path} is not stored after the one before: the registry "
                "stores model archives as jaxport writes them"
            )
        parts.append(Part(i + 1, s.sha256, offset, s.length))  # the stored bytes' digest
    if parts[-1].end != archive.size:
        raise UnsupportedFeatureError(
            f"{where}: {archive.size - parts[-1].end} bytes after the last section"
        )
    return tuple(parts)


def assemble_chunks(
    parts: Sequence[Part], total: int, read: PartReader
) -> Iterator[bytes | memoryview]:
    """The archive's bytes, one part (read by its digest, as ``read`` checks it) or run of zero
    padding at a time.

    Raises:
        IntegrityError: parts that overlap, a part of another size than recorded, or parts
            that do not make ``total`` bytes; and what ``read`` raises.
    """
    position = 0
    for part in parts:
        if part.offset < position:
            raise IntegrityError(f"part {part.position} overlaps the one before")
        while position < part.offset:
            n = min(len(_ZEROS), part.offset - position)
            yield memoryview(_ZEROS)[:n]
            position += n
        data = read(part.digest)
        if len(data) != part.size:
            raise IntegrityError(f"part {part.position} is {len(data)} bytes, not {part.size}")
        yield data
        position = part.end
    if position != total:
        raise IntegrityError(f"the parts make {position} bytes, the archive has {total}")


def stream_info(read: Callable[[int], bytes | memoryview], total: int) -> ArchiveInfo:
    """``jaxport.inspect`` of an archive of ``total`` bytes whose start ``read(n)`` reads in
    order (a file's ``read``, the skeleton part's): its preamble and header only, bounded as
    any header read.

    Raises:
        CorruptArchiveError: a malformed preamble or header.
        IntegrityError: a header that does not match its digest.
    """
    from jaxport.export import _archive, _container, _fb, _limits
    from jaxport.export._info import archive_info

    start = bytes(read(_container.PREAMBLE_LENGTH))
    preamble = _container.decode_preamble(start, path=None)
    head = _archive.read_header(start + read(preamble.header_length), total, path=None)
    with _fb.translating_read_errors(None), _limits.header_budget(head.preamble.header_length):
        return archive_info(head)


def ranged_info(read_range: Callable[[int, int], bytes], total: int) -> ArchiveInfo:
    """``jaxport.inspect`` of an archive of ``total`` bytes read by ``read_range(start, end)``
    (a blob stream, an HTTP range request): its preamble and header only. Raises: as
    ``stream_info``."""
    position = 0

    def read(n: int) -> bytes:
        nonlocal position
        start, position = position, min(total, position + n)
        return read_range(start, position) if position > start else b""

    return stream_info(read, total)


def chunks_info(archive: ArchiveChunks) -> ArchiveInfo:
    """``jaxport.inspect`` of an archive held as chunks. Raises: as ``stream_info``."""
    position = 0

    def read(n: int) -> bytes | memoryview:
        nonlocal position
        start, position = position, min(archive.size, position + n)
        return archive.view(start, position)

    return stream_info(read, archive.size)


def model_from_parts(
    skeleton: bytes | memoryview,
    total: int,
    read: PartReader,
    *,
    where: str,
    store: str,
    allow_custom_calls: Sequence[str] = (),
    verdicts: VerdictCache | None = None,
) -> Model:
    """The model of an archive of ``total`` bytes from its skeleton (verified by the caller),
    each tensor's part read by ``read`` (its section's digest) when the model first uses it.

    A raw tensor's bytes are not checked here: the model checks them against the tensor's
    digest when it uses them. A zstd section is checked against its own digest, then
    decompressed to exactly its declared size (within the default compression ratio).
    ``where`` names the archive and ``store`` where its parts are kept, in messages.

    Raises:
        CorruptArchiveError, UnsupportedVersionError, UnsupportedFeatureError,
            UnsafeArchiveError: see ``jaxport.loads_model``.

    The model's tensor reads raise ``IntegrityError`` for a missing part (``read`` raised
    ``FileNotFoundError``) or a zstd section that does not match its digest,
    ``CorruptArchiveError`` for one that does not decompress as declared.
    """
    from jaxport.export import _archive, _container, _model_io, _vetting

    view = memoryview(skeleton)
    head = _archive.read_header(view, total, path=where)
    modules = _container.SectionReader(
        view[head.payload_start :], head.sections, payload_start=head.payload_start, path=where
    )
    return _model_io.open_model(
        head,
        modules,
        _tensor_reader(read, head.sections, where, store),
        policy=_vetting.module_policy(allow_custom_calls, verdicts=verdicts),
        path=where,
    )


def _tensor_reader(
    read: PartReader, sections: Sequence[Section], where: str, store: str
) -> Callable[[TensorInfo], bytes | memoryview]:
    """Reads a tensor's part by its section's digest (see ``model_from_parts``)."""
    from jaxport.export._container import SectionReader
    from jaxport.schema import fb

    def read_tensor(info: TensorInfo) -> bytes | memoryview:
        s = sections[info.section]
        digest = s.sha256.hex()
        try:
            data = read(digest)
        except FileNotFoundError:
            raise IntegrityError(
                f"parameter {info.path}: blob {digest} is missing from {store}", expected=digest
            ) from None
        if s.compression == fb.Compression.none:
            return data
        alone = dataclasses.replace(s, offset=0)
        reader = SectionReader(memoryview(data), [alone], payload_start=0, path=where)
        return reader.read(0, 0, s.uncompressed_length)

    return read_tensor
