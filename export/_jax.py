"""The one door to jax's internals: every import of a ``jax._src`` module in jaxport is here.

jax's public API (``jax.export``, ``jax.sharding``, ``jax.core``) does not cover all that an
archive reader and writer needs: building an ``Exported`` field by field, jax's own
custom-call and pytree registries, the symbolic-dimension parser, abstract meshes, MLIR
contexts. Those come from ``jax._src``, which changes without notice between releases, so
jaxport imports them only here; the rest of ``jaxport.export`` imports them from this module
(``_compat`` holds the differences of behaviour between releases), and the registry and the
audits only use ``jaxport.export``'s public names.

Checked against the releases of the CI matrix (``scripts/test_jax_versions.sh``): jax and
jaxlib 0.7.0, 0.8.3, 0.9.2, 0.10.2, 0.11.2 and 0.12.0.1. What differs between them here:

- ``jax._src.lib`` names the MLIR helpers' extension ``_jax`` from 0.7.1 on, ``xla_extension``
  before (``jax_lib``).
- ``mesh.AbstractMesh`` takes ``abstract_device`` from 0.8 on; ``mesh.AbstractDevice`` takes
  ``platform`` from 0.10 on; ``serialization.get_platform_from_device_kind`` and
  ``export_impl.named_to_hlo_sharding`` exist only in some releases (``_compat`` looks them up
  with ``getattr`` and falls back).
- ``export_impl.Exported`` gained ``_in_named_shardings`` / ``_out_named_shardings`` in 0.9
  and lost ``_has_named_shardings`` in 0.11.1 (``_compat.HAS_NAMED_SHARDINGS``).
- ``core.MemorySpace`` and ``core.ShapedArray(vma=...)`` exist only in newer releases
  (``_compat.make_shaped_array`` checks).
- ``export_impl._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE`` is each release's own list
  (``_custom_calls``; ``_jax_targets`` tabulates every release's).
- ``xla_bridge.is_known_platform``, ``xla_client.custom_call_targets`` and
  ``lapack.registrations`` may be missing from a jaxlib: their callers fall back.

Private names used, by module: ``export_impl`` (``jax._src.export._export``): ``Exported``,
``call``, ``DisabledSafetyCheck``, ``serialization_registry``, ``deserialization_registry``,
``_module_to_bytecode``, ``_CUSTOM_CALL_TARGETS_GUARANTEED_STABLE``; ``shape_poly``:
``_Parser``, ``_DimFactor``, ``_DimExpr._from_operation``, ``_SymbolicConstraint``,
``SymbolicScope``, ``Comparator``; ``effects.lowerable_effects._effect_types``. The modules
that jax itself imports with ``jax`` and ``jax.export`` are imported here eagerly; the others
(``jax_lib``, ``hlo``, ``lapack``, ``serialization``, ``sharding_impls``, ``xla_bridge``,
``compilation_cache``) when
first asked for, as before.
"""

from __future__ import annotations

import functools
from typing import Any

from jax._src import core, dtypes, effects, mesh, named_sharding
from jax._src.export import _export as export_impl
from jax._src.export import shape_poly
from jax._src.interpreters import mlir
from jax._src.lib import xla_client

__all__ = [
    "compilation_cache",
    "core",
    "dtypes",
    "effects",
    "export_impl",
    "hlo",
    "jax_lib",
    "lapack",
    "mesh",
    "mlir",
    "named_sharding",
    "serialization",
    "shape_poly",
    "sharding_impls",
    "xla_bridge",
    "xla_client",
]


@functools.cache
def jax_lib() -> Any:
    """jaxlib's C++ extension (``jax._src.lib._jax``; ``xla_extension`` before jax 0.7.1)."""
    try:
        from jax._src.lib import _jax

        return _jax
    except ImportError:  # jax < 0.7.1
        from jax._src.lib import xla_extension  # type: ignore[attr-defined]

        return xla_extension


def hlo() -> Any:
    """The StableHLO dialect's Python bindings (``jax._src.lib.mlir.dialects.hlo``)."""
    from jax._src.lib.mlir.dialects import hlo

    return hlo


def lapack() -> Any:
    """jaxlib's LAPACK kernels (``jax._src.lib.lapack``). Raises: ImportError where absent."""
    from jax._src.lib import lapack

    return lapack


def serialization() -> Any:
    """jax's own Exported serializer (``jax._src.export.serialization``)."""
    from jax._src.export import serialization

    return serialization


def serialization_generated() -> Any:
    """jax's FlatBuffers accessors of its own serialization
    (``jax._src.export.serialization_generated``)."""
    from jax._src.export import serialization_generated

    return serialization_generated


def compilation_cache() -> Any:
    """``jax._src.compilation_cache`` (the persistent cache's state: ``_cache``,
    ``_cache_initialized``, ``reset_cache``; ``registry/_compiled_seed.py``), or None where a
    jax has none."""
    try:
        from jax._src import compilation_cache
    except ImportError:
        return None
    return compilation_cache


def sharding_impls() -> Any:
    """``jax._src.sharding_impls`` (``GSPMDSharding``)."""
    from jax._src import sharding_impls

    return sharding_impls


def xla_bridge() -> Any:
    """``jax._src.xla_bridge`` (backends, platform names)."""
    from jax._src import xla_bridge

    return xla_bridge
