"""The SQL-backed artifact registry: ``Registry``, its references and blob stores."""

from __future__ import annotations

from jaxport.registry._audit import Finding, UpgradeRow
from jaxport.registry._blobs import BlobStore, FsspecBlobStore, LocalBlobStore, open_blob_store
from jaxport.registry._diff import Change
from jaxport.registry._examples import Example
from jaxport.registry._refs import Ref, Rejection, Resolution, VariantInfo
from jaxport.registry._registry import (
    DEFAULT_HOME_ENV,
    DEFAULT_URL_ENV,
    GcReport,
    Registry,
    VerifyReport,
    default_home,
    schema_revision,
    upgrade_database,
)

__all__ = [
    "DEFAULT_HOME_ENV",
    "Change",
    "Example",
    "Finding",
    "DEFAULT_URL_ENV",
    "BlobStore",
    "FsspecBlobStore",
    "GcReport",
    "LocalBlobStore",
    "Ref",
    "Registry",
    "Rejection",
    "Resolution",
    "UpgradeRow",
    "VariantInfo",
    "VerifyReport",
    "default_home",
    "open_blob_store",
    "schema_revision",
    "upgrade_database",
]
