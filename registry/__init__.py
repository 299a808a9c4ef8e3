"""The SQL-backed artifact registry: ``Registry``, its references and blob stores."""

from __future__ import annotations

from jaxport.registry._blobs import BlobStore, FsspecBlobStore, LocalBlobStore, open_blob_store
from jaxport.registry._refs import Ref, Rejection, Resolution, VariantInfo
from jaxport.registry._registry import DEFAULT_HOME_ENV, GcReport, Registry

__all__ = [
    "DEFAULT_HOME_ENV",
    "BlobStore",
    "FsspecBlobStore",
    "GcReport",
    "LocalBlobStore",
    "Ref",
    "Registry",
    "Rejection",
    "Resolution",
    "VariantInfo",
    "open_blob_store",
]
