"""The platform a pull chooses for: ``LOCAL_PLATFORM``, the default of ``Registry.resolve``,
``pull``, ``pull_model``, ``pull_bytes``, ``pull_file`` and ``inspect``.

It stands for the local jax backend's platform (``jaxport.export._internal.local_platform``: cpu,
cuda,
rocm or tpu). Without an accelerator plugin jax's only backend is the CPU, so where none is
installed (no ``jax_plugins`` module or entry point, no ``libtpu``, no ``TPU_LIBRARY_PATH``)
or ``$JAX_PLATFORMS`` names ``cpu`` first, it is ``cpu`` without importing jax: a registry
server's client pulls an archive for this machine without loading jax.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Final

from jaxport.registry._names import normalize_platform

__all__ = ["LOCAL_PLATFORM", "LocalPlatform", "chosen_platform", "local_platform_name"]


class LocalPlatform:
    """The type of ``LOCAL_PLATFORM`` (one instance)."""

    def __repr__(self) -> str:
        return "LOCAL_PLATFORM"


#: "The local jax backend's platform": the default ``platform=`` of the pull calls.
LOCAL_PLATFORM: Final = LocalPlatform()


def chosen_platform(platform: Any) -> str | None:
    """``platform`` as a pull resolves it: None (any), ``LOCAL_PLATFORM`` (this machine's) or a
    platform name (any case; ``gpu``: the local GPU kind).

    Raises:
        InvalidNameError: not a platform jax exports for, or ``gpu`` without a GPU.
    """
    if platform is None:
        return None
    if isinstance(platform, LocalPlatform):
        return local_platform_name()
    return normalize_platform(platform)


def local_platform_name() -> str:
    """This machine's jax platform; ``cpu`` without importing jax where jax can have no other
    (see the module's doc)."""
    first = os.environ.get("JAX_PLATFORMS", "").split(",")[0].strip().lower()
    if "jax" not in sys.modules and (first == "cpu" or not _accelerator_plugins()):
        return "cpu"
    from jaxport.export._internal import local_platform

    return local_platform()


def _accelerator_plugins() -> bool:
    """Whether jax may find a backend besides the CPU: its plugin namespace package or entry
    points (``jax._src.xla_bridge.discover_pjrt_plugins``), or a TPU library."""
    if os.environ.get("TPU_LIBRARY_PATH") or importlib.util.find_spec("libtpu") is not None:
        return True
    if importlib.util.find_spec("jax_plugins") is not None:
        return True
    from importlib.metadata import entry_points  # about 0.1 s: only when a pull asks

    return bool(entry_points(group="jax_plugins"))
