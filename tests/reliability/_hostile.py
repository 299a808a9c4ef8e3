"""Hand-built, digest-valid jaxport archives: any header contents, sealed as a writer would.

A registry receives archives from many authors; sha256 digests catch accidents, not an author
who writes valid digests over bad contents. These helpers build such archives:

- ``Level`` / ``Aval`` / ``Node`` / ... describe a header field by field, with any values
  (unknown enums, huge or negative sizes, garbage strings). The same Python object used twice
  is encoded once and referred to twice, so shared tables and shared vectors (the FlatBuffers
  features a hostile header abuses) are written by reusing an object.
- ``seal`` puts a header and payload sections together with correct lengths and digests.
- ``reseal`` recomputes every digest of a (mutated) archive, so a byte mutation reaches the
  decoders instead of stopping at the digest check.

Nothing here imports jaxport's writer: the header is built with the generated FlatBuffers
builders directly, so it can say anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Callable, Sequence
from typing import Any

import flatbuffers
import numpy as np
import zstandard

from jaxport.export import _container
from jaxport.schema import fb

__all__ = [
    "Aval",
    "Level",
    "Mesh",
    "Named",
    "Node",
    "Payload",
    "Sharding",
    "encode_header",
    "leaf_tree",
    "reseal",
    "seal",
    "tuple_tree",
]


@dataclasses.dataclass(eq=False)
class Node:
    """A ``PyTreeNode``."""

    kind: int = fb.PyTreeKind.leaf
    num_children: int = 0
    dict_keys: list[str] | None = None
    custom_name: str | None = None
    custom_auxdata: bytes | None = None


@dataclasses.dataclass(eq=False)
class Mesh:
    """An ``AbstractMesh``; ``types`` are AxisType values."""

    sizes: list[int]
    names: list[str]
    types: list[int]
    device: tuple[str, int, str] | None = None


@dataclasses.dataclass(eq=False)
class Named:
    """A ``NamedSharding``: ``spec`` holds the axes of each entry."""

    mesh: int = 0
    spec: list[list[str]] = dataclasses.field(default_factory=list)
    reduced: list[str] = dataclasses.field(default_factory=list)
    unreduced: list[str] = dataclasses.field(default_factory=list)
    memory_kind: str | None = None


@dataclasses.dataclass(eq=False)
class Sharding:
    """A ``Sharding``: the named form and/or an ``xla.OpSharding`` proto."""

    named: Named | None = None
    hlo: bytes | None = None
    derived: bool = False


@dataclasses.dataclass(eq=False)
class Aval:
    """An ``AbstractValue``; ``dtype`` is a DType value (18: float32)."""

    shape: list[int] = dataclasses.field(default_factory=list)
    dim_exprs: list[str] | None = None
    dtype: int = fb.DType.float32
    prng_impl: str | None = None
    weak_type: bool = False
    memory_space: int = 0
    vma: list[str] | None = None
    sharding: Named | None = None


@dataclasses.dataclass(eq=False)
class Level:
    """One ``Exported`` table (the primal or a VJP order); ``module`` is
    ``(section, offset, length, stablehlo_version, custom_call_targets)``."""

    in_tree: list[Node] | None
    out_tree: list[Node] | None
    in_avals: list[Aval] = dataclasses.field(default_factory=list)
    out_avals: list[Aval] = dataclasses.field(default_factory=list)
    fun_name: bytes | str = "f"
    constraints: list[str] | None = None
    meshes: list[Mesh] | None = None
    in_shardings: list[Sharding] | None = None
    out_shardings: list[Sharding] | None = None
    has_named_shardings: bool = False
    nr_devices: int = 1
    platforms: list[str] = dataclasses.field(default_factory=lambda: ["cpu"])
    ordered_effects: list[str] | None = None
    unordered_effects: list[str] | None = None
    disabled_checks: list[tuple[int, str | None]] | None = None
    kept_var_idx: list[int] | None = None
    uses_global_constants: bool = False
    calling_convention_version: int = 9
    module: tuple[int, int, int, str, list[str]] | None = (0, 0, 0, "1.0.0", [])


def tuple_tree(n_leaves: int) -> list[Node]:
    """``((leaf, ..., leaf), {})``: the in_tree of a function of ``n_leaves`` arguments."""
    return [
        Node(fb.PyTreeKind.tuple, 2),
        Node(fb.PyTreeKind.tuple, n_leaves),
        *[Node() for _ in range(n_leaves)],
        Node(fb.PyTreeKind.dict, 0, dict_keys=[]),
    ]


def leaf_tree() -> list[Node]:
    """A single leaf: the out_tree of a function returning one array."""
    return [Node()]


class _Encoder:
    """Encodes header objects, each Python object once (so reuse means sharing)."""

    def __init__(self) -> None:
        self.builder = flatbuffers.Builder(1024)
        self._done: dict[tuple[str, int], int] = {}
        self._keep: list[Any] = []  # keeps memoized objects alive, so ids stay unique

    def once(self, obj: Any, encode: Callable[[], int], kind: str = "") -> int:
        key = (kind, id(obj))
        if key not in self._done:
            self._done[key] = encode()
            self._keep.append(obj)
        return self._done[key]

    def string(self, s: str | bytes) -> int:
        return self.builder.CreateString(s)

    def strings(self, items: Sequence[str]) -> int:
        return self.once(items, lambda: self._offsets([self.string(s) for s in items]))

    def tables(self, items: Sequence[Any], encode_one: Callable[[Any], int]) -> int:
        return self.once(items, lambda: self._offsets([encode_one(x) for x in items]))

    def numbers(self, items: Sequence[int], dtype: Any) -> int:
        return self.once(
            items, lambda: self.builder.CreateNumpyVector(np.asarray(items, dtype=dtype))
        )

    def _offsets(self, offsets: Sequence[int]) -> int:
        b = self.builder
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()


def _node(e: _Encoder, node: Node) -> int:
    def encode() -> int:
        b = e.builder
        keys = e.strings(node.dict_keys) if node.dict_keys is not None else None
        name = e.string(node.custom_name) if node.custom_name is not None else None
        aux = b.CreateByteVector(node.custom_auxdata) if node.custom_auxdata is not None else None
        fb.PyTreeNodeStart(b)
        fb.PyTreeNodeAddKind(b, node.kind)
        fb.PyTreeNodeAddNumChildren(b, node.num_children)
        if keys is not None:
            fb.PyTreeNodeAddDictKeys(b, keys)
        if name is not None:
            fb.PyTreeNodeAddCustomName(b, name)
        if aux is not None:
            fb.PyTreeNodeAddCustomAuxdata(b, aux)
        return fb.PyTreeNodeEnd(b)

    return e.once(node, encode)


def _tree(e: _Encoder, nodes: list[Node]) -> int:
    def encode() -> int:
        vector = e.tables(nodes, lambda n: _node(e, n))
        fb.PyTreeDefStart(e.builder)
        fb.PyTreeDefAddNodes(e.builder, vector)
        return fb.PyTreeDefEnd(e.builder)

    return e.once(nodes, encode, kind="tree")


def _named(e: _Encoder, n: Named) -> int:
    def encode() -> int:
        b = e.builder
        entries = []
        for axes in n.spec:
            axes_off = e.strings(axes)
            fb.PartitionSpecEntryStart(b)
            fb.PartitionSpecEntryAddAxes(b, axes_off)
            entries.append(fb.PartitionSpecEntryEnd(b))
        spec = e._offsets(entries)
        reduced, unreduced = e.strings(n.reduced), e.strings(n.unreduced)
        kind = e.string(n.memory_kind) if n.memory_kind is not None else None
        fb.NamedShardingStart(b)
        fb.NamedShardingAddMesh(b, n.mesh)
        fb.NamedShardingAddSpec(b, spec)
        fb.NamedShardingAddReduced(b, reduced)
        fb.NamedShardingAddUnreduced(b, unreduced)
        if kind is not None:
            fb.NamedShardingAddMemoryKind(b, kind)
        return fb.NamedShardingEnd(b)

    return e.once(n, encode)


def _aval(e: _Encoder, a: Aval) -> int:
    def encode() -> int:
        b = e.builder
        shape = e.numbers(a.shape, np.int64)
        exprs = e.strings(a.dim_exprs) if a.dim_exprs is not None else None
        prng = e.string(a.prng_impl) if a.prng_impl is not None else None
        vma = e.strings(a.vma) if a.vma is not None else None
        sharding = _named(e, a.sharding) if a.sharding is not None else None
        fb.AbstractValueStart(b)
        fb.AbstractValueAddShape(b, shape)
        if exprs is not None:
            fb.AbstractValueAddDimExprs(b, exprs)
        fb.AbstractValueAddDtype(b, a.dtype)
        if prng is not None:
            fb.AbstractValueAddPrngImpl(b, prng)
        fb.AbstractValueAddWeakType(b, a.weak_type)
        fb.AbstractValueAddMemorySpace(b, a.memory_space)
        if vma is not None:
            fb.AbstractValueAddVma(b, vma)
        if sharding is not None:
            fb.AbstractValueAddSharding(b, sharding)
        return fb.AbstractValueEnd(b)

    return e.once(a, encode)


def _mesh(e: _Encoder, m: Mesh) -> int:
    def encode() -> int:
        b = e.builder
        sizes = e.numbers(m.sizes, np.uint32)
        names = e.strings(m.names)
        types = e.numbers(m.types, np.uint8)
        device = None
        if m.device is not None:
            kind, cores, platform = m.device
            kind_off, platform_off = e.string(kind), e.string(platform)
            fb.AbstractDeviceStart(b)
            fb.AbstractDeviceAddDeviceKind(b, kind_off)
            fb.AbstractDeviceAddNumCores(b, cores)
            fb.AbstractDeviceAddPlatform(b, platform_off)
            device = fb.AbstractDeviceEnd(b)
        fb.AbstractMeshStart(b)
        fb.AbstractMeshAddAxisSizes(b, sizes)
        fb.AbstractMeshAddAxisNames(b, names)
        fb.AbstractMeshAddAxisTypes(b, types)
        if device is not None:
            fb.AbstractMeshAddDevice(b, device)
        return fb.AbstractMeshEnd(b)

    return e.once(m, encode)


def _sharding(e: _Encoder, s: Sharding) -> int:
    def encode() -> int:
        b = e.builder
        named = _named(e, s.named) if s.named is not None else None
        hlo = b.CreateByteVector(s.hlo) if s.hlo is not None else None
        fb.ShardingStart(b)
        if named is not None:
            fb.ShardingAddNamed(b, named)
        if hlo is not None:
            fb.ShardingAddHloSharding(b, hlo)
        fb.ShardingAddHloDerived(b, s.derived)
        return fb.ShardingEnd(b)

    return e.once(s, encode)


def _effect(e: _Encoder, name: str) -> int:
    off = e.string(name)
    fb.EffectStart(e.builder)
    fb.EffectAddTypeName(e.builder, off)
    return fb.EffectEnd(e.builder)


def _check(e: _Encoder, check: tuple[int, str | None]) -> int:
    kind, target = check
    off = e.string(target) if target is not None else None
    fb.DisabledSafetyCheckStart(e.builder)
    fb.DisabledSafetyCheckAddKind(e.builder, kind)
    if off is not None:
        fb.DisabledSafetyCheckAddCustomCallTarget(e.builder, off)
    return fb.DisabledSafetyCheckEnd(e.builder)


def _module(e: _Encoder, module: tuple[int, int, int, str, list[str]]) -> int:
    section, offset, length, version, targets = module
    b = e.builder
    version_off, targets_off = e.string(version), e.strings(targets)
    fb.ModuleStart(b)
    fb.ModuleAddSection(b, section)
    fb.ModuleAddOffset(b, offset)
    fb.ModuleAddLength(b, length)
    fb.ModuleAddStablehloVersion(b, version_off)
    fb.ModuleAddCustomCallTargets(b, targets_off)
    return fb.ModuleEnd(b)


def _level(e: _Encoder, level: Level, vjp: int | None) -> int:
    b = e.builder
    offs: dict[str, int | None] = {
        "FunName": e.string(level.fun_name),
        "InTree": _tree(e, level.in_tree) if level.in_tree is not None else None,
        "OutTree": _tree(e, level.out_tree) if level.out_tree is not None else None,
        "InAvals": e.tables(level.in_avals, lambda a: _aval(e, a)),
        "OutAvals": e.tables(level.out_avals, lambda a: _aval(e, a)),
        "SymbolicConstraints": _opt(level.constraints, e.strings),
        "Meshes": _opt(level.meshes, lambda ms: e.tables(ms, lambda m: _mesh(e, m))),
        "InShardings": e.tables(_shardings_of(level.in_shardings, level.in_avals), _sh(e)),
        "OutShardings": e.tables(_shardings_of(level.out_shardings, level.out_avals), _sh(e)),
        "Platforms": e.strings(level.platforms),
        "OrderedEffects": _opt(level.ordered_effects, lambda x: e.tables(x, _eff(e))),
        "UnorderedEffects": _opt(level.unordered_effects, lambda x: e.tables(x, _eff(e))),
        "DisabledSafetyChecks": _opt(level.disabled_checks, lambda x: e.tables(x, _chk(e))),
        "ModuleKeptVarIdx": _opt(level.kept_var_idx, lambda x: e.numbers(x, np.uint32)),
        "Module": _module(e, level.module) if level.module is not None else None,
    }
    fb.ExportedStart(b)
    for name, off in offs.items():
        if off is not None:
            getattr(fb, f"ExportedAdd{name}")(b, off)
    fb.ExportedAddHasNamedShardings(b, level.has_named_shardings)
    fb.ExportedAddNrDevices(b, level.nr_devices)
    fb.ExportedAddUsesGlobalConstants(b, level.uses_global_constants)
    fb.ExportedAddCallingConventionVersion(b, level.calling_convention_version)
    if vjp is not None:
        fb.ExportedAddVjp(b, vjp)
    return fb.ExportedEnd(b)


def _opt(value: Any, encode: Callable[[Any], int]) -> int | None:
    return None if value is None else encode(value)


_DEFAULT_SHARDINGS: dict[int, list[Sharding]] = {}


def _shardings_of(shardings: list[Sharding] | None, avals: list[Aval]) -> list[Sharding]:
    if shardings is not None:
        return shardings
    key = len(avals)
    if key not in _DEFAULT_SHARDINGS:
        _DEFAULT_SHARDINGS[key] = [Sharding() for _ in avals]
    return _DEFAULT_SHARDINGS[key]


def _sh(e: _Encoder) -> Callable[[Sharding], int]:
    return lambda s: _sharding(e, s)


def _eff(e: _Encoder) -> Callable[[str], int]:
    return lambda name: _effect(e, name)


def _chk(e: _Encoder) -> Callable[[tuple[int, str | None]], int]:
    return lambda c: _check(e, c)


@dataclasses.dataclass(frozen=True)
class Payload:
    """A payload section: stored bytes, compression and declared decompressed size."""

    stored: bytes
    compression: int = fb.Compression.zstd
    uncompressed_length: int | None = None

    @staticmethod
    def zstd(data: bytes) -> Payload:
        """``data`` as one zstd frame that declares its size."""
        frame = zstandard.ZstdCompressor(write_content_size=True).compress(data)
        return Payload(frame, fb.Compression.zstd, len(data))

    @staticmethod
    def zeros(size: int) -> Payload:
        """``size`` zero bytes as a hand-made zstd frame of RLE blocks (4 bytes per 128 KiB),
        the same bytes with every zstd version: a real decompression bomb."""
        block = 2**17
        frame = bytearray(b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", size))
        n = -(-size // block)
        for i in range(n):
            length = block if i < n - 1 else size - block * (n - 1)
            header = int(i == n - 1) | (1 << 1) | (length << 3)  # an RLE block
            frame += struct.pack("<I", header)[:3] + b"\x00"
        return Payload(bytes(frame), fb.Compression.zstd, size)


def encode_header(
    levels: Sequence[Level],
    payload: Sequence[Payload],
    *,
    vjp_order: int | None = None,
    metadata: Sequence[tuple[str, str]] = (),
) -> bytes:
    """The FlatBuffer header of an archive: the chain of ``levels`` (primal first)."""
    e = _Encoder()
    b = e.builder
    vjp = None
    for level in reversed(levels):
        vjp = _level(e, level, vjp)
    sections, offset = [], 0
    for p in payload:
        digest = b.CreateByteVector(hashlib.sha256(p.stored).digest())
        fb.SectionStart(b)
        fb.SectionAddOffset(b, offset)
        fb.SectionAddLength(b, len(p.stored))
        fb.SectionAddCompression(b, p.compression)
        size = len(p.stored) if p.uncompressed_length is None else p.uncompressed_length
        fb.SectionAddUncompressedLength(b, size)
        fb.SectionAddSha256(b, digest)
        sections.append(fb.SectionEnd(b))
        offset += len(p.stored)
    sections_off = e._offsets(sections)
    entries = []
    for key, value in metadata:
        k, v = e.string(key), e.string(value)
        fb.MetadataEntryStart(b)
        fb.MetadataEntryAddKey(b, k)
        fb.MetadataEntryAddValue(b, v)
        entries.append(fb.MetadataEntryEnd(b))
    metadata_off = e._offsets(entries)
    fb.ArchiveStart(b)
    if vjp is not None:
        fb.ArchiveAddExported(b, vjp)
    fb.ArchiveAddVjpOrder(b, len(levels) - 1 if vjp_order is None else vjp_order)
    fb.ArchiveAddSections(b, sections_off)
    fb.ArchiveAddMetadata(b, metadata_off)
    b.Finish(fb.ArchiveEnd(b), file_identifier=b"JXPA")
    return bytes(b.Output())


def seal(header: bytes, payload: Sequence[Payload]) -> bytes:
    """An archive of ``header`` and the payload sections, with a correct preamble."""
    return _container.encode_preamble(header) + header + b"".join(p.stored for p in payload)


_PRE = _container.PREAMBLE_LENGTH


def reseal(data: bytes) -> bytes:
    """``data`` with every digest it can locate recomputed: the header's, and each section's
    (when the header still parses and the section lies inside the data)."""
    if len(data) < _PRE:
        return data
    header_length = struct.unpack_from("<Q", data, 16)[0]
    if header_length > len(data) - _PRE:
        return data
    header = bytearray(data[_PRE : _PRE + header_length])
    payload_start = _PRE + header_length
    try:
        archive = fb.Archive.GetRootAs(bytes(header), 0)
        for i in range(min(archive.SectionsLength(), 16)):
            section = archive.Sections(i)
            o = section._tab.Offset(12)
            if not o:
                continue
            where = section._tab.Vector(o)
            start, end = payload_start + section.Offset(), payload_start + section.Offset()
            end += section.Length()
            if section._tab.VectorLen(o) == 32 and end <= len(data) and where + 32 <= len(header):
                header[where : where + 32] = hashlib.sha256(data[start:end]).digest()
        _reseal_tensors(archive, header, data, payload_start)
    except Exception:  # a header too broken to locate the sections: reseal the header only
        pass
    digest = hashlib.sha256(header).digest()
    return data[:24] + digest + bytes(header) + data[payload_start:]


def _reseal_tensors(archive: Any, header: bytearray, data: bytes, payload_start: int) -> None:
    """A model archive's tensor digests set to their sections' bytes (the first 64 tensors)."""
    model = archive.Model()
    if model is None:
        return
    for i in range(min(model.TensorsLength(), 64)):
        tensor = model.Tensors(i)
        o = tensor._tab.Offset(14)  # Tensor.sha256, field 5
        if not o or tensor._tab.VectorLen(o) != 32 or tensor.Section() >= archive.SectionsLength():
            continue
        section = archive.Sections(tensor.Section())
        start = payload_start + section.Offset()
        end = start + section.Length()
        where = tensor._tab.Vector(o)
        if end <= len(data) and where + 32 <= len(header):
            header[where : where + 32] = hashlib.sha256(data[start:end]).digest()
