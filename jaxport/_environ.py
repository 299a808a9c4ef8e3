"""The environment a worker process gets: an allow-list, never the parent's whole environment.

Workers (the module sandbox, audits) read archives from authors who may be hostile, so they get
only what an interpreter and jax need to start and find their devices. Registry URLs, tokens,
passwords and cloud credentials never reach them unless a caller names a variable in ``keep``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "worker_environment"]

#: Variables passed to a worker by exact name.
ALLOWED_NAMES = frozenset(
    {
        "HOME",
        "LANG",
        "LANGUAGE",
        "LD_LIBRARY_PATH",
        "PATH",
        "PYTHONHASHSEED",
        "PYTHONPATH",  # where the worker's interpreter finds jaxport, when installed so
        "SYSTEMROOT",  # Windows: needed to start any process
        "TEMP",
        "TMP",
        "TMPDIR",
        "TZ",
        "XLA_FLAGS",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
#: Variables passed by prefix: locale, jax's own configuration, TPU runtime settings.
ALLOWED_PREFIXES = ("LC_", "JAX_", "TPU_")
#: Never passed by prefix, even where a prefix above matches (none do today; kept for safety).
_SECRET_MARKERS = ("PASSWORD", "TOKEN", "SECRET", "CREDENTIAL", "_KEY")


def worker_environment(
    keep: Iterable[str] = (), *, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables of ``environ`` (default ``os.environ``) a worker may see.

    Args:
        keep: further variable names the job needs and says so (e.g. a storage endpoint);
            these are passed even if they look secret.
        environ: the parent's environment.

    Returns:
        A new dict: the allow-listed names and prefixes, less anything that looks like a
        secret, plus ``keep``.
    """
    env = os.environ if environ is None else environ
    kept = set(keep)
    out: dict[str, str] = {}
    for name, value in env.items():
        if name in kept or _allowed(name):
            out[name] = value
    return out


def _allowed(name: str) -> bool:
    upper = name.upper()
    if any(marker in upper for marker in _SECRET_MARKERS):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)
