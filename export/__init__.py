"""The jaxport archive: write and read ``jax.export.Exported`` (layout: schema/FORMAT.md).

Names load on first use: ``import jaxport.export`` imports neither jax nor SQLAlchemy until a
name that needs jax is used. Each public name is listed once, as an import below; ``__all__``
and the loader are derived from those lines (``jaxport._lazy``).

The names that ``jaxport`` re-exports are the user API. The others serve jaxport's own
registry, audits and CLI, which use this package only through its public names: the facts of
the running jax (``jax_versions``, ``local_platform``, ...; ``_jax`` is the one module that
imports jax's internals), archives in parts, verdict caches. They may change between releases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._lazy import attach

if TYPE_CHECKING:
    from jaxport.export._archive import dumps as dumps
    from jaxport.export._archive import load as load
    from jaxport.export._archive import loads as loads
    from jaxport.export._archive import save as save
    from jaxport.export._calls import releases_exporting as releases_exporting
    from jaxport.export._calls import runnable_calling_conventions as runnable_calling_conventions
    from jaxport.export._calls import translate_call_error as translate_call_error
    from jaxport.export._compat import READS_HLO_SHARDINGS as READS_HLO_SHARDINGS
    from jaxport.export._compat import calling_convention_range as calling_convention_range
    from jaxport.export._compat import in_shardings_on as in_shardings_on
    from jaxport.export._compat import is_constant_dim as is_constant_dim
    from jaxport.export._compat import jax_versions as jax_versions
    from jaxport.export._compat import local_device_count as local_device_count
    from jaxport.export._compat import local_gpu_platform as local_gpu_platform
    from jaxport.export._compat import local_platform as local_platform
    from jaxport.export._compat import lowering_platforms as lowering_platforms
    from jaxport.export._compat import release_key as release_key
    from jaxport.export._compat import stablehlo_range as stablehlo_range
    from jaxport.export._container import MAGIC as MAGIC
    from jaxport.export._container import PREAMBLE_LENGTH as PREAMBLE_LENGTH
    from jaxport.export._custom_calls import HOST_CALLBACK_TARGETS as HOST_CALLBACK_TARGETS
    from jaxport.export._custom_calls import allowed_targets as allowed_targets
    from jaxport.export._custom_calls import is_host_callback as is_host_callback
    from jaxport.export._custom_calls import (
        registered_custom_call_targets as registered_custom_call_targets,
    )
    from jaxport.export._custom_calls import running_stable_targets as running_stable_targets
    from jaxport.export._custom_calls import (
        stable_custom_call_targets as stable_custom_call_targets,
    )
    from jaxport.export._custom_calls import target_releases as target_releases
    from jaxport.export._dtypes import numpy_dtype as numpy_dtype
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
    from jaxport.export._native import CONVERTED_KEY as CONVERTED_KEY
    from jaxport.export._native import convert_native as convert_native
    from jaxport.export._native import converter_status as converter_status
    from jaxport.export._native import read_native as read_native
    from jaxport.export._native import run_converter as run_converter
    from jaxport.export._native import symbolic_problem as symbolic_problem
    from jaxport.export._newer import newer_note as newer_note
    from jaxport.export._newer import unloadable_here as unloadable_here
    from jaxport.export._parts import ArchiveChunks as ArchiveChunks
    from jaxport.export._parts import Part as Part
    from jaxport.export._parts import assemble_chunks as assemble_chunks
    from jaxport.export._parts import chunks_info as chunks_info
    from jaxport.export._parts import model_from_parts as model_from_parts
    from jaxport.export._parts import ranged_info as ranged_info
    from jaxport.export._parts import split_archive as split_archive
    from jaxport.export._parts import stream_info as stream_info
    from jaxport.export._verdicts import LayeredVerdictCache as LayeredVerdictCache
    from jaxport.export._verdicts import LocalVerdictCache as LocalVerdictCache
    from jaxport.export._verdicts import Verdict as Verdict
    from jaxport.export._verdicts import VerdictCache as VerdictCache
    from jaxport.export._verdicts import VerdictKey as VerdictKey
    from jaxport.export._versions import FORMAT_VERSION as FORMAT_VERSION
    from jaxport.export._versions import (
        MAX_SUPPORTED_FORMAT_VERSION as MAX_SUPPORTED_FORMAT_VERSION,
    )
    from jaxport.export._versions import (
        MIN_SUPPORTED_FORMAT_VERSION as MIN_SUPPORTED_FORMAT_VERSION,
    )
    from jaxport.export._vetting import newer_modules_passed as newer_modules_passed

__all__, __getattr__, __dir__ = attach(__name__)
