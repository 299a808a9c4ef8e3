"""Shardings: NamedSharding over an AbstractMesh and the HloSharding form.

jax >= 0.9 describes the sharding of each flat input and output as a ``NamedSharding`` over an
abstract mesh (``Exported._in_named_shardings``); older releases only as an ``HloSharding``
(``in_shardings_hlo``). An archive stores both where it can: when the Exported has only the
named form, the writer also derives the HloSharding (flagged ``hlo_derived``) so that an
older jax can read the archive. Meshes are stored once per Exported and referred to by index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flatbuffers
import jax

from jaxport._errors import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export import _compat, _fb
from jaxport.schema import fb

__all__ = [
    "MeshTable",
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
    """An ``fb.AbstractMesh``."""
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
    return fb.AbstractMeshEnd(builder)


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
    return fb.AbstractDeviceEnd(builder)


def decode_abstract_mesh(table: fb.AbstractMesh) -> Any:
    """The ``AbstractMesh`` of an ``fb.AbstractMesh``.

    Raises:
        CorruptArchiveError: axis vectors of different lengths or an unknown axis type.
    """
    sizes = tuple(table.AxisSizesAsNumpy().tolist()) if not table.AxisSizesIsNone() else ()
    names = _fb.read_strs(table, "AxisNames")
    raw_types = table.AxisTypesAsNumpy().tolist() if not table.AxisTypesIsNone() else []
    if not len(sizes) == len(names) == len(raw_types):
        raise CorruptArchiveError("an abstract mesh with axis vectors of different lengths")
    try:
        types = tuple(getattr(jax.sharding.AxisType, _AXIS_TYPE_NAMES[t]) for t in raw_types)
    except KeyError as e:
        raise CorruptArchiveError(f"unknown mesh axis type {e.args[0]}") from None
    device_table = table.Device()
    device = None
    if device_table is not None:
        cores = device_table.NumCores()
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
    return fb.ShardingEnd(builder)


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
    return fb.NamedShardingEnd(builder)


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
    return fb.PartitionSpecEntryEnd(builder)


def decode_sharding(table: fb.Sharding, meshes: Sequence[Any]) -> tuple[Any, Any]:
    """``(named_sharding or None, hlo_sharding or None)`` as the Exported held them.

    Raises:
        CorruptArchiveError: a mesh index out of range or an HloSharding proto that does not
            parse.
    """
    named_table = table.Named()
    named = decode_named_sharding(named_table, meshes) if named_table is not None else None
    hlo = None
    data = _fb.read_bytes(table, "HloSharding")
    use_hlo = not table.HloDerived() or not _compat.HAS_NAMED_SHARDINGS
    if data is not None and use_hlo:
        try:
            hlo = _compat.hlo_sharding_from_proto(data)
        except Exception as e:  # the protobuf runtime's own error types
            raise CorruptArchiveError(f"invalid HloSharding proto: {e}") from None
    return named, hlo


def decode_named_sharding(table: fb.NamedSharding, meshes: Sequence[Any]) -> Any:
    """The ``NamedSharding`` of an ``fb.NamedSharding`` over one of ``meshes``.

    Raises:
        CorruptArchiveError: a mesh index out of range.
    """
    idx = table.Mesh()
    if idx >= len(meshes):
        raise CorruptArchiveError(f"named sharding refers to mesh {idx}, there are {len(meshes)}")
    entries = []
    for entry in _fb.read_tables(table, "Spec"):
        axes = _fb.read_strs(entry, "Axes")
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    kwargs = {}
    for name in ("reduced", "unreduced"):
        values = _fb.read_strs(table, name.capitalize())
        if values:
            kwargs[name] = frozenset(values)
    spec = jax.sharding.PartitionSpec(*entries, **kwargs)
    memory_kind = _fb.read_str(table.MemoryKind()) or None
    return jax.sharding.NamedSharding(meshes[idx], spec, memory_kind=memory_kind)
