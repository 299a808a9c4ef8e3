"""What a compiled executable is keyed by on a host: platform, device kind, jax and jaxlib
releases, device count and the compile options that matter (``HostKey``).

jax's own persistent-cache key covers all of these (and the module itself), so an executable
compiled elsewhere is at worst a cache miss; jaxport compares them first so that a set that
cannot hit is never written into a cache directory, and says which field differs. Importing
this module loads nothing; ``host_key()`` imports jax and initialises its backend. It imports
nothing of jaxport (a base module, ``tests/test_layering.py``): the compile child
(``jaxport/_compile_child.py``) and the registry compute the key alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

__all__ = ["XLA_CACHES", "HostKey", "host_key", "jax_option", "options_digest"]

#: ``jax_persistent_cache_enable_xla_caches`` where compiled sets are made and used: none of
#: XLA's own caches. jax's default puts the path of XLA's GPU autotune cache, under the cache
#: directory, into every compile's options and so into jax's cache key: with it, a key would
#: depend on the directory the files are in.
XLA_CACHES = "none"


@dataclasses.dataclass(frozen=True)
class HostKey:
    """This process's side of a compiled set's key.

    Attributes:
        platform: ``cpu``, ``cuda``, ``rocm`` or ``tpu`` (as variants name platforms).
        device_kind: ``jax.devices()[0].device_kind`` (``"cpu"``, ``"NVIDIA H100 80GB HBM3"``).
        jax_version: ``jax.__version__``.
        jaxlib_version: ``jaxlib.version.__version__``.
        device_count: the devices of the local platform (``len(jax.devices())``).
        options: the compile options that matter, as text: ``xla_flags_sha256`` (sha256 of
            ``$XLA_FLAGS``, "" when unset) and ``jax_enable_x64``.
    """

    platform: str
    device_kind: str
    jax_version: str
    jaxlib_version: str
    device_count: int
    options: dict[str, str]

    @property
    def options_digest(self) -> str:
        """The sha256 (hex) of ``options`` as canonical JSON."""
        return options_digest(self.options)

    def facts(self) -> dict[str, Any]:
        """The key as a JSON object (what a compile child reports)."""
        return dataclasses.asdict(self)


def options_digest(options: dict[str, str]) -> str:
    """The sha256 (hex) of compile options as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(options, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def host_key() -> HostKey:
    """This process's ``HostKey`` (imports jax; initialises its default backend)."""
    import jax
    import jaxlib.version

    flags = os.environ.get("XLA_FLAGS", "")
    options = {
        "jax_enable_x64": str(bool(jax_option("jax_enable_x64"))),
        "xla_flags_sha256": hashlib.sha256(flags.encode()).hexdigest() if flags else "",
    }
    devices = jax.devices()
    return HostKey(
        platform=_platform(jax),
        device_kind=str(devices[0].device_kind),
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.version.__version__,
        device_count=len(devices),
        options=options,
    )


def jax_option(name: str) -> Any:
    """The value of jax's configuration option ``name`` in this process (imports jax)."""
    import jax

    return getattr(jax.config, name)


def _platform(jax: Any) -> str:
    """The default backend's platform as variants name it (``cuda``/``rocm`` for a GPU), as
    ``jaxport.export``'s ``local_platform`` says it (this module imports nothing of jaxport:
    the compile child and the registry share it)."""
    backend = str(jax.default_backend())
    if backend == "gpu":
        version = str(getattr(jax.devices()[0].client, "platform_version", "")).lower()
        return "rocm" if "rocm" in version else "cuda"
    return backend
