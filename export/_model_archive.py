"""Model archives (format version 2): writing the header and payload, reading them back.

Layout (schema/FORMAT.md, "Model archives"): the preamble, the header padded with zero bytes to
a multiple of 64 bytes from the start of the archive, section 0 (zstd: the StableHLO modules of
every method and VJP order, one after the other), then one section per parameter tensor (its
raw bytes, or a zstd frame where the writer chose to compress it), each starting at a multiple
of 64 bytes after zero padding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flatbuffers
import numpy as np

from jaxport import CorruptArchiveError, UnsupportedFeatureError
from jaxport._grammar import method_problem
from jaxport.export import (
    _archive,
    _container,
    _fb,
    _limits,
    _modules,
    _pytrees,
    _tensors,
    _vetting,
)
from jaxport.export._avals import AvalTables
from jaxport.export._exported import (
    DecodeCache,
    check_calling_convention_version,
    decode_exported,
    encode_exported,
)
from jaxport.export._hashing import Sha256Jobs
from jaxport.export._tensor_payloads import TensorPayload, tensor_payloads
from jaxport.export._versions import COMPRESSED_MODEL_FORMAT_VERSION, MODEL_FORMAT_VERSION
from jaxport.schema import FILE_IDENTIFIER, fb

__all__ = [
    "MAX_METHODS",
    "ModelContents",
    "ModelHead",
    "ModelHeader",
    "ModelLayout",
    "check_model_table",
    "dump_model_chunks",
    "method_name",
    "model_chunks",
    "model_layout",
    "read_model_header",
    "tensor_paths",
]

#: The most methods a model archive holds.
MAX_METHODS = 64
_ALIGN = 64


@dataclasses.dataclass(frozen=True)
class ModelContents:
    """What a model archive holds, ready to write: see ``jaxport.Model``."""

    params_tree: Any
    arrays: Sequence[Any]  # host arrays (``_tensors.host_array``), in leaf order
    exported: Mapping[str, Any]
    vjp_orders: Mapping[str, int]
    metadata: Mapping[str, str]
    #: Per tensor, its sha256 (hex) where already verified (tensors read from an archive).
    known_digests: Sequence[str | None] = ()
    #: zstd-compress tensor sections where it pays (``_tensor_payloads``); else all raw.
    compress: bool = False


def tensor_paths(params_tree: Any) -> list[str]:
    """The path of each leaf of ``params_tree`` as the archive records it (``"['w'][0]"``).

    Raises:
        UnsupportedFeatureError: a node type that cannot be stored (see ``encode_pytreedef``).
    """
    builder = flatbuffers.Builder(256)
    builder.Finish(_pytrees.encode_pytreedef(builder, params_tree))
    return _pytrees.pytree_paths(fb.PyTreeDef.GetRootAs(builder.Output(), 0))


def dump_model_chunks(contents: ModelContents) -> list[bytes | memoryview]:
    """The model archive as consecutive chunks (tensor bytes are views, not copies).

    Raises:
        UnsupportedFeatureError: a method with fewer VJP orders than asked, a module MLIR cannot
            parse, or a part of an Exported that cannot be stored.
        UnsupportedVersionError: a calling convention version the running jax does not support.
    """
    chunks, head = model_chunks(contents)
    return [head(), *chunks[1:]]


def model_chunks(contents: ModelContents) -> tuple[list[bytes | memoryview], ModelHead]:
    """The chunks of ``dump_model_chunks``, the first (preamble and header) a placeholder of
    the same length, and ``head``, whose call gives the real first chunk.

    The header holds each tensor's sha256 (a digest in ``contents.known_digests`` is taken as
    it is). They are hashed in threads (hashlib releases the GIL) that start now, one core
    short of all of them, so that the writer keeps a core for the chunks; ``head()`` adds the
    others and the caller's and waits: a writer writes the other chunks, then calls ``head()``
    while the disk writes them (``atomic_write(path, chunks, head=head)``) and writes the
    result over the placeholder. Raises: as ``dump_model_chunks``.
    """
    plan = _plan(contents)
    jobs = _tensors.digest_jobs(plan.datas, contents.known_digests)
    jobs.start(_tensors.THREADS - 1)
    chunks: list[bytes | memoryview] = [plan.placeholder, *plan.module_chunks]
    position = plan.sections[0].length
    for s, payload in zip(plan.sections[1:], plan.payloads, strict=True):
        chunks.append(bytes(s.offset - position))
        chunks.extend(payload.chunks)
        position = s.offset + s.length
    encode = plan.encode
    return [c for c in chunks if len(c)], ModelHead(encode, jobs, len(plan.placeholder))


@dataclasses.dataclass(frozen=True)
class ModelLayout:
    """Where each part of a model archive whose tensor sections are all raw lies in its file
    (``model_layout``): what a writer needs to write the tensors in any order, from threads.

    Attributes:
        head_length: bytes of the preamble and header, at offset 0 (written last: it holds
            the digests).
        modules: section 0's chunks and the file offset of each.
        tensors: each tensor's bytes (views of its array) and the file offset of its section.
        known: each tensor's sha256 where already known (verified when read), else None.
        length: the file's length in bytes.
    """

    head_length: int
    modules: Sequence[tuple[int, bytes | memoryview]]
    tensors: Sequence[tuple[int, memoryview]]
    known: Sequence[bytes | None]
    length: int
    _encode: Callable[[Sequence[bytes]], tuple[bytes, list[_container.Section]]]

    def head(self, digests: Sequence[bytes]) -> bytes:
        """The preamble and header once every tensor's sha256 is known (in tensor order)."""
        first, _ = self._encode(digests)
        assert len(first) == self.head_length
        return first


def model_layout(contents: ModelContents) -> ModelLayout:
    """The layout of ``contents``' archive, whose tensors are raw (``contents.compress`` is
    false: a compressed one is written from ``model_chunks``). Nothing is hashed.

    Raises:
        ValueError: ``contents.compress`` is set (a caller's mistake).
        UnsupportedFeatureError, UnsupportedVersionError: as ``dump_model_chunks``.
    """
    if contents.compress:
        raise ValueError("model_layout is for raw tensors: write model_chunks to compress")
    plan = _plan(contents)
    start = len(plan.placeholder)
    modules, position = [], start
    for chunk in plan.module_chunks:
        modules.append((position, chunk))
        position += len(chunk)
    tensors = [(start + s.offset, d) for s, d in zip(plan.sections[1:], plan.datas, strict=True)]
    known = [bytes.fromhex(k) if k else None for k in contents.known_digests]
    known += [None] * (len(plan.datas) - len(known))
    end = max([position, *(o + len(d) for o, d in tensors)])
    return ModelLayout(start, modules, tensors, known, end, plan.encode)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A model archive before its tensors are hashed: the header with zero digests
    (``placeholder``), the sections, section 0's chunks, the tensors' bytes and payloads."""

    placeholder: bytes
    sections: list[_container.Section]
    module_chunks: list[bytes | memoryview]
    datas: list[memoryview]
    payloads: list[TensorPayload]
    encode: Callable[[Sequence[bytes]], tuple[bytes, list[_container.Section]]]


def _plan(contents: ModelContents) -> _Plan:
    names, chains, refs, module_chunks, module_section = _encode_modules(contents)
    datas = [_tensors.tensor_bytes(a) for a in contents.arrays]
    payloads = tensor_payloads(datas, compress=contents.compress, modules=module_section)
    compressed = any(p.compression != fb.Compression.none for p in payloads)
    version = COMPRESSED_MODEL_FORMAT_VERSION if compressed else MODEL_FORMAT_VERSION

    def encode(digests: Sequence[bytes]) -> tuple[bytes, list[_container.Section]]:
        sections, infos = _place_tensors(module_section, datas, payloads, digests, contents)
        header = _encode_header(contents, names, chains, refs, sections, infos)
        return _container.encode_preamble(header, version) + header, sections

    placeholder, sections = encode([bytes(32)] * len(datas))
    return _Plan(placeholder, sections, module_chunks, datas, payloads, encode)


class ModelHead:
    """A model archive's preamble and header, once its tensors are hashed (``model_chunks``)."""

    def __init__(
        self,
        encode: Callable[[Sequence[bytes]], tuple[bytes, list[_container.Section]]],
        jobs: Sha256Jobs,
        length: int,
    ):
        self._encode, self._jobs, self._length = encode, jobs, length

    def __call__(self) -> bytes:
        """The preamble and header, as long as the placeholder (a digest's size does not
        depend on its value); waits for the digests, hashing with every core."""
        first, _ = self._encode(self._jobs.digests(_tensors.THREADS))
        assert len(first) == self._length
        return first

    def cancel(self) -> None:
        """Stops hashing (the write failed): the threads finish the tensor they hold."""
        self._jobs.cancel()


def _encode_modules(
    contents: ModelContents,
) -> tuple[
    list[str],
    dict[str, list[Any]],
    list[_modules.ModuleRef],
    list[bytes | memoryview],
    _container.Section,
]:
    """Method names, VJP chains, module references, section 0's chunks and section."""
    names = sorted(contents.exported)
    if not 0 < len(names) <= MAX_METHODS:
        raise UnsupportedFeatureError(f"a model has 1 to {MAX_METHODS} methods, not {len(names)}")
    chains = {n: _archive.vjp_chain(contents.exported[n], contents.vjp_orders[n]) for n in names}
    for n in names:
        for exp in chains[n]:
            check_calling_convention_version(exp.calling_convention_version)
    chain = [e for n in names for e in chains[n]]
    module_chunks, module_section, refs = _archive.module_section(chain, "the model")
    return names, chains, refs, module_chunks, module_section


def _place_tensors(
    module_section: _container.Section,
    datas: Sequence[memoryview],
    payloads: Sequence[TensorPayload],
    digests: Sequence[bytes],
    contents: ModelContents,
) -> tuple[list[_container.Section], list[_tensors.TensorInfo]]:
    """Sections (the modules', then one per tensor, 64-byte aligned) and the tensors' infos
    (``digests``: each tensor's sha256; a raw section's digest is its tensor's)."""
    paths = tensor_paths(contents.params_tree)
    sections, infos = [module_section], []
    position = module_section.length
    for i, (data, p, digest) in enumerate(zip(datas, payloads, digests, strict=True)):
        start = -(-position // _ALIGN) * _ALIGN  # the payload starts 64-byte aligned
        stored = p.stored_sha256 if p.stored_sha256 is not None else digest
        sections.append(_container.Section(start, p.length, p.compression, len(data), stored))
        a = contents.arrays[i]
        infos.append(
            _tensors.TensorInfo(
                paths[i], tuple(a.shape), a.dtype.name, len(data), digest.hex(), i + 1
            )
        )
        position = start + p.length
    return sections, infos


def _encode_header(
    contents: ModelContents,
    names: Sequence[str],
    chains: Mapping[str, list[Any]],
    refs: Sequence[_modules.ModuleRef],
    sections: Sequence[_container.Section],
    infos: Sequence[_tensors.TensorInfo],
) -> bytes:
    builder = flatbuffers.Builder(4096)
    avals = AvalTables()
    method_offsets, i = [], 0
    for name in names:
        exported = None
        chain = chains[name]
        for exp, ref in reversed(list(zip(chain, refs[i : i + len(chain)], strict=True))):
            exported = encode_exported(builder, exp, ref, exported, avals)
        i += len(chain)
        name_off = builder.CreateString(name)
        fb.MethodStart(builder)
        fb.MethodAddName(builder, name_off)
        fb.MethodAddExported(builder, exported)
        fb.MethodAddVjpOrder(builder, contents.vjp_orders[name])
        method_offsets.append(int(fb.MethodEnd(builder)))
    params = _pytrees.encode_pytreedef(builder, contents.params_tree)
    tensors = _fb.table_vector(builder, _tensors.encode_tensor, infos)
    methods = _fb._offsets_vector(builder, method_offsets)
    fb.ModelStart(builder)
    fb.ModelAddParams(builder, params)
    fb.ModelAddTensors(builder, tensors)
    fb.ModelAddMethods(builder, methods)
    model = fb.ModelEnd(builder)
    producer = _archive.encode_producer(builder)
    sections_off = _fb.table_vector(builder, _archive.encode_section, sections)
    metadata = _archive.metadata_entries(contents.metadata)
    metadata_off = _fb.table_vector(builder, _archive.encode_metadata_entry, metadata)
    fb.ArchiveStart(builder)
    fb.ArchiveAddProducer(builder, producer)
    fb.ArchiveAddSections(builder, sections_off)
    fb.ArchiveAddMetadata(builder, metadata_off)
    fb.ArchiveAddModel(builder, model)
    builder.Finish(fb.ArchiveEnd(builder), file_identifier=FILE_IDENTIFIER)
    header = bytes(builder.Output())
    padding = -(_container.PREAMBLE_LENGTH + len(header)) % _ALIGN
    return header + bytes(padding)


@dataclasses.dataclass(frozen=True)
class ModelHeader:
    """A model archive's checked header: methods decoded, tensors described, none read.

    Attributes:
        head: the archive header (preamble, FlatBuffer, sections).
        params_tree: the parameter pytree's treedef.
        tensors: one per leaf, in leaf order.
        exported: each method's ``Exported`` (primal module read; VJPs when asked).
        vjp_orders: each method's stored VJP order.
        metadata: the archive's metadata.
    """

    head: _archive.ArchiveHeader
    params_tree: Any
    tensors: tuple[_tensors.TensorInfo, ...]
    exported: Mapping[str, Any]
    vjp_orders: Mapping[str, int]
    metadata: Mapping[str, str]


def read_model_header(
    head: _archive.ArchiveHeader,
    modules: _container.SectionReader,
    *,
    policy: _vetting.ModulePolicy,
    allow_unsupported_calling_convention: bool = False,
    path: str | None = None,
) -> ModelHeader:
    """Decodes and checks a model archive's header; reads each method's primal module.

    ``modules`` reads the archive's sections (only section 0, the modules', is read here).

    Raises:
        CorruptArchiveError: a function archive, a malformed model table (tensors that do not
            match the parameter tree or their sections, unsorted or repeated method names, a
            method whose first inputs are not the parameters), or any error of ``loads``.
        UnsafeArchiveError, UnsupportedVersionError, UnsupportedFeatureError: as ``loads``.
    """
    with _fb.translating_read_errors(path):
        model = head.archive.Model()
    policy = dataclasses.replace(policy, writer_jax=_archive.writer_jax(head))
    # One budget for the whole header: methods share tables, each decoded once (_decode_methods).
    budget = head.preamble.header_length
    with _fb.translating_read_errors(path), _limits.header_budget(budget):
        if model is None:
            raise CorruptArchiveError(
                "a function archive, not a model archive: use jaxport.load", path=path
            )
        check_model_table(head, model)
        params_table = model.Params()
        if params_table is None:
            raise CorruptArchiveError("the model has no parameter tree")
        paths = _pytrees.pytree_paths(params_table)
        tensors = _decode_tensors(model, paths, head.sections)
        params_tree = _treedef(params_table, tensors)
        with modules.in_order():  # methods' modules one after the other in section 0
            exported, vjp_orders = _decode_methods(
                model, modules, policy, not allow_unsupported_calling_convention, path
            )
        for name, exp in exported.items():
            _check_method_inputs(name, exp, params_tree, tensors)
        metadata = {
            _fb.read_str(e.Key()): _fb.read_str(e.Value())
            for e in _fb.read_tables(head.archive, "Metadata")
        }
    return ModelHeader(head, params_tree, tensors, exported, vjp_orders, metadata)


def check_model_table(head: _archive.ArchiveHeader, model: fb.Model) -> None:
    """The checks that come before a model's tables are read: a version-2 archive or later, no
    Exported beside the model, at most MAX_METHODS methods, one tensor per section, and raw
    tensor sections below version 3.

    Raises:
        CorruptArchiveError: any of them fails.
    """
    if head.preamble.format_version < MODEL_FORMAT_VERSION:
        raise CorruptArchiveError(
            f"a model in a format version {head.preamble.format_version} archive (models are "
            f"version {MODEL_FORMAT_VERSION})"
        )
    if head.archive.Exported() is not None:
        raise CorruptArchiveError("an archive holds an Exported or a model, not both")
    if not 0 < model.MethodsLength() <= MAX_METHODS:
        raise CorruptArchiveError(
            f"a model has 1 to {MAX_METHODS} methods, not {model.MethodsLength()}"
        )
    if model.TensorsLength() >= len(head.sections):
        raise CorruptArchiveError(
            f"{model.TensorsLength()} tensors and {len(head.sections)} sections: each tensor "
            "has its own, after the modules'"
        )
    version = head.preamble.format_version
    if version < COMPRESSED_MODEL_FORMAT_VERSION:
        for i, s in enumerate(head.sections[1:], 1):
            if s.compression != fb.Compression.none:
                raise CorruptArchiveError(
                    f"section {i} is compressed: a version-{version} archive's tensor sections "
                    f"are raw (compressed ones are version {COMPRESSED_MODEL_FORMAT_VERSION})"
                )


def _decode_tensors(
    model: fb.Model, paths: Sequence[str], sections: Sequence[_container.Section]
) -> tuple[_tensors.TensorInfo, ...]:
    tables = [_fb.table_at(fb.Tensor, model, p) for p in _tensor_positions(model)]
    if len(tables) != len(paths):
        raise CorruptArchiveError(
            f"the parameter tree has {len(paths)} leaves and the model {len(tables)} tensors"
        )
    used: set[int] = set()
    infos = []
    for i, (t, p) in enumerate(zip(tables, paths, strict=True)):
        info = _tensors.decode_tensor(t, i, sections)
        if info.path != p:
            raise CorruptArchiveError(f"tensor {i} is named {info.path!r}, its leaf is {p!r}")
        if info.section == 0 or info.section in used:
            raise CorruptArchiveError(f"tensor {i}: section {info.section} is not its own")
        section = sections[info.section]
        if section.compression == fb.Compression.none and section.sha256.hex() != info.sha256:
            raise CorruptArchiveError(f"tensor {i}: its digest is not its raw section's")
        used.add(info.section)
        infos.append(info)
    return tuple(infos)


def _tensor_positions(model: fb.Model) -> list[int]:
    """Where the model's ``Tensors`` tables start, read in bulk as ``_fb.table_positions``
    reads its fields (the length checked and charged as by ``_fb.read_tables``, which costs
    microseconds per table: a model may have thousands). Raises: CorruptArchiveError (the
    vector does not fit in the header), ValueError (it lies outside the buffer)."""
    tab = model._tab
    o = tab.Offset(6)  # Model.Tensors, as the generated readers
    if o == 0:
        return []
    start = tab.Vector(o)
    n = _fb.count(tab.VectorLen(o), model)
    relative = np.frombuffer(tab.Bytes, dtype="<u4", count=n, offset=start).astype(np.int64)
    positions: list[int] = (relative + start + 4 * np.arange(n, dtype=np.int64)).tolist()
    return positions


def _treedef(table: fb.PyTreeDef, tensors: Sequence[_tensors.TensorInfo]) -> Any:
    import jax

    specs = [jax.ShapeDtypeStruct(t.shape, _tensors.numpy_dtype(t.dtype)) for t in tensors]
    return _pytrees.decode_pytreedef(table, specs)


def _decode_methods(
    model: fb.Model,
    modules: _container.SectionReader,
    policy: _vetting.ModulePolicy,
    check_calling_convention: bool,
    path: str | None,
) -> tuple[dict[str, Any], dict[str, int]]:
    tables = _fb.read_tables(model, "Methods")
    if not 0 < len(tables) <= MAX_METHODS:
        raise CorruptArchiveError(f"a model has 1 to {MAX_METHODS} methods, not {len(tables)}")
    exported: dict[str, Any] = {}
    vjp_orders: dict[str, int] = {}
    # Methods may share tables (the writer shares aval tables; FlatBuffers lets any offset
    # point at any table): each Exported chain, level and aval is decoded once, and each
    # module read and vetted once per chain (schema/FORMAT.md, "Reading").
    cache = DecodeCache()
    chains: dict[tuple[int, int], Any] = {}
    previous = ""
    for t in tables:
        name = method_name(t, path)
        if name <= previous:
            raise CorruptArchiveError(f"method names are not sorted and unique at {name!r}")
        previous = name
        table = t.Exported()
        if table is None:
            raise CorruptArchiveError(f"method {name!r} has no Exported")
        key = (table._tab.Pos, t.VjpOrder())
        _limits.check_vjp_order(key[1], where=f"method {name!r}")
        if key not in chains:
            with _fb.translating_read_errors(where=f"method {name!r}"):
                read_module = _archive.checked_module_reader(
                    modules, table, policy, path, method=name
                )
                chains[key] = decode_exported(
                    table,
                    read_module,
                    check_calling_convention=check_calling_convention,
                    vjp_order=t.VjpOrder(),
                    check_module=lambda ref: modules.check(ref.section, ref.offset, ref.length),
                    cache=cache,
                )
        exported[name] = chains[key]
        vjp_orders[name] = t.VjpOrder()
    return exported, vjp_orders


def method_name(table: fb.Method, path: str | None) -> str:
    """A method table's name, if it follows ``jaxport._grammar.METHOD`` (ASCII only).

    Raises:
        CorruptArchiveError: any other name, a non-ASCII look-alike named as one.
    """
    name = _fb.read_str(table.Name())
    problem = method_problem(name)
    if problem is not None:
        raise CorruptArchiveError(problem, path=path)
    return name


def _check_method_inputs(
    name: str, exp: Any, params_tree: Any, tensors: Sequence[_tensors.TensorInfo]
) -> None:
    """The method's first argument is the parameter tree, with the tensors' shapes and dtypes."""
    args, kwargs = _args_of(exp.in_tree)
    if kwargs.num_leaves or not args or args[0] != params_tree:
        raise CorruptArchiveError(f"method {name!r}: its first argument is not the parameters")
    for t, aval in zip(tensors, exp.in_avals, strict=False):
        if tuple(aval.shape) != t.shape or aval.dtype.name != t.dtype:
            raise CorruptArchiveError(
                f"method {name!r} takes {t.path} as {aval.dtype.name}{list(aval.shape)}, "
                f"the tensor is {t.dtype}{list(t.shape)}"
            )


def _args_of(in_tree: Any) -> tuple[list[Any], Any]:
    """The treedefs of each positional argument, and of the keyword arguments."""
    from jax import tree_util

    args_kwargs = tree_util.treedef_children(in_tree)
    if len(args_kwargs) != 2:
        return [], tree_util.tree_structure(None)
    return tree_util.treedef_children(args_kwargs[0]), args_kwargs[1]
