"""Every difference between the jax releases jaxport supports (0.7.0 to 0.12.x), in one place.

The rest of jaxport reads and builds ``jax.export.Exported`` objects only through these
functions. What changes across releases:

- ``Exported`` gained ``_has_named_shardings`` / ``_in_named_shardings`` /
  ``_out_named_shardings`` (named shardings over abstract meshes) in jax 0.9; before that only
  ``in_shardings_hlo`` / ``out_shardings_hlo`` (HloSharding) exist. jax 0.11.1 dropped the
  ``_has_named_shardings`` flag: every Exported has named shardings, and the HloSharding
  fields are all None ("not used anymore starting 3/17/2026").
- ``AbstractMesh`` gained ``abstract_device`` (0.8); ``AbstractDevice`` gained ``platform``
  (0.10).
- jaxlib's extension, with the MLIR helpers, is ``_jax`` (0.7.1 on) or ``xla_extension``.

jax's private modules come from ``_jax``, the one module that imports ``jax._src``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import jax
from jax import export as jax_export

from jaxport._window import release_key
from jaxport.export._jax import (
    core,
    export_impl,
    hlo,
    jax_lib,
    serialization,
    sharding_impls,
    xla_bridge,
)
from jaxport.export._jax import mesh as mesh_lib

__all__ = [
    "HAS_NAMED_SHARDINGS",
    "KNOWN_PLATFORMS",
    "READS_HLO_SHARDINGS",
    "calling_convention_range",
    "exported_named_shardings",
    "hlo_sharding_to_proto",
    "hlo_shardings_on",
    "in_shardings_on",
    "is_constant_dim",
    "jax_versions",
    "local_device_count",
    "local_gpu_platform",
    "local_platform",
    "lowering_platforms",
    "make_abstract_mesh",
    "make_exported",
    "make_shaped_array",
    "memory_space_name",
    "module_from_portable_artifact",
    "named_to_hlo_sharding",
    "release_key",
    "stablehlo_range",
    "vma_of",
    "with_sharding",
]

_EXPORTED_FIELDS = frozenset(f.name for f in dataclasses.fields(export_impl.Exported))
#: Whether the running jax's Exported carries named shardings (jax >= 0.9).
HAS_NAMED_SHARDINGS = "_in_named_shardings" in _EXPORTED_FIELDS
#: Whether it also says so in a flag (jax 0.9 .. 0.11.0); from 0.11.1 they always are.
_HAS_NAMED_FLAG = "_has_named_shardings" in _EXPORTED_FIELDS
#: Whether the running jax calls an Exported by its HloShardings (jax < 0.11.1).
READS_HLO_SHARDINGS = not HAS_NAMED_SHARDINGS or _HAS_NAMED_FLAG


#: The platform names ``jax.export`` accepts (``Exported.platforms``).
KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def local_platform() -> str:
    """The local jax backend's platform name as exports use it: cpu, cuda, rocm or tpu."""
    backend = jax.default_backend()
    if backend == "gpu":
        version = str(getattr(jax.devices()[0].client, "platform_version", "")).lower()
        return "rocm" if "rocm" in version else "cuda"
    return str(backend)


def local_gpu_platform() -> str:
    """The local GPU's platform name, ``cuda`` or ``rocm``, as jax's
    ``xla_bridge.canonicalize_platform("gpu")`` names it.

    Raises:
        RuntimeError: this machine has no GPU.
    """
    return str(xla_bridge().canonicalize_platform("gpu"))


def lowering_platforms() -> frozenset[str]:
    """The ``KNOWN_PLATFORMS`` the running jax lowers for (all of them where jax cannot tell:
    no ``xla_bridge.is_known_platform``). Initializes no backend."""
    known = getattr(xla_bridge(), "is_known_platform", None)
    return frozenset(p for p in KNOWN_PLATFORMS if known is None or bool(known(p)))


def is_constant_dim(dim: Any) -> bool:
    """Whether an aval's dimension is a static size (not a symbolic expression)."""
    return bool(core.is_constant_dim(dim))


def local_device_count(platform: str) -> int:
    """How many devices of ``platform`` this process has (0: none)."""
    backend = "gpu" if platform in ("cuda", "rocm") else platform
    try:
        devices = jax.devices(backend)
    except RuntimeError:  # jax: "Unknown backend" / "Backend 'tpu' failed to initialize"
        return 0
    if backend == "gpu" and local_platform() != platform:
        return 0
    return len(devices)


def stablehlo_range() -> tuple[str, str]:
    """The StableHLO versions this jaxlib reads: ``(minimum, current)``."""
    dialect = hlo()
    return str(dialect.get_minimum_version()), str(dialect.get_current_version())


def jax_versions() -> tuple[str, str]:
    """The running ``(jax, jaxlib)`` versions."""
    import jaxlib

    return jax.__version__, getattr(jaxlib, "__version__", "unknown")


def calling_convention_range() -> tuple[int, int]:
    """The running jax's supported calling convention versions, inclusive.

    Source: https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions
    """
    return (
        jax_export.minimum_supported_calling_convention_version,
        jax_export.maximum_supported_calling_convention_version,
    )


def exported_named_shardings(exp: Any) -> tuple[bool, tuple[Any, ...], tuple[Any, ...]]:
    """``(has_named_shardings, in_named, out_named)`` of an Exported; all None before jax 0.9."""
    if not HAS_NAMED_SHARDINGS:
        return False, (None,) * len(exp.in_avals), (None,) * len(exp.out_avals)
    has_named = exp._has_named_shardings if _HAS_NAMED_FLAG else True
    return has_named, exp._in_named_shardings, exp._out_named_shardings


def make_exported(cls: Any = None, **fields: Any) -> Any:
    """Builds a ``jax.export.Exported`` (or ``cls``, a subclass) from the fields the running
    jax knows.

    Named-sharding fields are dropped on a jax without them (the HloSharding form is kept).
    """
    make = export_impl.Exported if cls is None else cls
    return make(**{k: v for k, v in fields.items() if k in _EXPORTED_FIELDS})


def named_to_hlo_sharding(sharding: Any, aval: Any) -> Any:
    """The HloSharding of a NamedSharding over an abstract mesh, for an aval of its rank."""
    convert = getattr(export_impl, "named_to_hlo_sharding", None)
    if convert is not None:
        return convert(sharding, aval)
    return sharding._to_xla_hlo_sharding(aval.ndim)


def with_sharding(aval: Any, sharding: Any) -> Any:
    """``aval`` carrying ``sharding``, as jax's own deserializer builds in/out avals."""
    if sharding is None:
        return aval
    return core.update_aval_with_sharding(aval, sharding)


def hlo_shardings_on(shardings: Sequence[Any], devices: Sequence[Any]) -> list[Any]:
    """Concrete shardings on ``devices`` for HloShardings (None: replicated)."""
    gspmd = sharding_impls().GSPMDSharding
    devs = tuple(devices)
    return [gspmd(devs, h) if h is not None else gspmd.get_replicated(devs) for h in shardings]


def in_shardings_on(exp: Any, devices: Sequence[Any]) -> list[Any]:
    """Concrete shardings on ``devices`` (the first ``exp.nr_devices`` are used) for the inputs
    of a sharded Exported.

    With named shardings, each input gets a mesh of its own sharding's abstract mesh (axis
    names, sizes and types) over those devices in order: an export may use several meshes
    (jax's ``export_with_multiple_meshes`` data: inputs over a 1x2 mesh, weights over a 2x1
    one), and jax's ``Exported.in_shardings_jax`` takes only one. An input with no named
    sharding (unspecified) gets None. Without named shardings (jax < 0.9, or none given), the
    HloSharding form on the devices in order.
    """
    devs = list(devices)[: exp.nr_devices]
    _, named, _ = exported_named_shardings(exp)
    if all(s is None for s in named):
        return hlo_shardings_on(exp.in_shardings_hlo, devs)
    meshes: dict[Any, Any] = {}
    return [None if s is None else _on_mesh(s, devs, meshes) for s in named]


def _on_mesh(sharding: Any, devices: Sequence[Any], meshes: dict[Any, Any]) -> Any:
    """``sharding`` (over an abstract mesh) over a concrete mesh of ``devices`` of the same
    axis names, sizes and types; ``meshes`` caches one concrete mesh per abstract mesh."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding

    abstract = sharding.mesh
    key = (abstract.axis_sizes, abstract.axis_names, getattr(abstract, "axis_types", None))
    if key not in meshes:
        size = int(np.prod(abstract.axis_sizes, dtype=np.int64))
        grid = np.array(devices[:size], dtype=object).reshape(abstract.axis_sizes)
        kwargs = {} if key[2] is None else {"axis_types": key[2]}
        meshes[key] = Mesh(grid, abstract.axis_names, **kwargs)
    return NamedSharding(meshes[key], sharding.spec, memory_kind=sharding.memory_kind)


def hlo_sharding_to_proto(sharding: Any) -> bytes:
    """Serializes an HloSharding as an ``xla.OpSharding`` protocol buffer."""
    return bytes(sharding.to_proto().SerializeToString())


def make_abstract_mesh(
    axis_sizes: tuple[int, ...],
    axis_names: tuple[str, ...],
    axis_types: tuple[Any, ...],
    device: tuple[str, int | None, str | None] | None,
) -> Any:
    """Builds a ``jax.sharding.AbstractMesh``; ``device`` is ``(kind, num_cores, platform)``."""
    kwargs: dict[str, Any] = {}
    if device is not None and _accepts(mesh_lib.AbstractMesh, "abstract_device"):
        kind, num_cores, platform = device
        device_kwargs: dict[str, Any] = {"device_kind": kind, "num_cores": num_cores}
        if _accepts(mesh_lib.AbstractDevice, "platform"):
            # Archives from jax < 0.10 have no platform: derive it as jax's own reader does.
            device_kwargs["platform"] = platform or _platform_of_device_kind(kind)
        kwargs["abstract_device"] = mesh_lib.AbstractDevice(**device_kwargs)
    return mesh_lib.AbstractMesh(axis_sizes, axis_names, axis_types, **kwargs)


def make_shaped_array(
    shape: tuple[Any, ...],
    dtype: Any,
    *,
    weak_type: bool,
    memory_space: str | None,
    vma: frozenset[str],
    sharding: Any = None,
) -> Any:
    """Builds a ``jax.core.ShapedArray`` with the attributes the running jax knows."""
    kwargs: dict[str, Any] = {}
    if sharding is not None:
        kwargs["sharding"] = sharding
    if memory_space is not None and hasattr(core, "MemorySpace"):
        kwargs["memory_space"] = getattr(core.MemorySpace, memory_space)
    if vma and _accepts(core.ShapedArray, "vma"):
        kwargs["vma"] = vma
    return core.ShapedArray(shape, dtype, weak_type=weak_type, **kwargs)


def module_from_portable_artifact(data: bytes) -> Any:
    """Deserializes a StableHLO portable artifact into an ``ir.Module`` (needs an ir.Context)."""
    return jax_lib().mlir.deserialize_portable_artifact(data)


def _platform_of_device_kind(kind: str) -> str:
    derive = getattr(serialization(), "get_platform_from_device_kind", None)
    if derive is not None:
        return str(derive(kind))
    kind = kind.lower()
    if "cpu" in kind:
        return "cpu"
    if "tpu" in kind:
        return "tpu"
    return "gpu"


@functools.cache
def _accepts(cls: Any, name: str) -> bool:
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def memory_space_name(aval: Any) -> str | None:
    """The name of an aval's memory space (``"Device"``, ``"Host"``, ``"Any"``), if it has one."""
    space = getattr(aval, "memory_space", None)
    return None if space is None else space.name


def vma_of(aval: Any) -> Sequence[str]:
    """The varying manual axes of an aval, sorted (empty before jax has them)."""
    return sorted(str(a) for a in getattr(aval, "vma", ()))
