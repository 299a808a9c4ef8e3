"""``inspect``: what an archive holds, from its header alone."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from jaxport import CorruptArchiveError
from jaxport._files import open_regular
from jaxport._window import JaxWindow
from jaxport.export import (
    _archive,
    _container,
    _fb,
    _limits,
    _model_archive,
    _modules,
    _pytrees,
    _tensors,
    _vetting,
)
from jaxport.export._dtypes import dtype_name
from jaxport.export._info_types import AvalInfo, MethodInfo, ModuleInfo, SectionInfo
from jaxport.export._tensors import TensorInfo
from jaxport.export._window_check import header_window
from jaxport.schema import fb

__all__ = [
    "ArchiveInfo",
    "AvalInfo",
    "MethodInfo",
    "ModuleInfo",
    "SectionInfo",
    "archive_info",
    "inspect",
    "module_custom_calls",
]

_COMPRESSION_NAMES = {fb.Compression.none: "none", fb.Compression.zstd: "zstd"}

#: Aval tables read so far, by position: (shape, dtype name, weak_type).
_AvalCache = dict[int, tuple[tuple[int | str, ...], str, bool]]


@dataclasses.dataclass(frozen=True)
class ArchiveInfo:
    """What ``jaxport.inspect`` reads from an archive's header (sizes in bytes).

    A function archive (``kind == "function"``) describes its Exported in the top-level
    fields. A model archive (``kind == "model"``) lists ``methods`` and ``tensors``; its
    top-level ``platforms`` are those every method was exported for, ``nr_devices`` the most
    any method needs, ``calling_convention_version`` the oldest and ``vjp_order`` the lowest
    any method has, ``modules`` every method's, and the function fields (``fun_name``, the
    avals, constraints, effects, disabled checks, ``uses_global_constants``) are empty.

    ``window``: where the archive stands in jax's 6-month backward-compatibility window,
    judged against the installed jax (``jaxport.jax_window``; its ``last_known_release`` is
    None here: audits live in a registry). ``inspect`` always fills it in.
    """

    format_version: int
    fun_name: str
    platforms: tuple[str, ...]
    nr_devices: int
    calling_convention_version: int
    in_avals: tuple[AvalInfo, ...]
    out_avals: tuple[AvalInfo, ...]
    symbolic_constraints: tuple[str, ...]
    ordered_effects: tuple[str, ...]
    unordered_effects: tuple[str, ...]
    disabled_safety_checks: tuple[str, ...]
    uses_global_constants: bool
    vjp_order: int
    modules: tuple[ModuleInfo, ...]
    custom_call_targets: tuple[str, ...]
    jaxport_version: str
    jax_version: str
    jaxlib_version: str
    metadata: dict[str, str]
    header_length: int
    header_sha256: str
    total_length: int
    sections: tuple[SectionInfo, ...]
    kind: str = "function"
    methods: tuple[MethodInfo, ...] = ()
    tensors: tuple[TensorInfo, ...] = ()
    window: JaxWindow | None = None


def inspect(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> ArchiveInfo:
    """Reads an archive's header: O(1) in the archive's size, nothing decompressed.

    Only the preamble and header of a file are read, and the section ranges are checked
    against the file size; section digests are not checked (``loads`` does that). Time and
    memory are linear in the header's size, within the limits ``loads`` applies
    (schema/FORMAT.md, "Limits"); a key path longer than 256 characters is shortened.

    Args:
        source: a path to an archive file, or the archive's bytes.

    Raises:
        OSError: the file cannot be read.
        CorruptArchiveError, IntegrityError, UnsupportedVersionError: a malformed preamble or
            header; see ``jaxport.loads``; a path that is not a regular file (a FIFO, a
            device: refused before anything is read, never waited on).
    """
    if isinstance(source, bytes | bytearray | memoryview):
        view = memoryview(source).cast("B")
        head = _archive.read_header(view, len(view), path=None)
        path = None
    else:
        path = str(source)
        with open_regular(source, CorruptArchiveError) as f:
            total = os.fstat(f.fileno()).st_size
            start = f.read(_container.PREAMBLE_LENGTH)
            preamble = _container.decode_preamble(start, path=path)
            data = start + f.read(preamble.header_length)
        head = _archive.read_header(data, total, path=path)
    with _fb.translating_read_errors(path), _limits.header_budget(head.preamble.header_length):
        return archive_info(head)


def module_custom_calls(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    *,
    trusted: bool = False,
) -> tuple[tuple[str, ...], ...]:
    """The custom-call targets each module calls, read from the modules themselves (a model's:
    every method's, in the order of ``inspect(...).modules``).

    ``inspect`` reports the targets the header lists (cheap, and a hostile author may lie);
    this reads every module (digests checked, decompressed) and parses it in the module
    sandbox (as ``loads`` does; verdicts cached). ``loads`` refuses an archive whose header
    disagrees with its modules; audits and ``verify`` compare the two without loading.
    Nothing is run or refused here.

    Args:
        source: a path to an archive file, or the archive's bytes.
        trusted: your own archive: parse in this process, MLIR text accepted.

    Returns:
        One tuple per module, the primal's first then the VJPs' by order: its targets, sorted.

    Raises:
        OSError: the file cannot be read.
        CorruptArchiveError, IntegrityError, UnsupportedVersionError: a malformed archive (see
            ``jaxport.loads``), or a module MLIR cannot parse (or MLIR text, unless trusted).
        UnsafeModuleError: the sandbox's worker crashed or hung on a module.
    """
    if isinstance(source, bytes | bytearray | memoryview):
        path, view = None, memoryview(source).cast("B")
    else:
        path = str(source)
        view = memoryview(Path(path).read_bytes())
    head = _archive.read_header(view, len(view), path=path)
    with _fb.translating_read_errors(path):
        chained = head.chained
    reader = _container.SectionReader(
        view[head.payload_start :],
        head.sections,
        payload_start=head.payload_start,
        path=path,
        chained=chained,
    )
    modules = []
    with _fb.translating_read_errors(path):
        for table in _primal_tables(head):
            for order, exported in enumerate(_archive.exported_tables(table)):
                module = exported.Module()
                if module is None:
                    raise CorruptArchiveError(f"module of VJP order {order} is missing", path=path)
                ref = _modules.decode_module(module)
                modules.append((order, ref, reader.read(ref.section, ref.offset, ref.length)))
    if trusted:
        return tuple(_modules.custom_call_targets([m for _, _, m in modules], path=path))
    return tuple(_sandboxed_targets(order, ref, m, path) for order, ref, m in modules)


def _sandboxed_targets(
    order: int, ref: _modules.ModuleRef, data: bytes, path: str | None
) -> tuple[str, ...]:
    where = _vetting.module_name(order, ref.section)
    if not data.startswith(_vetting.BYTECODE_MAGIC):
        raise CorruptArchiveError(f"{where} is not MLIR bytecode", path=path)
    policy = _vetting.ModulePolicy(allowed=frozenset())
    facts = _vetting.module_facts(data, policy, where=where, order=order, section=ref.section)
    return tuple(facts["targets"])


def _primal_tables(head: _archive.ArchiveHeader) -> list[fb.Exported]:
    """The function's Exported table, or each model method's (by name), as ``inspect`` orders
    the modules."""
    model = head.archive.Model()
    if model is None:
        table = head.archive.Exported()
        return [table] if table is not None else []
    _model_archive.check_model_table(head, model)
    tables = [m.Exported() for m in _fb.read_tables(model, "Methods")]
    return [t for t in tables if t is not None]


def _chain(exported: fb.Exported | None) -> list[fb.Exported]:
    chain: list[fb.Exported] = []
    while exported is not None:
        _limits.charge(64)  # an Exported table's least size: the chain is bounded
        _limits.check_vjp_order(len(chain))
        chain.append(exported)
        exported = exported.Vjp()
    return chain


def _common_info(head: _archive.ArchiveHeader) -> dict[str, Any]:
    archive = head.archive
    producer = archive.Producer()
    metadata = {}
    for entry in _fb.read_tables(archive, "Metadata"):
        metadata[_fb.read_str(entry.Key())] = _fb.read_str(entry.Value())
    return {
        "format_version": head.preamble.format_version,
        "jaxport_version": _fb.read_str(producer.JaxportVersion()) if producer else "",
        "jax_version": _fb.read_str(producer.JaxVersion()) if producer else "",
        "jaxlib_version": _fb.read_str(producer.JaxlibVersion()) if producer else "",
        "metadata": metadata,
        "header_length": head.preamble.header_length,
        "header_sha256": head.preamble.header_sha256.hex(),
        "total_length": head.total_length,
        "window": header_window(head),
        "sections": tuple(
            SectionInfo(
                s.offset,
                s.length,
                s.uncompressed_length,
                _COMPRESSION_NAMES.get(s.compression, str(s.compression)),
                s.sha256.hex(),
            )
            for s in head.sections
        ),
    }


def archive_info(head: _archive.ArchiveHeader) -> ArchiveInfo:
    """The ``ArchiveInfo`` of a header read by ``_archive.read_header`` (``inspect`` of it)."""
    archive = head.archive
    model = archive.Model()
    if model is not None:
        _model_archive.check_model_table(head, model)
        return _model_info(head, model)
    chain = _chain(archive.Exported())
    if not chain:
        raise CorruptArchiveError("the archive holds no Exported")
    primal = chain[0]
    modules = tuple(_module_info(order, e) for order, e in enumerate(chain))
    return ArchiveInfo(
        **_common_info(head),
        fun_name=_fb.read_str(primal.FunName()),
        platforms=_fb.read_strs(primal, "Platforms"),
        nr_devices=primal.NrDevices(),
        calling_convention_version=primal.CallingConventionVersion(),
        in_avals=_aval_infos(primal, "In"),
        out_avals=_aval_infos(primal, "Out"),
        symbolic_constraints=_fb.read_strs(primal, "SymbolicConstraints"),
        ordered_effects=_effect_names(primal, "OrderedEffects"),
        unordered_effects=_effect_names(primal, "UnorderedEffects"),
        disabled_safety_checks=tuple(
            _disabled_check_name(c) for c in _fb.read_tables(primal, "DisabledSafetyChecks")
        ),
        uses_global_constants=primal.UsesGlobalConstants(),
        vjp_order=archive.VjpOrder(),
        modules=modules,
        custom_call_targets=tuple(sorted({t for m in modules for t in m.custom_call_targets})),
    )


def _model_info(head: _archive.ArchiveHeader, model: fb.Model) -> ArchiveInfo:
    params = model.Params()
    paths = _pytrees.pytree_paths(params) if params is not None else []
    tensor_tables = _fb.read_tables(model, "Tensors")
    if len(tensor_tables) != len(paths):
        raise CorruptArchiveError(f"{len(paths)} parameter leaves, {len(tensor_tables)} tensors")
    tensors = tuple(
        _tensors.decode_tensor(t, i, head.sections) for i, t in enumerate(tensor_tables)
    )
    methods, modules = [], []
    # Methods may share Exported and aval tables: each is read once (schema/FORMAT.md).
    avals: _AvalCache = {}
    read: dict[tuple[int, int], tuple[MethodInfo, list[ModuleInfo]]] = {}
    for m in _fb.read_tables(model, "Methods"):
        name = _model_archive.method_name(m, None)
        table = m.Exported()
        if table is None:
            raise CorruptArchiveError(f"method {name!r} has no Exported")
        key = (table._tab.Pos, m.VjpOrder())
        if key not in read:
            chain = _chain(table)
            info = _method_info(name, chain[0], m.VjpOrder(), len(tensors), avals)
            read[key] = info, [_module_info(o, e) for o, e in enumerate(chain)]
        info, chain_modules = read[key]
        methods.append(dataclasses.replace(info, name=name))
        modules += [dataclasses.replace(i, method=name) for i in chain_modules]
    if not methods:
        raise CorruptArchiveError("the model has no method")
    platforms = [p for p in methods[0].platforms if all(p in m.platforms for m in methods)]
    return ArchiveInfo(
        **_common_info(head),
        fun_name="",
        platforms=tuple(platforms),
        nr_devices=max(m.nr_devices for m in methods),
        calling_convention_version=min(m.calling_convention_version for m in methods),
        in_avals=(),
        out_avals=(),
        symbolic_constraints=(),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        uses_global_constants=False,
        vjp_order=min(m.vjp_order for m in methods),
        modules=tuple(modules),
        custom_call_targets=tuple(sorted({t for m in modules for t in m.custom_call_targets})),
        kind="model",
        methods=tuple(methods),
        tensors=tensors,
    )


def _method_info(
    name: str, table: fb.Exported, vjp_order: int, n_params: int, avals: _AvalCache
) -> MethodInfo:
    """The method's signature; its first ``n_params`` inputs (the parameters) left out.
    ``avals``: the aval tables of the header read so far (``_aval_infos``)."""
    in_avals = tuple(
        dataclasses.replace(a, path=_argument_path(a.path))
        for a in _aval_infos(table, "In", avals)[n_params:]
    )
    return MethodInfo(
        name=name,
        in_avals=in_avals,
        out_avals=_aval_infos(table, "Out", avals),
        platforms=_fb.read_strs(table, "Platforms"),
        nr_devices=table.NrDevices(),
        calling_convention_version=table.CallingConventionVersion(),
        vjp_order=vjp_order,
        symbolic_constraints=_fb.read_strs(table, "SymbolicConstraints"),
    )


def _argument_path(path: str) -> str:
    """``"[0][2]['x']"`` (argument 2 after the parameters) as the method's ``"[1]['x']"``."""
    match = re.fullmatch(r"\[0\]\[(\d+)\](.*)", path, flags=re.DOTALL)
    return f"[{int(match[1]) - 1}]{match[2]}" if match else path


def _module_info(order: int, table: fb.Exported) -> ModuleInfo:
    module = table.Module()
    ref = _modules.decode_module(module) if module is not None else None
    if ref is None:
        return ModuleInfo(order, 0, "", ())
    return ModuleInfo(order, ref.length, ref.stablehlo_version, ref.custom_call_targets)


def _aval_infos(
    table: fb.Exported, side: str, avals: _AvalCache | None = None
) -> tuple[AvalInfo, ...]:
    """The avals of one side (``"In"``, ``"Out"``); ``avals``: aval tables already read, by
    position (shared by every Exported of a header), filled in here."""
    positions = _fb.table_positions(table, f"Exported.{side}Avals")
    if len(positions) > _limits.MAX_AVALS:
        raise CorruptArchiveError(f"{len(positions)} avals (limit {_limits.MAX_AVALS})")
    tree = getattr(table, f"{side}Tree")()
    paths = _pytrees.pytree_paths(tree) if tree is not None else []
    if len(paths) != len(positions):
        paths = [f"[{i}]" for i in range(len(positions))]
    shardings = _fb.table_positions(table, f"Exported.{side}Shardings")
    summaries = _ShardingSummaries(table)
    avals = avals if avals is not None else {}
    infos = []
    for i, position in enumerate(positions):
        if position not in avals:  # aval tables may be shared: each is read once
            aval = _fb.table_at(fb.AbstractValue, table, position)
            prng = _fb.read_str(aval.PrngImpl())
            avals[position] = (_shape(aval), dtype_name(aval.Dtype(), prng), aval.WeakType())
        shape, dtype, weak_type = avals[position]
        sharding = summaries.at(shardings[i]) if i < len(shardings) else None
        infos.append(AvalInfo(paths[i], shape, dtype, weak_type, sharding))
    return tuple(infos)


def _shape(aval: fb.AbstractValue) -> tuple[int | str, ...]:
    dims = _fb.read_ints(aval, "Shape")
    if len(dims) > _limits.MAX_RANK:
        raise CorruptArchiveError(f"an aval of rank {len(dims)} (limit {_limits.MAX_RANK})")
    exprs = _fb.read_strs(aval, "DimExprs")
    return tuple(exprs[i] if d == -1 and i < len(exprs) else d for i, d in enumerate(dims))


class _ShardingSummaries:
    """One-line descriptions of the shardings of one Exported; each mesh is read once."""

    def __init__(self, exported: fb.Exported) -> None:
        self._exported = exported
        self._meshes = _fb.count(exported.MeshesLength(), exported)
        self._mesh_descriptions: dict[int, str] = {}
        self._summaries: dict[int, str | None] = {}

    def at(self, position: int) -> str | None:
        """The summary of the ``fb.Sharding`` at ``position``; each table is read once."""
        if position not in self._summaries:
            sharding = _fb.table_at(fb.Sharding, self._exported, position)
            self._summaries[position] = self._of(sharding)
        return self._summaries[position]

    def _of(self, sharding: fb.Sharding) -> str | None:
        """``"P('x', None) over {'x': 4}"``, ``"hlo"`` or None."""
        named = sharding.Named()
        if named is None:
            return None if sharding.HloShardingIsNone() else "hlo"
        entries = []
        for entry in _fb.read_tables(named, "Spec"):
            axes = _fb.read_strs(entry, "Axes")
            entries.append("None" if not axes else repr(axes[0]) if len(axes) == 1 else repr(axes))
        return f"P({', '.join(entries)}) over {{{self._mesh(named.Mesh())}}}"

    def _mesh(self, index: int) -> str:
        if index >= self._meshes:
            return ""
        if index not in self._mesh_descriptions:
            mesh = self._exported.Meshes(index)
            names = _fb.read_strs(mesh, "AxisNames")
            sizes = _fb.read_ints(mesh, "AxisSizes")
            self._mesh_descriptions[index] = ", ".join(
                f"{n!r}: {s}" for n, s in zip(names, sizes, strict=False)
            )
        return self._mesh_descriptions[index]


def _effect_names(table: fb.Exported, field: str) -> tuple[str, ...]:
    return tuple(_fb.read_str(e.TypeName()) for e in _fb.read_tables(table, field))


def _disabled_check_name(table: fb.DisabledSafetyCheck) -> str:
    if table.Kind() == fb.DisabledSafetyCheckKind.custom_call:
        return f"custom_call:{_fb.read_str(table.CustomCallTarget())}"
    return "platform" if table.Kind() == fb.DisabledSafetyCheckKind.platform else "unknown"
