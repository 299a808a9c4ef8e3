"""The jaxport archive: write and read ``jax.export.Exported`` (layout: schema/FORMAT.md)."""

from __future__ import annotations

from jaxport.export._archive import dumps, load, loads, save
from jaxport.export._info import ArchiveInfo, AvalInfo, ModuleInfo, SectionInfo, inspect
from jaxport.export._versions import (
    FORMAT_VERSION,
    MAX_SUPPORTED_FORMAT_VERSION,
    MIN_SUPPORTED_FORMAT_VERSION,
)

__all__ = [
    "FORMAT_VERSION",
    "MAX_SUPPORTED_FORMAT_VERSION",
    "MIN_SUPPORTED_FORMAT_VERSION",
    "ArchiveInfo",
    "AvalInfo",
    "ModuleInfo",
    "SectionInfo",
    "dumps",
    "inspect",
    "load",
    "loads",
    "save",
]
