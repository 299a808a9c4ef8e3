"""Optional capabilities and the extra that installs each: one import point, one message.

``pip install jaxport`` gives the format, the embedded SQLite registry, audits and the CLI.
Every other capability imports its libraries through ``require``, so that without its extra a
caller gets ``MissingExtraError`` naming the extra (one line in the CLI, exit 1), never a
``ModuleNotFoundError`` from deep inside jaxport. Imports nothing heavy itself.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from jaxport._errors import MissingExtraError

__all__ = ["EXTRAS", "missing_extra", "require"]

#: The top-level modules of optional capabilities, and the extra (``pyproject.toml``) that
#: installs each.
EXTRAS: dict[str, str] = {
    "boto3": "s3",
    "fastapi": "server",
    "fastapi_offline": "server",
    "httpx": "client",
    "jinja2": "server",
    "model_signing": "signing",
    "orbax": "orbax",
    "procrastinate": "queue",
    "psycopg": "postgres",
    "s3fs": "s3",
    "safetensors": "safetensors",
    "uvicorn": "server",
}


def require(module: str, purpose: str) -> ModuleType:
    """Imports ``module`` (a dotted name whose top level is a key of ``EXTRAS``).

    Args:
        module: e.g. ``"httpx"`` or ``"orbax.checkpoint"``.
        purpose: what needs it, for the message (``"the registry server's client"``).

    Returns:
        The module.

    Raises:
        MissingExtraError: the module's package is not installed; the message names the
            extra: ``{purpose} needs {package}: pip install 'jaxport[{extra}]'``.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing not in EXTRAS:  # a broken install of something else: not ours to rename
            raise
        raise missing_extra(missing, purpose) from None


def missing_extra(module: str, purpose: str) -> MissingExtraError:
    """The error for ``module`` (a key of ``EXTRAS``) missing, ``purpose`` needing it."""
    extra = EXTRAS[module]
    return MissingExtraError(
        f"{purpose} needs {module}: pip install 'jaxport[{extra}]'", extra=extra, module=module
    )
