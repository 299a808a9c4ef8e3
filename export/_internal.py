"""What jaxport's own packages (the registry, audits, the CLI) use of ``jaxport.export`` beyond
its public names: the one private module of the package another may import
(``tests/test_layering.py``). Nothing here is API: any name may change between releases.

Names load on first use, as the package's do (``jaxport._lazy``): importing this module imports
no jax.

- Archives in parts: ``ArchiveLayout``, ``chunks_layout`` and ``ranged_layout`` (what splitting
  an archive needs of its header, read without jax, whole or by ranges), ``split_archive``,
  ``assemble_chunks``, ``model_from_parts`` and their info readers.
- The facts of the running jax (``jax_versions``, ``local_platform``, ``release_key``, ...;
  ``_jax`` is the one module that imports jax's internals) and of custom-call targets.
- A model archive written again with other modules, its tensors' stored sections copied
  (``read_skeleton``, ``rewritten_chunks``: a fleet rescue's child).
- A function archive a module at a time (``module_of``: the server's answer for one module;
  ``read_prefix`` and ``exported_from_header``: a client's Exported, its VJPs fetched when asked).
- Verdict caches (the sandbox's verdicts on modules, kept by the registry), the native
  converter, the newer-format notes, the container's framing constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._lazy import attach
from jaxport.export._parts import ArchiveLayout as ArchiveLayout
from jaxport.export._parts import chunks_layout as chunks_layout
from jaxport.export._parts import ranged_layout as ranged_layout

if TYPE_CHECKING:
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
    from jaxport.export._compat import named_to_hlo_sharding as named_to_hlo_sharding
    from jaxport.export._compat import release_key as release_key
    from jaxport.export._compat import stablehlo_range as stablehlo_range
    from jaxport.export._container import MAGIC as MAGIC
    from jaxport.export._container import PREAMBLE_LENGTH as PREAMBLE_LENGTH
    from jaxport.export._custom_calls import (
        registered_custom_call_targets as registered_custom_call_targets,
    )
    from jaxport.export._custom_calls import running_stable_targets as running_stable_targets
    from jaxport.export._dtypes import numpy_dtype as numpy_dtype
    from jaxport.export._fetched_modules import exported_from_header as exported_from_header
    from jaxport.export._fetched_modules import module_lengths as module_lengths
    from jaxport.export._fetched_modules import module_of as module_of
    from jaxport.export._fetched_modules import read_prefix as read_prefix
    from jaxport.export._jax import compilation_cache as compilation_cache
    from jaxport.export._model_rewrite import read_skeleton as read_skeleton
    from jaxport.export._model_rewrite import rewritten_chunks as rewritten_chunks
    from jaxport.export._modules import reserialized as reserialized
    from jaxport.export._native import CONVERTED_KEY as CONVERTED_KEY
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
    from jaxport.export._verdicts import default_cache_dir as default_cache_dir
    from jaxport.export._vetting import newer_modules_passed as newer_modules_passed


__all__, __getattr__, __dir__ = attach(__name__)
