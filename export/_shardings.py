"""Shardings: NamedSharding over an AbstractMesh and the HloSharding form.

jax >= 0.9 describes the sharding of each flat input and output as a ``NamedSharding`` over an
abstract mesh (``Exported._in_named_shardings``); older releases only as an ``HloSharding``
(``in_shardings_hlo``). An archive stores both where it can: when the Exported has only the
named form, the writer also derives the HloSharding (flagged ``hlo_derived``) so that an
older jax can read the archive. Meshes are stored once per Exported and referred to by index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import flatbuffers
import jax

from jaxport import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export import _compat, _fb, _limits
from jaxport.export._jax import xla_client
from jaxport.schema import fb

__all__ = [
    "MeshTable",
    "check_spec_rank",
    "decode_abstract_mesh",
    "decode_named_sharding",
    "decode_sharding",
    "encode_abstract_mesh",
    "encode_named_sharding",
    "encode_sharding",
]

_AXIS_TYPES = {
    "Auto": fb.AxisType.Auto,
    "Explicit": fb.AxisType.Explicit,
    "Manual": fb.AxisType.Manual,
}
_AXIS_TYPE_NAMES = {v: k for k, v in _AXIS_TYPES.items()}


class MeshTable:
    """The abstract meshes of one Exported, each stored once, in first-seen order."""

    def __init__(self) -> None:
        self.meshes: list[Any] = []
        self._index: dict[Any, int] = {}

    def index(self, mesh: Any) -> int:
        """The index of ``mesh``, adding it when new."""
        if mesh not in self._index:
            self._index[mesh] = len(self.meshes)
            self.meshes.append(mesh)
        return self._index[mesh]


def encode_abstract_mesh(builder: flatbuffers.Builder, mesh: Any) -> int:
    """An ``fb.AbstractMesh``.

    Raises:
        UnsupportedFeatureError: a mesh over the reader's limits (see ``_mesh_problem``).
    """
    problem = _mesh_problem(tuple(mesh.axis_sizes), tuple(str(n) for n in mesh.axis_names))
    if problem is not None:
        raise UnsupportedFeatureError(f"cannot store the mesh {mesh}: {problem}")
    sizes = _fb.uint32_vector(builder, list(mesh.axis_sizes))
    names = _fb.str_vector(builder, [str(n) for n in mesh.axis_names])
    types = builder.CreateByteVector(bytes(_AXIS_TYPES[t.name] for t in mesh.axis_types))
    device = _encode_abstract_device(builder, getattr(mesh, "abstract_device", None))
    fb.AbstractMeshStart(builder)
    fb.AbstractMeshAddAxisSizes(builder, sizes)
    fb.AbstractMeshAddAxisNames(builder, names)
    fb.AbstractMeshAddAxisTypes(builder, types)
    if device is not None:
        fb.AbstractMeshAddDevice(builder, device)
    return int(fb.AbstractMeshEnd(builder))


def _encode_abstract_device(builder: flatbuffers.Builder, device: Any) -> int | None:
    if device is None:
        return None
    kind = builder.CreateString(device.device_kind)
    platform = getattr(device, "platform", None)
    platform_off = builder.CreateString(platform) if platform else None
    fb.AbstractDeviceStart(builder)
    fb.AbstractDeviceAddDeviceKind(builder, kind)
    fb.AbstractDeviceAddNumCores(builder, -1 if device.num_cores is None else device.num_cores)
    if platform_off is not None:
        fb.AbstractDeviceAddPlatform(builder, platform_off)
    return int(fb.AbstractDeviceEnd(builder))


def _mesh_problem(sizes: tuple[int, ...], names: tuple[str, ...]) -> str | None:
    """What a reader refuses in a mesh: too many axes, an axis of size 0 or over int32, more
    than ``_limits.MAX_DEVICES`` devices, or axis names that are empty or repeated."""
    if len(sizes) > _limits.MAX_MESH_AXES:
        return f"{len(sizes)} axes (limit {_limits.MAX_MESH_AXES})"
    if any(not 1 <= s <= _limits.MAX_MESH_AXIS_SIZE for s in sizes):
        return f"axis sizes {sizes} not all in 1..{_limits.MAX_MESH_AXIS_SIZE}"
    if math.prod(sizes) > _limits.MAX_DEVICES:
        return f"{math.prod(sizes)} devices (limit {_limits.MAX_DEVICES})"
    if len(set(names)) != len(names) or not all(names):
        return f"axis names {names} empty or repeated"
    return None


def decode_abstract_mesh(table: fb.AbstractMesh) -> Any:
    """The ``AbstractMesh`` of an ``fb.AbstractMesh``.

    Raises:
        CorruptArchiveError: axis vectors of different lengths, an unknown axis type, a mesh
            over the limits (``_mesh_problem``), or a negative number of cores.
    """
    sizes = tuple(_fb.read_ints(table, "AxisSizes"))
    names = _fb.read_strs(table, "AxisNames")
    raw_types = _fb.read_ints(table, "AxisTypes")
    if not len(sizes) == len(names) == len(raw_types):
        raise CorruptArchiveError("an abstract mesh with axis vectors of different lengths")
    problem = _mesh_problem(sizes, names)
    if problem is not None:
        raise CorruptArchiveError(f"an abstract mesh with {problem}")
    try:
        types = tuple(getattr(jax.sharding.AxisType, _AXIS_TYPE_NAMES[t]) for t in raw_types)
    except KeyError as e:
        raise CorruptArchiveError(f"unknown mesh axis type {e.args[0]}") from None
    device_table = table.Device()
    device = None
    if device_table is not None:
        cores = device_table.NumCores()
        if cores < -1:
            raise CorruptArchiveError(f"an abstract device with {cores} cores")
        device = (
            _fb.read_str(device_table.DeviceKind()),
            None if cores < 0 else cores,
            _fb.read_str(device_table.Platform()) or None,
        )
    return _compat.make_abstract_mesh(sizes, names, types, device)


def encode_sharding(
    builder: flatbuffers.Builder, named: Any, hlo: Any, aval: Any, meshes: MeshTable
) -> int:
    """An ``fb.Sharding`` with the named form (if any) and the HloSharding form (if any)."""
    derived = False
    if hlo is None and named is not None:
        hlo, derived = _compat.named_to_hlo_sharding(named, aval), True
    named_off = encode_named_sharding(builder, named, meshes) if named is not None else None
    hlo_off = (
        _fb.bytes_vector(builder, _compat.hlo_sharding_to_proto(hlo)) if hlo is not None else None
    )
    fb.ShardingStart(builder)
    if named_off is not None:
        fb.ShardingAddNamed(builder, named_off)
    if hlo_off is not None:
        fb.ShardingAddHloSharding(builder, hlo_off)
    fb.ShardingAddHloDerived(builder, derived)
    return int(fb.ShardingEnd(builder))


def encode_named_sharding(builder: flatbuffers.Builder, sharding: Any, meshes: MeshTable) -> int:
    """An ``fb.NamedSharding``; its mesh is added to ``meshes``."""
    mesh_idx = meshes.index(sharding.mesh.abstract_mesh)
    spec = sharding.spec
    entries = [_encode_spec_entry(builder, e) for e in spec]
    entries_off = _fb._offsets_vector(builder, entries)
    reduced = _fb.str_vector(builder, sorted(getattr(spec, "reduced", ())))
    unreduced = _fb.str_vector(builder, sorted(getattr(spec, "unreduced", ())))
    memory_kind = builder.CreateString(sharding.memory_kind) if sharding.memory_kind else None
    fb.NamedShardingStart(builder)
    fb.NamedShardingAddMesh(builder, mesh_idx)
    fb.NamedShardingAddSpec(builder, entries_off)
    fb.NamedShardingAddReduced(builder, reduced)
    fb.NamedShardingAddUnreduced(builder, unreduced)
    if memory_kind is not None:
        fb.NamedShardingAddMemoryKind(builder, memory_kind)
    return int(fb.NamedShardingEnd(builder))


def _encode_spec_entry(builder: flatbuffers.Builder, entry: Any) -> int:
    if entry is None:
        axes: Sequence[str] = ()
    elif isinstance(entry, str):
        axes = (entry,)
    elif isinstance(entry, tuple) and all(isinstance(a, str) for a in entry):
        axes = entry
    else:
        raise UnsupportedFeatureError(f"cannot store the PartitionSpec entry {entry!r}")
    off = _fb.str_vector(builder, axes)
    fb.PartitionSpecEntryStart(builder)
    fb.PartitionSpecEntryAddAxes(builder, off)
    return int(fb.PartitionSpecEntryEnd(builder))


def decode_sharding(table: fb.Sharding, meshes: Sequence[Any], rank: int) -> tuple[Any, Any]:
    """``(named_sharding or None, hlo_sharding or None)`` of an array of rank ``rank``.

    The HloSharding proto is checked (``_op_sharding_problem``) even when this jax reads the
    named form instead.

    Raises:
        CorruptArchiveError: a mesh index out of range, a bad PartitionSpec, a PartitionSpec
            or tiled HloSharding of another rank than ``rank``, or an HloSharding proto that is
            not a canonical, bounded ``xla.OpSharding``.
    """
    named_at, hlo_at, derived_at = _fb.field_offsets(table, 3)
    if not (named_at or hlo_at):  # unspecified: the common case, from one vtable read
        if _fb.read_uint8(table, derived_at):
            raise CorruptArchiveError("hlo_derived is set but there is no HloSharding")
        return None, None
    named_table = table.Named()
    named = decode_named_sharding(named_table, meshes) if named_table is not None else None
    if named is not None:
        check_spec_rank(named.spec, rank)
    hlo = None
    data = _fb.read_bytes(table, "HloSharding")
    if data is not None:
        proto = xla_client.OpSharding()
        proto.ParseFromString(data)
        problem = _op_sharding_problem(proto, data) or _tiled_rank_problem(proto, rank)
        if problem is not None:
            raise CorruptArchiveError(f"invalid HloSharding: {problem}")
        if not table.HloDerived() or not _compat.HAS_NAMED_SHARDINGS:
            hlo = xla_client.HloSharding.from_proto(proto)
    elif table.HloDerived():
        raise CorruptArchiveError("hlo_derived is set but there is no HloSharding")
    return named, hlo


def _op_sharding_problem(proto: Any, data: bytes) -> str | None:
    """What makes an ``xla.OpSharding`` unreadable here, or None.

    It must re-serialize to the same bytes (what jaxport writes, and proof that the bytes
    parsed), not be a tuple sharding (an input or output is one array), and its tile
    assignment must have at most ``_limits.MAX_DEVICES`` devices, listed or as an iota.
    XLA checks the rest (``HloSharding::FromProto``).
    """
    if proto.SerializeToString() != data:
        return "not a canonical xla.OpSharding proto"
    if proto.type == xla_client.OpSharding.Type.TUPLE or len(proto.tuple_shardings):
        return "a tuple sharding for one array"
    dims = list(proto.tile_assignment_dimensions)
    if len(dims) > _limits.MAX_RANK + 2 or any(d < 1 for d in dims):
        return f"tile assignment dimensions {dims[:8]}"
    devices = math.prod(dims)
    if devices > _limits.MAX_DEVICES:
        return f"{devices} tiles (limit {_limits.MAX_DEVICES})"
    listed = list(proto.tile_assignment_devices)
    if any(not 0 <= d < _limits.MAX_DEVICES for d in listed):
        return "a device id out of range"
    iota = list(proto.iota_reshape_dims)
    if iota and (listed or math.prod(iota) != devices or any(d < 1 for d in iota)):
        return f"an iota tile assignment {iota[:8]} for {devices} tiles"
    perm = list(proto.iota_transpose_perm)
    if sorted(perm) != list(range(len(perm))) or (perm and len(perm) != len(iota)):
        return f"an iota transpose {perm[:8]} that is not a permutation"
    if dims and not iota and len(listed) != devices:
        return f"{len(listed)} devices listed for {devices} tiles"
    if proto.type == xla_client.OpSharding.Type.MAXIMAL and len(listed) != 1:
        return f"a maximal sharding on {len(listed)} devices"
    return None


def _tiled_rank_problem(proto: Any, rank: int) -> str | None:
    """A tiled sharding must tile ``rank`` dimensions (jax asserts on it when calling)."""
    if proto.type != xla_client.OpSharding.Type.OTHER:
        return None
    tiled = len(proto.tile_assignment_dimensions) - len(proto.last_tile_dims)
    tiled -= 1 if proto.replicate_on_last_tile_dim else 0
    return None if tiled == rank else f"{tiled} tiled dimensions for an array of rank {rank}"


def check_spec_rank(spec: Any, rank: int) -> None:
    """Checks that a PartitionSpec has at most ``rank`` entries.

    Raises:
        CorruptArchiveError: it has more (jax asserts on it).
    """
    if len(spec) > rank:
        raise CorruptArchiveError(f"a PartitionSpec of {len(spec)} entries for rank {rank}")


def decode_named_sharding(table: fb.NamedSharding, meshes: Sequence[Any]) -> Any:
    """The ``NamedSharding`` of an ``fb.NamedSharding`` over one of ``meshes``.

    Raises:
        CorruptArchiveError: a mesh index out of range, more than ``_limits.MAX_RANK`` spec
            entries, or an axis that is not in the mesh or is used twice.
    """
    idx = table.Mesh()
    if idx >= len(meshes):
        raise CorruptArchiveError(f"named sharding refers to mesh {idx}, there are {len(meshes)}")
    mesh_axes = set(meshes[idx].axis_names)
    entries: list[Any] = []
    used: list[str] = []
    for entry in _fb.read_tables(table, "Spec"):
        axes = _fb.read_strs(entry, "Axes")
        used.extend(axes)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    if len(entries) > _limits.MAX_RANK:
        raise CorruptArchiveError(f"a PartitionSpec of {len(entries)} entries")
    if len(set(used)) != len(used):
        raise CorruptArchiveError(f"a PartitionSpec that uses a mesh axis twice: {used}")
    kwargs = {}
    for name in ("reduced", "unreduced"):
        values = _fb.read_strs(table, name.capitalize())
        used.extend(values)
        if values:
            kwargs[name] = frozenset(values)
    unknown = sorted(set(used) - mesh_axes)
    if unknown:
        raise CorruptArchiveError(f"a PartitionSpec names {unknown}, not axes of its mesh")
    spec = jax.sharding.PartitionSpec(*entries, **kwargs)
    memory_kind = _fb.read_str(table.MemoryKind()) or None
    return jax.sharding.NamedSharding(meshes[idx], spec, memory_kind=memory_kind)
