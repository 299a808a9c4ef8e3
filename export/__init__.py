"""The jaxport archive: write and read ``jax.export.Exported`` (layout: schema/FORMAT.md)."""

from __future__ import annotations

from jaxport.export._archive import dumps, load, loads, save
from jaxport.export._custom_calls import (
    HOST_CALLBACK_TARGETS,
    is_host_callback,
    stable_custom_call_targets,
    target_releases,
)
from jaxport.export._info import (
    ArchiveInfo,
    AvalInfo,
    MethodInfo,
    ModuleInfo,
    SectionInfo,
    inspect,
    module_custom_calls,
)
from jaxport.export._model import Model
from jaxport.export._model_io import load_model, loads_model
from jaxport.export._tensors import TensorInfo
from jaxport.export._versions import (
    FORMAT_VERSION,
    MAX_SUPPORTED_FORMAT_VERSION,
    MIN_SUPPORTED_FORMAT_VERSION,
)

__all__ = [
    "FORMAT_VERSION",
    "HOST_CALLBACK_TARGETS",
    "MAX_SUPPORTED_FORMAT_VERSION",
    "MIN_SUPPORTED_FORMAT_VERSION",
    "ArchiveInfo",
    "AvalInfo",
    "MethodInfo",
    "Model",
    "ModuleInfo",
    "SectionInfo",
    "TensorInfo",
    "dumps",
    "inspect",
    "is_host_callback",
    "load",
    "load_model",
    "loads",
    "loads_model",
    "module_custom_calls",
    "save",
    "stable_custom_call_targets",
    "target_releases",
]
