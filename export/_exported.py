"""``jax.export.Exported`` <-> ``jaxport.fb.Exported`` (one table per VJP order, nested).

The field meanings are jax's: https://docs.jax.dev/en/latest/export/export.html and the
``Exported`` docstring. StableHLO bytes are not in the table: ``module`` says where they lie in
the payload, and the reader fetches them through a callback, the VJP's lazily.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import flatbuffers
from jax._src import effects as jax_effects
from jax._src.export import _export

from jaxport._errors import CorruptArchiveError, UnsupportedFeatureError, UnsupportedVersionError
from jaxport.export import _avals, _compat, _fb, _modules, _pytrees, _shardings
from jaxport.schema import fb

__all__ = ["decode_exported", "encode_exported"]

ModuleReader = Callable[[_modules.ModuleRef], bytes]


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
        UnsupportedFeatureError: a part of ``exp`` that cannot be stored (see the encoders).
    """
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
    return fb.ExportedEnd(builder)


def decode_exported(
    table: fb.Exported, read_module: ModuleReader, *, check_calling_convention: bool = True
) -> Any:
    """The ``Exported`` of an ``fb.Exported``; its VJP, if stored, is decoded when asked for.

    Raises:
        CorruptArchiveError: a malformed table.
        UnsupportedVersionError: a calling convention version outside the running jax's range
            (unless ``check_calling_convention`` is False).
        UnsupportedFeatureError: a dtype, effect or pytree node the running program lacks.
    """
    cc_version = table.CallingConventionVersion()
    if check_calling_convention:
        check_calling_convention_version(cc_version)
    meshes = _fb.read_tables(table, "Meshes")
    mesh_objs = [_shardings.decode_abstract_mesh(m) for m in meshes]
    in_avals, out_avals = _decode_avals(table, mesh_objs)
    in_named, in_hlo = _decode_shardings(table, "InShardings", len(in_avals), mesh_objs)
    out_named, out_hlo = _decode_shardings(table, "OutShardings", len(out_avals), mesh_objs)
    in_avals = _with_shardings(in_avals, in_named)
    out_avals = _with_shardings(out_avals, out_named)
    vjp_table = table.Vjp()
    get_vjp = None
    if vjp_table is not None:

        def get_vjp(_: Any) -> Any:
            return decode_exported(
                vjp_table, read_module, check_calling_convention=check_calling_convention
            )

    return _compat.make_exported(
        fun_name=_fb.read_str(table.FunName()),
        in_tree=_pytrees.decode_pytreedef(_required(table.InTree(), "in_tree"), in_avals),
        in_avals=in_avals,
        out_tree=_pytrees.decode_pytreedef(_required(table.OutTree(), "out_tree"), out_avals),
        out_avals=out_avals,
        _has_named_shardings=table.HasNamedShardings(),
        _in_named_shardings=in_named,
        _out_named_shardings=out_named,
        in_shardings_hlo=in_hlo,
        out_shardings_hlo=out_hlo,
        nr_devices=table.NrDevices(),
        platforms=_fb.read_strs(table, "Platforms"),
        ordered_effects=_decode_effects(table, "OrderedEffects"),
        unordered_effects=_decode_effects(table, "UnorderedEffects"),
        disabled_safety_checks=tuple(
            _decode_disabled_safety_check(c) for c in _fb.read_tables(table, "DisabledSafetyChecks")
        ),
        mlir_module_serialized=read_module(
            _modules.decode_module(_required(table.Module(), "module"))
        ),
        calling_convention_version=cc_version,
        module_kept_var_idx=_decode_kept_var_idx(table, len(in_avals)),
        uses_global_constants=table.UsesGlobalConstants(),
        _get_vjp=get_vjp,
    )


def check_calling_convention_version(version: int) -> None:
    """Checks ``version`` against the running jax's supported calling convention versions.

    Raises:
        UnsupportedVersionError: outside ``jax.export.minimum_supported_calling_convention_version``
            to ``maximum_supported_calling_convention_version``
            (https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions).
    """
    lo, hi = _compat.calling_convention_range()
    if not lo <= version <= hi:
        raise UnsupportedVersionError(
            "calling convention version",
            version,
            (lo, hi),
            f"the running jax is {_compat.jax_versions()[0]}",
        )


def _required(value: Any, name: str) -> Any:
    if value is None:
        raise CorruptArchiveError(f"the Exported has no {name}")
    return value


def _with_shardings(avals: tuple[Any, ...], named: tuple[Any, ...]) -> tuple[Any, ...]:
    # An aval stored with its own sharding keeps it; others get the input/output sharding,
    # as jax's own deserializer does.
    return tuple(
        a if s is None or a.sharding.mesh.axis_names else _compat.with_sharding(a, s)
        for a, s in zip(avals, named, strict=True)
    )


def _decode_avals(table: fb.Exported, meshes: list[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    ins = _fb.read_tables(table, "InAvals")
    outs = _fb.read_tables(table, "OutAvals")
    symbolic = any(not a.DimExprsIsNone() for a in itertools.chain(ins, outs))
    scope = _avals.decode_symbolic_scope(table) if symbolic else None
    return (
        tuple(_avals.decode_aval(a, scope, meshes) for a in ins),
        tuple(_avals.decode_aval(a, scope, meshes) for a in outs),
    )


def _decode_shardings(
    table: fb.Exported, field: str, n: int, meshes: list[Any]
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    tables = _fb.read_tables(table, field)
    if len(tables) != n:
        raise CorruptArchiveError(f"{len(tables)} {field} for {n} avals")
    pairs = [_shardings.decode_sharding(t, meshes) for t in tables]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def _decode_kept_var_idx(table: fb.Exported, nr_inputs: int) -> tuple[int, ...]:
    if table.ModuleKeptVarIdxIsNone():
        return ()
    kept = tuple(table.ModuleKeptVarIdxAsNumpy().tolist())
    if any(i >= nr_inputs for i in kept) or list(kept) != sorted(set(kept)):
        raise CorruptArchiveError(f"module_kept_var_idx {kept} is not sorted inside 0..{nr_inputs}")
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
    return fb.EffectEnd(builder)


def _decode_effects(table: fb.Exported, field: str) -> tuple[Any, ...]:
    return tuple(_decode_effect(e) for e in _fb.read_tables(table, field))


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
    elif check == _export.DisabledSafetyCheck.platform():
        kind = fb.DisabledSafetyCheckKind.platform
    else:
        raise UnsupportedFeatureError(f"cannot store the disabled safety check {check}")
    fb.DisabledSafetyCheckStart(builder)
    fb.DisabledSafetyCheckAddKind(builder, kind)
    if target_off is not None:
        fb.DisabledSafetyCheckAddCustomCallTarget(builder, target_off)
    return fb.DisabledSafetyCheckEnd(builder)


def _decode_disabled_safety_check(table: fb.DisabledSafetyCheck) -> Any:
    kind = table.Kind()
    if kind == fb.DisabledSafetyCheckKind.custom_call:
        return _export.DisabledSafetyCheck.custom_call(_fb.read_str(table.CustomCallTarget()))
    if kind == fb.DisabledSafetyCheckKind.platform:
        return _export.DisabledSafetyCheck.platform()
    raise CorruptArchiveError(f"unknown disabled safety check kind {kind}")
