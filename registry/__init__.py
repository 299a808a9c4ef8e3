"""The SQL-backed artifact registry: ``Registry``, its result types, references and blob stores.

Names load lazily: ``import jaxport.registry`` imports neither SQLAlchemy nor jax until a name
that needs them is used (``jaxport.registry._config`` is read by the CLI's ``--help``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxport.registry._blobs import (
        BlobStore,
        FsspecBlobStore,
        LocalBlobStore,
        Stray,
        open_blob_store,
    )
    from jaxport.registry._config import (
        BLOBS_ENV,
        BLOBS_OPTIONS_ENV,
        HOME_ENV,
        URL_ENV,
        RegistryConfig,
        default_home,
        default_url,
    )
    from jaxport.registry._db import schema_revision, upgrade_database
    from jaxport.registry._events import Event, acting_as, current_actor
    from jaxport.registry._names import Reference, parse_reference
    from jaxport.registry._queue import QueuedJob
    from jaxport.registry._registry import Registry
    from jaxport.registry._signatures import Signature, SignatureCheck, SignaturePolicy
    from jaxport.registry._tokens import NewToken, TokenInfo
    from jaxport.registry._types import (
        AliasMove,
        BlobProblem,
        GcReport,
        PushResult,
        Ref,
        Rejection,
        Resolution,
        VariantInfo,
        VerifyReport,
    )
    from jaxport.registry._uploads import ArchiveParts
    from jaxport.registry._windows import VariantWindow
    from jaxport.registry._wire import from_wire, to_wire

_LAZY = {
    **dict.fromkeys(
        ["BlobStore", "FsspecBlobStore", "LocalBlobStore", "Stray", "open_blob_store"],
        "jaxport.registry._blobs",
    ),
    **dict.fromkeys(
        [
            "BLOBS_ENV",
            "BLOBS_OPTIONS_ENV",
            "HOME_ENV",
            "URL_ENV",
            "RegistryConfig",
            "default_home",
            "default_url",
        ],
        "jaxport.registry._config",
    ),
    **dict.fromkeys(["schema_revision", "upgrade_database"], "jaxport.registry._db"),
    **dict.fromkeys(["Reference", "parse_reference"], "jaxport.registry._names"),
    **dict.fromkeys(["Event", "acting_as", "current_actor"], "jaxport.registry._events"),
    **dict.fromkeys(["from_wire", "to_wire"], "jaxport.registry._wire"),
    **dict.fromkeys(["NewToken", "TokenInfo"], "jaxport.registry._tokens"),
    "ArchiveParts": "jaxport.registry._uploads",
    "QueuedJob": "jaxport.registry._queue",
    "Registry": "jaxport.registry._registry",
    **dict.fromkeys(
        ["Signature", "SignatureCheck", "SignaturePolicy"], "jaxport.registry._signatures"
    ),
    **dict.fromkeys(
        [
            "AliasMove",
            "BlobProblem",
            "GcReport",
            "PushResult",
            "Ref",
            "Rejection",
            "Resolution",
            "VariantInfo",
            "VerifyReport",
        ],
        "jaxport.registry._types",
    ),
    "VariantWindow": "jaxport.registry._windows",
}

__all__ = [
    "BLOBS_ENV",
    "BLOBS_OPTIONS_ENV",
    "HOME_ENV",
    "URL_ENV",
    "AliasMove",
    "ArchiveParts",
    "BlobProblem",
    "BlobStore",
    "Event",
    "FsspecBlobStore",
    "GcReport",
    "LocalBlobStore",
    "NewToken",
    "PushResult",
    "QueuedJob",
    "Ref",
    "Reference",
    "Registry",
    "RegistryConfig",
    "Rejection",
    "Resolution",
    "Signature",
    "SignatureCheck",
    "SignaturePolicy",
    "Stray",
    "TokenInfo",
    "VariantInfo",
    "VariantWindow",
    "VerifyReport",
    "acting_as",
    "current_actor",
    "default_home",
    "default_url",
    "from_wire",
    "open_blob_store",
    "parse_reference",
    "schema_revision",
    "to_wire",
    "upgrade_database",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxport.registry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
