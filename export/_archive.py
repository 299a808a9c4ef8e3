"""Writing and reading whole archives: ``dumps`` / ``loads`` / ``save`` / ``load``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import flatbuffers

from jaxport import CorruptArchiveError, UnsupportedFeatureError, __version__
from jaxport._io import atomic_write
from jaxport.export import (
    _compat,
    _container,
    _custom_calls,
    _fb,
    _fb_builder,
    _level_sections,
    _limits,
    _modules,
    _streamed,
    _streamed_levels,
    _vetting,
)
from jaxport.export._avals import AvalTables
from jaxport.export._compress import PARALLEL_BYTES
from jaxport.export._container import ArchiveHeader, read_header
from jaxport.export._exported import (
    check_calling_convention_version,
    decode_exported,
    encode_exported,
)
from jaxport.export._mapped import read_archive_file
from jaxport.export._verdicts import VerdictCache
from jaxport.export._versions import FUNCTION_FORMAT_VERSION, LEVELS_FORMAT_VERSION
from jaxport.export._window_check import check_header_window
from jaxport.schema import FILE_IDENTIFIER, fb

if TYPE_CHECKING:
    from jax.export import Exported

__all__ = [
    "ArchiveHeader",
    "checked_module_reader",
    "dump_chunks",
    "dumps",
    "encode_metadata_entry",
    "encode_producer",
    "encode_section",
    "exported_tables",
    "load",
    "loads",
    "metadata_entries",
    "module_section",
    "read_header",
    "save",
    "stored_vjp",
    "vjp_chain",
]

PathLike = str | os.PathLike[str]


def dumps(
    exported: Exported, *, vjp_order: int = 0, metadata: Mapping[str, str] | None = None
) -> bytes:
    """Serializes a ``jax.export.Exported`` into a jaxport archive.

    The same Exported and arguments always give the same bytes (nothing time-dependent is
    written), so archives can be deduplicated by digest. That holds wherever ``dumps`` is
    called: the VJP modules that a live Exported re-exports are stored without the caller's
    source locations (``stored_vjp``); the primal module is stored as jax made it.

    Args:
        exported: the Exported, from ``jax.export.export(...)(...)`` or ``jaxport.loads``.
        vjp_order: how many orders of VJP to store with it: 1 lets ``jax.grad`` / ``jax.vjp``
            work through ``loads(...).call``, 2 also second derivatives, ... at most 8
            (``MAX_VJP_ORDER``, FORMAT.md *Limits*).
        metadata: user key/value strings stored in the header, shown by ``inspect``.

    Returns:
        The archive bytes (layout: schema/FORMAT.md).

    Raises:
        UnsupportedFeatureError: ``exported`` has fewer VJP orders than ``vjp_order``, more
            than 8 are asked, or a part
            that cannot be stored (unregistered pytree node type, non-string dict key, a module
            MLIR cannot parse when its custom calls must be listed, ...).
        UnsupportedVersionError: its calling convention version is below 1.
    """
    return b"".join(dump_chunks(exported, vjp_order=vjp_order, metadata=metadata))


def dump_chunks(
    exported: Exported, *, vjp_order: int = 0, metadata: Mapping[str, str] | None = None
) -> list[bytes | memoryview]:
    """The archive as consecutive chunks (for writing without joining them); see ``dumps``."""
    chain, first = _planned(exported, vjp_order, metadata)
    if len(chain) > 1:
        return _with_levels(chain, first)
    chunks, section, refs = module_section(chain, "the Exported")
    return [first(refs, [section]), *chunks]


def _with_levels(chain: Sequence[Any], first: _FirstChunk) -> list[bytes | memoryview]:
    """A function archive with VJPs (version 4): each level's module in a section of its own
    (``_level_sections``), the header padded, each section 64-byte aligned."""
    modules = [bytes(exp.mlir_module_serialized) for exp in chain]
    chunks, sections, refs = _level_sections.level_sections(modules, "the Exported")
    sections = _level_sections.placed(sections)
    return [first(refs, sections), *_level_sections.padded_chunks(chunks, sections)]


#: The preamble and header of an archive, given its modules' references and its sections.
_FirstChunk = Callable[[list[_modules.ModuleRef], list[_container.Section]], bytes]


def _planned(
    exported: Exported, vjp_order: int, metadata: Mapping[str, str] | None
) -> tuple[list[Any], _FirstChunk]:
    """The VJP chain to store and the function that gives the preamble and header for its
    modules' references and sections: version 1 (one section) for a chain of one, else
    version 4 (one section a level, the header padded). Raises: as ``dumps``."""
    if not isinstance(vjp_order, int) or vjp_order < 0:
        raise ValueError(f"vjp_order must be a non-negative int, got {vjp_order!r}")
    entries = metadata_entries(metadata)
    chain = vjp_chain(exported, vjp_order)
    for exp in chain:
        check_calling_convention_version(exp.calling_convention_version)

    def first(refs: list[_modules.ModuleRef], sections: list[_container.Section]) -> bytes:
        header = _encode_header(chain, refs, sections, vjp_order, entries)
        if len(chain) == 1:
            return _container.encode_preamble(header, FUNCTION_FORMAT_VERSION) + header
        header = _level_sections.pad_header(header)
        return _container.encode_preamble(header, LEVELS_FORMAT_VERSION) + header

    return chain, first


def module_section(
    chain: Sequence[Any], what: str
) -> tuple[list[bytes | memoryview], _container.Section, list[_modules.ModuleRef]]:
    """Section 0: the modules of ``chain`` (Exported, in order) compressed together (or raw,
    see ``_compress.compress_section``), the Section (offset 0) and each module's reference
    into it (custom calls listed from the bytes, in a thread while large modules compress).

    Raises:
        UnsupportedFeatureError: a module MLIR cannot parse where its custom calls must be read.
    """
    modules = [bytes(exp.mlir_module_serialized) for exp in chain]
    if sum(len(m) for m in modules) < PARALLEL_BYTES:
        targets = _modules.writable_targets(modules, what)  # refused before compressing
        chunks, section = _container.compress_section(modules)
    else:
        with ThreadPoolExecutor(1, "jaxport-targets") as pool:
            listed = pool.submit(_modules.writable_targets, modules, what)
            chunks, section = _container.compress_section(modules)
            targets = listed.result()
    return chunks, section, _modules.module_refs(modules, targets)


def metadata_entries(metadata: Mapping[str, str] | None) -> list[tuple[str, str]]:
    entries = sorted((metadata or {}).items())
    for k, v in entries:
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"metadata must map str to str, got {k!r}: {v!r}")
    return entries


def vjp_chain(exported: Any, vjp_order: int) -> list[Any]:
    """``exported`` and its VJPs to order ``vjp_order``, as an archive stores them.

    Raises:
        UnsupportedFeatureError: ``vjp_order`` over ``_limits.MAX_VJP_ORDER`` (readers refuse
            it), or the Exported has fewer VJP orders.
    """
    if vjp_order > _limits.MAX_VJP_ORDER:
        raise UnsupportedFeatureError(
            f"vjp_order={vjp_order}: an archive stores at most {_limits.MAX_VJP_ORDER} VJP "
            "orders (readers refuse more)"
        )
    chain = [exported]
    for order in range(1, vjp_order + 1):
        if not chain[-1].has_vjp():
            raise UnsupportedFeatureError(
                f"vjp_order={vjp_order} asked, but the Exported has VJPs only to order {order - 1}"
            )
        chain.append(stored_vjp(chain[-1]))
    return chain


def stored_vjp(exported: Any) -> Any:
    """``exported.vjp()`` as ``dumps`` stores it: the same wherever ``dumps`` is called.

    A live Exported (made by ``jax.export.export`` in this process) re-exports its VJP on each
    ``.vjp()``, and jax writes the Python call stack of that moment into the module's
    locations; those locations are replaced by ``loc(unknown)`` (``_modules.without_locations``).
    The primal module, and the VJP of a deserialized Exported (fixed bytes), are kept as they
    are.
    """
    vjp = exported.vjp()
    if not _is_live(exported):
        return vjp
    module = _modules.without_locations(bytes(vjp.mlir_module_serialized))
    return dataclasses.replace(vjp, mlir_module_serialized=module)


def _is_live(exported: Any) -> bool:
    # jax's exporter gives a live Exported its own ``_get_exported_vjp``, which re-exports
    # (jax/_src/export/_export.py, 0.7 to 0.10); a deserializer gives one that returns bytes.
    from jaxport.export._jax import export_impl as _export

    return getattr(exported._get_vjp, "__module__", None) == _export.__name__


def _encode_header(
    chain: list[Any],
    refs: list[_modules.ModuleRef],
    sections: list[_container.Section],
    vjp_order: int,
    metadata: list[tuple[str, str]],
) -> bytes:
    builder = _fb_builder.Builder(4096)
    exported = None
    avals = AvalTables()
    for exp, ref in reversed(list(zip(chain, refs, strict=True))):
        exported = encode_exported(builder, exp, ref, exported, avals)
    producer = encode_producer(builder)
    sections_off = _fb.table_vector(builder, encode_section, sections)
    metadata_off = _fb.table_vector(builder, encode_metadata_entry, metadata)
    fb.ArchiveStart(builder)
    fb.ArchiveAddProducer(builder, producer)
    fb.ArchiveAddExported(builder, exported)
    fb.ArchiveAddVjpOrder(builder, vjp_order)
    fb.ArchiveAddSections(builder, sections_off)
    fb.ArchiveAddMetadata(builder, metadata_off)
    builder.Finish(fb.ArchiveEnd(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def encode_producer(builder: flatbuffers.Builder) -> int:
    jax_version, jaxlib_version = _compat.jax_versions()
    strings = [builder.CreateString(s) for s in (__version__, jax_version, jaxlib_version)]
    fb.ProducerStart(builder)
    fb.ProducerAddJaxportVersion(builder, strings[0])
    fb.ProducerAddJaxVersion(builder, strings[1])
    fb.ProducerAddJaxlibVersion(builder, strings[2])
    return int(fb.ProducerEnd(builder))


def encode_section(builder: flatbuffers.Builder, s: _container.Section) -> int:
    digest = _fb.bytes_vector(builder, s.sha256)
    fb.SectionStart(builder)
    fb.SectionAddOffset(builder, s.offset)
    fb.SectionAddLength(builder, s.length)
    fb.SectionAddCompression(builder, s.compression)
    fb.SectionAddUncompressedLength(builder, s.uncompressed_length)
    fb.SectionAddSha256(builder, digest)
    return int(fb.SectionEnd(builder))


def encode_metadata_entry(builder: flatbuffers.Builder, entry: tuple[str, str]) -> int:
    key, value = (builder.CreateString(s) for s in entry)
    fb.MetadataEntryStart(builder)
    fb.MetadataEntryAddKey(builder, key)
    fb.MetadataEntryAddValue(builder, value)
    return int(fb.MetadataEntryEnd(builder))


def writer_jax(head: ArchiveHeader) -> str:
    """The jax version that the header says wrote the archive ("" when it names none)."""
    with contextlib.suppress(Exception):  # a malformed producer is not this function's concern
        producer = head.archive.Producer()
        if producer is not None:
            return _fb.read_str(producer.JaxVersion())
    return ""


def loads(
    data: bytes | bytearray | memoryview,
    *,
    allow_unsupported_calling_convention: bool = False,
    allow_custom_calls: Iterable[str] = (),
    max_compression_ratio: float = _container.MAX_COMPRESSION_RATIO,
    path: str | None = None,
    trusted: bool = False,
    verdicts: VerdictCache | None = None,
    outside_window: str = "warn",
) -> Exported:
    """Deserializes a jaxport archive into a ``jax.export.Exported``.

    Checks, in order: magic, format version, header length, header digest, the FlatBuffer,
    every section's range and digest, decompressed sizes against those declared, then the
    custom calls (schema/FORMAT.md, *Custom calls on load*). The primal's header fields and
    module are read now; each VJP level's (its fields, then its module: in a version-4 archive
    its own section, digest first) when ``.vjp()`` first asks for it, which then raises the
    errors below that concern it. Each module's custom calls are checked from its own bytes
    before jax sees them. Nothing in the archive is executed.

    Args:
        data: the archive bytes.
        allow_unsupported_calling_convention: kept for compatibility: every calling convention
            version from 1 is read; one the running jax cannot run is refused at ``.call``.
        allow_custom_calls: custom-call targets to accept besides those some jax release since
            0.4.30 guarantees stable (``stable_custom_call_targets()``), e.g. a Pallas kernel's:
            only from authors you trust, since such a target may read its
            operands unchecked. Host callbacks (``HOST_CALLBACK_TARGETS``) are never accepted.
        max_compression_ratio: the largest declared decompressed size over stored size of a
            section (above 16 MiB) that is believed (default 1000, schema/FORMAT.md, "Limits");
            raise it for an archive known to hold very repetitive constants.
        path: the file the bytes came from, for error messages.
        trusted: the archive is your own: its modules are not parsed in the module sandbox
            first, and MLIR text modules are accepted. Never for archives from others.
        verdicts: where the sandbox's verdicts are looked up and kept (default: the local
            cache, ``$JAXPORT_CACHE``; a registry passes its own).
        outside_window: an archive written by a jax release more than 6 months older than
            the running jax's (outside jax's backward-compatibility window, ``jax_window``;
            ``jax.export.deserialize`` of jax >= 0.11.1 refuses such exports, jaxport reads its
            own format): ``"warn"`` (default, an ``OutsideJaxWindowWarning``), ``"refuse"`` or
            ``"allow"``. Checked after the header, before any module is read.

    Every module is MLIR bytecode, parsed first in a sandbox worker process
    (``jaxport.export.Sandbox``: jaxlib alone, an address-space and a time limit) and checked
    against the header (custom calls, ``main``'s signature, devices) before jax may parse it
    in this process; verdicts are cached by (module sha256, jaxlib version).

    Raises:
        CorruptArchiveError: the bytes are not a well-formed archive (truncated, wrong magic,
            oversized header, malformed FlatBuffer, out-of-range section, bad zstd frame).
        IntegrityError: a header or section digest does not match (a bit flip, say).
        UnsupportedVersionError: a format version outside ``MIN_SUPPORTED_FORMAT_VERSION`` ..
            ``MAX_SUPPORTED_FORMAT_VERSION``, or a calling convention version below 1 (one the
            running jax cannot run is refused by the returned Exported's ``.call``).
        UnsupportedFeatureError: the archive needs a dtype, effect or custom pytree node that
            this program does not have (register custom nodes before loading).
        UnsafeArchiveError: a module (the primal; a VJP when ``.vjp()`` reads it) calls a host
            callback, or a custom-call target neither stable nor in ``allow_custom_calls``; any
            module's target listed in the header already refuses the archive at load.
        CorruptArchiveError: also when a module is MLIR text (unless ``trusted``), MLIR cannot
            read it, or its custom-call targets or ``main`` differ from what the header says.
        UnsafeModuleError: the sandbox's worker crashed or hung on a module (it is never
            parsed in this process).
        OutsideJaxWindowError: outside jax's window, and ``outside_window="refuse"``.
        TypeError: ``allow_custom_calls`` is a single string, or holds something else than str.
        ValueError: an ``outside_window`` other than "warn", "refuse", "allow".
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"loads expects bytes, got {type(data).__name__}")
    policy = _vetting.module_policy(allow_custom_calls, trusted=trusted, verdicts=verdicts)
    view = memoryview(data).cast("B")
    head = read_header(view, len(view), path=path)
    check_header_window(head, outside_window, path=path)
    policy = dataclasses.replace(policy, writer_jax=writer_jax(head))
    with _fb.translating_read_errors(path):
        chained = head.chained
    reader = _container.SectionReader(
        view[head.payload_start :],
        head.sections,
        payload_start=head.payload_start,
        path=path,
        max_compression_ratio=max_compression_ratio,
        chained=chained,
    )

    with _fb.translating_read_errors(path):
        table = head.archive.Exported()
        if head.archive.Model() is not None:
            raise CorruptArchiveError(
                "a model archive, not a function archive: use jaxport.load_model or `jaxport run`",
                path=path,
            )
        if table is None:
            raise CorruptArchiveError("the archive holds no Exported", path=path)
        if reader.chained:
            _container.check_padding(
                view[head.payload_start :],
                head.sections,
                payload_start=head.payload_start,
                path=path,
            )
        read_module = checked_module_reader(reader, table, policy, path)
        exported: Exported = decode_exported(
            table,
            read_module,
            check_calling_convention=not allow_unsupported_calling_convention,
            vjp_order=head.archive.VjpOrder(),
            check_module=lambda ref: reader.check(ref.section, ref.offset, ref.length),
            lazy_vjps=True,
            path=path,
        )
        return exported


def checked_module_reader(
    reader: _container.SectionReader,
    table: fb.Exported,
    policy: _vetting.ModulePolicy,
    path: str | None,
    *,
    method: str | None = None,
) -> Callable[[_modules.ModuleRef, Mapping[str, Any]], bytes]:
    """Reads a module's bytes for ``decode_exported``, once they pass ``_vetting.vet_module``.

    When the primal module is read, the targets the header lists for every module are checked
    (an early refusal, before any module is parsed); each module read is then vetted: parsed
    in the sandbox and checked against the header's targets and its level's signature.
    """
    refs = {
        order: _modules.decode_module(module)
        for order, t in enumerate(exported_tables(table))
        if (module := t.Module()) is not None  # else decode_exported refuses the table
    }
    orders = {ref: order for order, ref in sorted(refs.items(), reverse=True)}
    chained = getattr(reader, "chained", False)
    if chained:  # version 4: each level's module is the whole of its own section
        try:
            _level_sections.check_level_sections(list(refs.values()), reader.sections)
        except CorruptArchiveError as e:
            raise CorruptArchiveError(str(e), path=path) from None
    held: dict[int, bytes] = {}  # a chained reader's modules: the ones the Exported hold

    def read_module(ref: _modules.ModuleRef, fields: Mapping[str, Any]) -> bytes:
        order = orders.get(ref, 0)
        if order == 0:
            for o, r in refs.items():
                _custom_calls.check_allowed(
                    r.custom_call_targets, policy.allowed, vjp_order=o, path=path
                )
        digest, prefix = None, held.get(order - 1)
        if policy.trusted:  # no verdict to look up
            data = reader.read(ref.section, ref.offset, ref.length, prefix=prefix)
        else:
            data, digest = reader.read_hashed(ref.section, ref.offset, ref.length, prefix=prefix)
        _vetting.vet_module(
            data, ref, fields, policy, order=order, method=method, path=path, sha256=digest
        )
        if chained and order + 1 < len(refs):
            held[order] = data
        return data

    return read_module


def exported_tables(table: fb.Exported) -> Iterator[fb.Exported]:
    """The primal's table, then each nested VJP's."""
    current: fb.Exported | None = table
    for order in range(_limits.MAX_VJP_ORDER + 2):
        if current is None:
            return
        _limits.check_vjp_order(order)
        yield current
        current = current.Vjp()


def save(
    exported: Exported,
    path: PathLike,
    *,
    vjp_order: int = 0,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Writes ``dumps(exported, ...)`` to ``path`` atomically.

    The bytes go to a unique temporary file in the same directory, which is flushed, fsynced
    and renamed over ``path``: a reader sees the old file or the whole new one, never a part.
    A function with VJPs (format version 4) has each level's module in a section of its own
    (``_level_sections``: large ones compressed at once, each in a thread, and from 8 MiB in
    all each section written as soon as it and those before it are known, ``_streamed_levels``);
    a module of 8 MiB or more without VJPs is written as zstd compresses it (``_streamed``).

    Raises:
        OSError: the directory is missing or not writable.
        UnsupportedFeatureError, UnsupportedVersionError: see ``dumps``.
    """
    chain, first = _planned(exported, vjp_order, metadata)
    modules = [bytes(exp.mlir_module_serialized) for exp in chain]
    if len(chain) > 1 and sum(len(m) for m in modules) >= PARALLEL_BYTES:
        _streamed_levels.save_levels_streamed(path, modules, "the Exported", first)
        return
    if len(chain) > 1:
        atomic_write(path, _with_levels(chain, first))
        return
    if sum(len(m) for m in modules) < PARALLEL_BYTES:
        chunks, section, refs = module_section(chain, "the Exported")
        atomic_write(path, [first(refs, [section]), *chunks])
    else:
        _streamed.save_streamed(path, modules, "the Exported", lambda r, s: first(r, [s]))


def load(
    path: PathLike,
    *,
    allow_unsupported_calling_convention: bool = False,
    allow_custom_calls: Iterable[str] = (),
    max_compression_ratio: float = _container.MAX_COMPRESSION_RATIO,
    trusted: bool = False,
    verdicts: VerdictCache | None = None,
    outside_window: str = "warn",
) -> Exported:
    """Reads the archive at ``path``; see ``loads`` for the arguments, checks and errors.

    A file of 1 MiB or more is memory-mapped, not read (``_mapped``): the VJP modules are
    decompressed from the map when ``.vjp()`` asks for them, so the file must not be changed
    in place meanwhile (``save`` renames a new file over the old one, which is safe).

    Raises:
        OSError: the file cannot be read or mapped.
        CorruptArchiveError: also a path that is not a regular file (a FIFO, a device), or one
            over 64 GiB, refused before anything is read.
        IntegrityError, UnsupportedVersionError, UnsupportedFeatureError, UnsafeArchiveError,
            OutsideJaxWindowError, TypeError, ValueError: see ``loads``; their message names
            the file.
    """
    data = read_archive_file(path)
    return loads(
        memoryview(data),
        allow_unsupported_calling_convention=allow_unsupported_calling_convention,
        allow_custom_calls=allow_custom_calls,
        max_compression_ratio=max_compression_ratio,
        path=str(path),
        trusted=trusted,
        verdicts=verdicts,
        outside_window=outside_window,
    )
