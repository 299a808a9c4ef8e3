"""``jax.export.Exported`` <-> ``jaxport.fb.Exported`` (one table per VJP order, nested).

The field meanings are jax's: https://docs.jax.dev/en/latest/export/export.html and the
``Exported`` docstring. StableHLO bytes are not in the table: ``module`` says where they lie in
the payload, and the reader fetches them through a callback, the VJPs' when first asked for.
A function archive's primal level is decoded and checked when the archive is read, each VJP
level (its fields, then its module) when ``.vjp()`` first asks, within what the header's work
budget left (``lazy_vjps``); a model's methods decode every level at load. The writer refuses
what the reader would refuse.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import flatbuffers

from jaxport import CorruptArchiveError, UnsupportedFeatureError, UnsupportedVersionError
from jaxport.export import (
    _avals,
    _calls,
    _compat,
    _fb,
    _limits,
    _modules,
    _pytrees,
    _shardings,
)
from jaxport.export._jax import effects as jax_effects
from jaxport.export._jax import export_impl
from jaxport.schema import fb

__all__ = ["DecodeCache", "decode_exported", "encode_exported"]

ModuleReader = Callable[[_modules.ModuleRef, Mapping[str, Any]], bytes]


def encode_exported(
    builder: flatbuffers.Builder,
    exp: Any,
    module: _modules.ModuleRef,
    vjp: int | None,
    avals: _avals.AvalTables,
) -> int:
    """An ``fb.Exported`` for ``exp``; ``vjp`` is the offset of its VJP's table, if stored.

    ``avals`` holds the aval tables already in the header, to share.

    Raises:
        UnsupportedFeatureError: a part of ``exp`` that cannot be stored (see the encoders), or
            one over the reader's limits (``_limits``).
    """
    _check_writable(exp, avals)
    has_named, in_named, out_named = _compat.exported_named_shardings(exp)
    meshes = _shardings.MeshTable()
    in_shardings = [
        _shardings.encode_sharding(builder, n, h, a, meshes)
        for n, h, a in zip(in_named, exp.in_shardings_hlo, exp.in_avals, strict=True)
    ]
    out_shardings = [
        _shardings.encode_sharding(builder, n, h, a, meshes)
        for n, h, a in zip(out_named, exp.out_shardings_hlo, exp.out_avals, strict=True)
    ]
    _, constraints = _avals.symbolic_constraints(itertools.chain(exp.in_avals, exp.out_avals))

    def encode_aval(b: flatbuffers.Builder, aval: Any) -> int:
        return avals.encode(b, aval, meshes)

    offs = {
        "FunName": builder.CreateString(exp.fun_name),
        "InTree": _pytrees.encode_pytreedef(builder, exp.in_tree),
        "OutTree": _pytrees.encode_pytreedef(builder, exp.out_tree),
        "InAvals": _fb.table_vector(builder, encode_aval, exp.in_avals),
        "OutAvals": _fb.table_vector(builder, encode_aval, exp.out_avals),
        "SymbolicConstraints": _fb.str_vector(builder, constraints),
        "Meshes": _fb.table_vector(builder, _shardings.encode_abstract_mesh, meshes.meshes),
        "InShardings": _fb._offsets_vector(builder, in_shardings),
        "OutShardings": _fb._offsets_vector(builder, out_shardings),
        "Platforms": _fb.str_vector(builder, exp.platforms),
        "OrderedEffects": _fb.table_vector(builder, _encode_effect, exp.ordered_effects),
        "UnorderedEffects": _fb.table_vector(builder, _encode_effect, exp.unordered_effects),
        "DisabledSafetyChecks": _fb.table_vector(
            builder, _encode_disabled_safety_check, exp.disabled_safety_checks
        ),
        "ModuleKeptVarIdx": _fb.uint32_vector(builder, list(exp.module_kept_var_idx)),
        "Module": _modules.encode_module(builder, module),
    }
    fb.ExportedStart(builder)
    for name, off in offs.items():
        getattr(fb, f"ExportedAdd{name}")(builder, off)
    fb.ExportedAddHasNamedShardings(builder, has_named)
    fb.ExportedAddNrDevices(builder, exp.nr_devices)
    fb.ExportedAddUsesGlobalConstants(builder, exp.uses_global_constants)
    fb.ExportedAddCallingConventionVersion(builder, exp.calling_convention_version)
    if vjp is not None:
        fb.ExportedAddVjp(builder, vjp)
    return int(fb.ExportedEnd(builder))


def _check_writable(exp: Any, avals: _avals.AvalTables) -> None:
    for side, values in (("inputs", exp.in_avals), ("outputs", exp.out_avals)):
        if len(values) > _limits.MAX_AVALS:
            raise UnsupportedFeatureError(
                f"an Exported with {len(values)} flat {side} cannot be stored "
                f"(limit {_limits.MAX_AVALS})"
            )
    if exp.nr_devices > _limits.MAX_DEVICES:
        raise UnsupportedFeatureError(
            f"an Exported for {exp.nr_devices} devices cannot be stored "
            f"(limit {_limits.MAX_DEVICES})"
        )
    all_avals = list(itertools.chain(exp.in_avals, exp.out_avals))
    _, constraints = _avals.symbolic_constraints(all_avals)
    avals.add_symbolic_chars(_avals.check_symbolic(all_avals, constraints))


@dataclasses.dataclass
class DecodeCache:
    """What ``decode_exported`` decoded in one header, by table position, to decode once.

    FlatBuffers lets many offsets point at one table: a model's methods share the parameters'
    aval tables (the writer does this), and a hostile header may point every method, or every
    VJP chain, at one large ``Exported``. Decoding each table once makes a header's read cost
    linear in its size whatever it shares (schema/FORMAT.md, "Reading").

    Attributes:
        avals: decoded static, mesh-free avals (``_avals.AvalDecoder``'s ``shared``).
        levels: decoded VJP levels (every field but the module bytes), by table position.
    """

    avals: dict[int, Any] = dataclasses.field(default_factory=dict)
    levels: dict[int, _Level] = dataclasses.field(default_factory=dict)


def decode_exported(
    table: fb.Exported,
    read_module: ModuleReader,
    *,
    check_calling_convention: bool = True,
    vjp_order: int | None = None,
    check_module: Callable[[_modules.ModuleRef], None] | None = None,
    cache: DecodeCache | None = None,
    lazy_vjps: bool = False,
    path: str | None = None,
) -> Any:
    """The ``Exported`` of the ``fb.Exported`` chain that starts at ``table``.

    The chain's length is checked now, and every VJP order is decoded and checked now, within
    the header's work budget (``_limits.Budget``); only the VJPs' module bytes are read later,
    when ``.vjp()`` asks. With ``lazy_vjps`` only the primal level is decoded now, and each
    VJP level when ``.vjp()`` first asks for it, spending what the header's budget left (its
    errors are then raised by ``.vjp()``). A table already in ``cache`` (a level another
    chain of the same header shares) is not decoded again.

    Args:
        table: the primal's table; its ``vjp`` field leads to the VJP of each order.
        read_module: the bytes of a module, given its record and the other decoded fields of
            its level (so that a reader can check the module against them).
        check_calling_convention: refuse a calling convention the running jax cannot run.
        vjp_order: the VJP orders the archive declares; the chain must have exactly these.
        check_module: checks a module's range now (it is read later for the VJPs).
        cache: the decoded tables of the same header, shared by every ``decode_exported`` of
            it with the same ``check_calling_convention`` and ``check_module`` (default: one
            for this chain alone).
        lazy_vjps: decode each VJP level when ``.vjp()`` first asks (a function archive).
        path: the archive's file, named by the errors of a level decoded later.

    Raises:
        CorruptArchiveError: a malformed table, or a VJP chain of another length than
            ``vjp_order``; the message names the VJP order and the field.
        UnsupportedVersionError: a calling convention version outside the running jax's range
            (unless ``check_calling_convention`` is False).
        UnsupportedFeatureError: a dtype, effect or pytree node the running program lacks.
    """
    with _limits.header_budget(len(table._tab.Bytes)) as budget:
        tables = _vjp_tables(table)
        if vjp_order is not None and len(tables) != vjp_order + 1:
            raise CorruptArchiveError(
                f"the archive declares vjp_order {vjp_order} and holds {len(tables) - 1}"
            )
        cache = cache if cache is not None else DecodeCache()

        def level(order: int) -> _Level:
            t = tables[order]
            found = cache.levels.get(t._tab.Pos)
            if found is None:
                with _fb.translating_read_errors(where=_level_name(order)):
                    found = _decode_level(t, cache.avals, check_calling_convention, check_module)
                cache.levels[t._tab.Pos] = found
            return found

        for order in range(1 if lazy_vjps else len(tables)):
            level(order)

    def later(order: int) -> _Level:
        """A VJP level, decoded now within what the header's budget left."""
        with _limits.resumed_budget(budget), _fb.translating_read_errors(path):
            return level(order)

    return _link(len(tables), later, read_module)


def _level_name(order: int) -> str:
    return "the primal Exported" if order == 0 else f"the VJP of order {order}"


def _vjp_tables(table: fb.Exported) -> list[fb.Exported]:
    # Offsets only point forward in a FlatBuffer, so the chain ends; each level costs budget.
    tables = [table]
    while (vjp := tables[-1].Vjp()) is not None:
        _limits.charge(_LEVEL_COST)
        _limits.check_vjp_order(len(tables))
        tables.append(vjp)
    return tables


_LEVEL_COST = 64  # bytes of header an Exported table takes at least, with its vtable


@dataclasses.dataclass(frozen=True)
class _Level:
    """One decoded VJP order: every Exported field but the module bytes."""

    fields: dict[str, Any]
    module: _modules.ModuleRef


def _decode_level(
    table: fb.Exported,
    shared: dict[int, Any],
    check_calling_convention: bool,
    check_module: Callable[[_modules.ModuleRef], None] | None,
) -> _Level:
    cc_version = table.CallingConventionVersion()
    if check_calling_convention:
        check_calling_convention_version(cc_version)
    with _fb.translating_read_errors(where="meshes"):
        meshes = [_shardings.decode_abstract_mesh(m) for m in _fb.read_tables(table, "Meshes")]
    with _fb.translating_read_errors(where="symbolic_constraints"):
        decoder = _avals.AvalDecoder(_avals.read_constraints(table), meshes, shared)
    in_avals = _decode_avals(table, "in_avals", decoder)
    out_avals = _decode_avals(table, "out_avals", decoder)
    in_named, in_hlo = _decode_shardings(table, "in_shardings", in_avals, meshes)
    out_named, out_hlo = _decode_shardings(table, "out_shardings", out_avals, meshes)
    nr_devices = _decode_nr_devices(table)
    _check_hlo_only_shardings(in_named + out_named, in_hlo + out_hlo, nr_devices)
    in_avals = _with_shardings(in_avals, in_named, "in_avals")
    out_avals = _with_shardings(out_avals, out_named, "out_avals")
    module = _decode_module(table, check_module)
    with _fb.translating_read_errors(where="fun_name"):
        fun_name = _fb.read_str(table.FunName())
    with _fb.translating_read_errors(where="platforms"):
        platforms = _fb.read_strs(table, "Platforms")
    fields = {
        "fun_name": fun_name,
        "in_tree": _decode_tree(table.InTree(), "in_tree", in_avals),
        "in_avals": in_avals,
        "out_tree": _decode_tree(table.OutTree(), "out_tree", out_avals),
        "out_avals": out_avals,
        "_has_named_shardings": _has_named_shardings(table, in_hlo + out_hlo),
        "_in_named_shardings": in_named,
        "_out_named_shardings": out_named,
        "in_shardings_hlo": in_hlo,
        "out_shardings_hlo": out_hlo,
        "nr_devices": nr_devices,
        "platforms": platforms,
        "ordered_effects": _decode_effects(table, "ordered_effects"),
        "unordered_effects": _decode_effects(table, "unordered_effects"),
        "disabled_safety_checks": _decode_disabled_safety_checks(table),
        "calling_convention_version": cc_version,
        "module_kept_var_idx": _decode_kept_var_idx(table, len(in_avals)),
        "uses_global_constants": table.UsesGlobalConstants(),
    }
    return _Level(fields, module)


def _link(count: int, level: Callable[[int], _Level], read_module: ModuleReader) -> Any:
    """The primal Exported, its module read now; each VJP built, its level decoded (where
    it was not) and its module read, when first asked for (once, whatever the threads)."""
    built: dict[int, Any] = {}
    lock = threading.RLock()  # building order k reads nothing of order k + 1

    def build(order: int) -> Any:
        with lock:
            if order not in built:
                found = level(order)
                get_vjp = None
                if order + 1 < count:

                    def get_vjp(_: Any) -> Any:
                        return build(order + 1)

                built[order] = _compat.make_exported(
                    _calls.LoadedExported,
                    **found.fields,
                    mlir_module_serialized=read_module(found.module, found.fields),
                    _get_vjp=get_vjp,
                )
            return built[order]

    return build(0)


def check_calling_convention_version(version: int) -> None:
    """Checks a calling convention version that is read or written: every version jax's own
    deserializer reads is accepted (it reads any); a version the running jax cannot run is
    refused only when the function is called or audited (``_calls.check_runnable``).

    Raises:
        UnsupportedVersionError: a version below 1 (jax numbers them from 1), or one that
            does not fit the format's ``uint32``.
    """
    if not 1 <= version <= _MAX_UINT32:
        raise UnsupportedVersionError(
            "calling convention version", version, (1, _MAX_UINT32), "jax numbers them from 1"
        )


_MAX_UINT32 = 2**32 - 1


def _decode_tree(table: fb.PyTreeDef | None, field: str, leaves: tuple[Any, ...]) -> Any:
    with _fb.translating_read_errors(where=field):
        if table is None:
            raise CorruptArchiveError("missing")
        return _pytrees.decode_pytreedef(table, leaves)


def _decode_module(
    table: fb.Exported, check_module: Callable[[_modules.ModuleRef], None] | None
) -> _modules.ModuleRef:
    with _fb.translating_read_errors(where="module"):
        module = table.Module()
        if module is None:
            raise CorruptArchiveError("missing")
        ref = _modules.decode_module(module)
        if check_module is not None:
            check_module(ref)
        return ref


def _decode_nr_devices(table: fb.Exported) -> int:
    n = int(table.NrDevices())
    if n > _limits.MAX_DEVICES:
        raise CorruptArchiveError(f"nr_devices {n} (limit {_limits.MAX_DEVICES})")
    return n


def _with_shardings(avals: tuple[Any, ...], named: tuple[Any, ...], field: str) -> tuple[Any, ...]:
    # An aval stored with its own sharding keeps it; others get the input/output sharding,
    # as jax's own deserializer does.
    result = []
    for i, (a, s) in enumerate(zip(avals, named, strict=True)):
        if s is None or a.sharding.mesh.axis_names:
            result.append(a)
            continue
        with _fb.translating_read_errors(where=field, index=i):
            result.append(_compat.with_sharding(a, s))
    return tuple(result)


def _decode_avals(table: fb.Exported, field: str, decoder: _avals.AvalDecoder) -> tuple[Any, ...]:
    with _fb.translating_read_errors(where=field):
        positions = _fb.table_positions(table, _FIELDS[field])
        if len(positions) > _limits.MAX_AVALS:
            raise CorruptArchiveError(f"{len(positions)} avals (limit {_limits.MAX_AVALS})")
    avals = []
    for i, position in enumerate(positions):
        with _fb.translating_read_errors(where=field, index=i):
            avals.append(decoder.decode_at(table, position))
    return tuple(avals)


_FIELDS = {
    "ordered_effects": "OrderedEffects",
    "unordered_effects": "UnorderedEffects",
    "in_avals": "Exported.InAvals",
    "out_avals": "Exported.OutAvals",
    "in_shardings": "Exported.InShardings",
    "out_shardings": "Exported.OutShardings",
}


def _check_hlo_only_shardings(
    named: tuple[Any, ...], hlo: tuple[Any, ...], nr_devices: int
) -> None:
    """Refuses what the running jax would run on the wrong devices: shardings in the
    HloSharding form only (as jax < 0.9 wrote them) for several devices, under a jax >= 0.11.1,
    which ignores that form (its own ``deserialize`` refuses such exports as expired)."""
    if _compat.READS_HLO_SHARDINGS or nr_devices <= 1:
        return
    if any(h is not None for h in hlo) and all(n is None for n in named):
        raise UnsupportedFeatureError(
            f"shardings for {nr_devices} devices in the HloSharding form only (written by jax "
            f"< 0.9): jax {_compat.jax_versions()[0]} ignores that form (it has named "
            "shardings only since 0.11.1); load it with jax < 0.11.1, or export it again"
        )


def _has_named_shardings(table: fb.Exported, hlo: tuple[Any, ...]) -> bool:
    """The archive's flag; also True when every sharding is unspecified (None is None in
    either form), so that an Exported written by jax < 0.9 (no named shardings) is one a jax
    >= 0.9.2 can ``serialize`` (it refuses an Exported without named shardings)."""
    return bool(table.HasNamedShardings()) or all(h is None for h in hlo)


def _decode_shardings(
    table: fb.Exported, field: str, avals: tuple[Any, ...], meshes: list[Any]
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    with _fb.translating_read_errors(where=field):
        positions = _fb.table_positions(table, _FIELDS[field])
        if len(positions) != len(avals):
            raise CorruptArchiveError(f"{len(positions)} shardings for {len(avals)} avals")
    decoded: dict[tuple[int, int], tuple[Any, Any]] = {}  # shared tables are decoded once
    pairs = []
    for i, (position, aval) in enumerate(zip(positions, avals, strict=True)):
        key = (position, len(aval.shape))
        if key not in decoded:
            with _fb.translating_read_errors(where=field, index=i):
                t = _fb.table_at(fb.Sharding, table, position)
                decoded[key] = _shardings.decode_sharding(t, meshes, key[1])
        pairs.append(decoded[key])
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _decode_kept_var_idx(table: fb.Exported, nr_inputs: int) -> tuple[int, ...]:
    kept = tuple(_fb.read_ints(table, "ModuleKeptVarIdx"))
    if any(i >= nr_inputs for i in kept) or any(a >= b for a, b in itertools.pairwise(kept)):
        raise CorruptArchiveError(
            f"module_kept_var_idx {kept[:16]} is not increasing inside 0..{nr_inputs - 1}"
        )
    return kept


def _encode_effect(builder: flatbuffers.Builder, effect: Any) -> int:
    # As jax.export: an effect is stored by its class, which must rebuild it with no arguments.
    try:
        replica = effect.__class__()
        same = replica == effect and hash(replica) == hash(effect)
    except Exception:
        same = False
    if not same:
        raise UnsupportedFeatureError(
            f"effect {effect} cannot be stored: its class must have a nullary constructor "
            "that builds an equal, hashable effect"
        )
    name = builder.CreateString(str(effect.__class__))
    fb.EffectStart(builder)
    fb.EffectAddTypeName(builder, name)
    return int(fb.EffectEnd(builder))


def _decode_effects(table: fb.Exported, field: str) -> tuple[Any, ...]:
    effects = []
    with _fb.translating_read_errors(where=field):
        tables = _fb.read_tables(table, _FIELDS[field])
    for i, e in enumerate(tables):
        with _fb.translating_read_errors(where=field, index=i):
            effects.append(_decode_effect(e))
    return tuple(effects)


def _decode_disabled_safety_checks(table: fb.Exported) -> tuple[Any, ...]:
    with _fb.translating_read_errors(where="disabled_safety_checks"):
        return tuple(
            _decode_disabled_safety_check(c) for c in _fb.read_tables(table, "DisabledSafetyChecks")
        )


def _decode_effect(table: fb.Effect) -> Any:
    name = _fb.read_str(table.TypeName())
    for effect_type in jax_effects.lowerable_effects._effect_types:
        if str(effect_type) == name:
            return effect_type()
    raise UnsupportedFeatureError(
        f"the archive has effect {name}, which is not a lowerable effect in this program"
    )


def _encode_disabled_safety_check(builder: flatbuffers.Builder, check: Any) -> int:
    target = check.is_custom_call()
    target_off = builder.CreateString(target) if target is not None else None
    if target is not None:
        kind = fb.DisabledSafetyCheckKind.custom_call
    elif check == export_impl.DisabledSafetyCheck.platform():
        kind = fb.DisabledSafetyCheckKind.platform
    else:
        raise UnsupportedFeatureError(f"cannot store the disabled safety check {check}")
    fb.DisabledSafetyCheckStart(builder)
    fb.DisabledSafetyCheckAddKind(builder, kind)
    if target_off is not None:
        fb.DisabledSafetyCheckAddCustomCallTarget(builder, target_off)
    return int(fb.DisabledSafetyCheckEnd(builder))


def _decode_disabled_safety_check(table: fb.DisabledSafetyCheck) -> Any:
    kind = table.Kind()
    if kind == fb.DisabledSafetyCheckKind.custom_call:
        return export_impl.DisabledSafetyCheck.custom_call(_fb.read_str(table.CustomCallTarget()))
    if kind == fb.DisabledSafetyCheckKind.platform:
        return export_impl.DisabledSafetyCheck.platform()
    raise CorruptArchiveError(f"unknown disabled safety check kind {kind}")
