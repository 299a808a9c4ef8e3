"""The jaxport archive: write and read ``jax.export.Exported`` (layout: schema/FORMAT.md).

Names load on first use: ``import jaxport.export`` imports neither jax nor SQLAlchemy until a
name that needs jax is used. Each public name is listed once, as an import below; ``__all__``
and the loader are derived from those lines (``jaxport._lazy``).

These are the names users call: the archive API (``save``/``load``/``dumps``/``loads``,
``load_model``/``loads_model``/``Model``, ``inspect`` and the info types it returns,
``convert_native``), the format versions, and the custom-call allowlist. What jaxport's own
registry, audits and CLI share beyond them is in ``jaxport.export._internal``, which is not API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._lazy import attach

if TYPE_CHECKING:
    from jaxport.export._archive import dumps as dumps
    from jaxport.export._archive import load as load
    from jaxport.export._archive import loads as loads
    from jaxport.export._archive import save as save
    from jaxport.export._custom_calls import HOST_CALLBACK_TARGETS as HOST_CALLBACK_TARGETS
    from jaxport.export._custom_calls import allowed_targets as allowed_targets
    from jaxport.export._custom_calls import is_host_callback as is_host_callback
    from jaxport.export._custom_calls import (
        stable_custom_call_targets as stable_custom_call_targets,
    )
    from jaxport.export._custom_calls import target_releases as target_releases
    from jaxport.export._info import ArchiveInfo as ArchiveInfo
    from jaxport.export._info import inspect as inspect
    from jaxport.export._info import module_custom_calls as module_custom_calls
    from jaxport.export._info_types import AvalInfo as AvalInfo
    from jaxport.export._info_types import MethodInfo as MethodInfo
    from jaxport.export._info_types import ModuleInfo as ModuleInfo
    from jaxport.export._info_types import SectionInfo as SectionInfo
    from jaxport.export._info_types import TensorInfo as TensorInfo
    from jaxport.export._model import Model as Model
    from jaxport.export._model_io import load_model as load_model
    from jaxport.export._model_io import loads_model as loads_model
    from jaxport.export._native import convert_native as convert_native
    from jaxport.export._versions import FORMAT_VERSION as FORMAT_VERSION
    from jaxport.export._versions import (
        MAX_SUPPORTED_FORMAT_VERSION as MAX_SUPPORTED_FORMAT_VERSION,
    )
    from jaxport.export._versions import (
        MIN_SUPPORTED_FORMAT_VERSION as MIN_SUPPORTED_FORMAT_VERSION,
    )
__all__, __getattr__, __dir__ = attach(__name__)
