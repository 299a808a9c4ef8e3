"""The artifact registry: ``Registry`` (over a SQL database or a registry server), its result
types, references and blob stores.

Names load lazily: ``import jaxport.registry`` imports neither SQLAlchemy nor jax until a name
that needs them is used (``jaxport.registry._config`` is read by the CLI's ``--help``). Each
public name is listed once, as an import below; ``__all__`` and the loader are derived from
those lines (``jaxport._lazy``). What jaxport's server and CLI share beyond these is in
``jaxport.registry._internal``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._lazy import attach

if TYPE_CHECKING:
    from jaxport.registry._blobs import BlobStore as BlobStore
    from jaxport.registry._blobs import FsspecBlobStore as FsspecBlobStore
    from jaxport.registry._blobs import LocalBlobStore as LocalBlobStore
    from jaxport.registry._blobs import Stray as Stray
    from jaxport.registry._blobs import open_blob_store as open_blob_store
    from jaxport.registry._config import BLOBS_ENV as BLOBS_ENV
    from jaxport.registry._config import BLOBS_OPTIONS_ENV as BLOBS_OPTIONS_ENV
    from jaxport.registry._config import HOME_ENV as HOME_ENV
    from jaxport.registry._config import URL_ENV as URL_ENV
    from jaxport.registry._config import RegistryConfig as RegistryConfig
    from jaxport.registry._config import check_sqlite_directory as check_sqlite_directory
    from jaxport.registry._config import default_home as default_home
    from jaxport.registry._config import default_url as default_url
    from jaxport.registry._config import is_server_url as is_server_url
    from jaxport.registry._config import safe_url as safe_url
    from jaxport.registry._config import sqlite_file as sqlite_file
    from jaxport.registry._db import schema_revision as schema_revision
    from jaxport.registry._db import upgrade_database as upgrade_database
    from jaxport.registry._events import Event as Event
    from jaxport.registry._golden import MAX_EXAMPLES_BYTES as MAX_EXAMPLES_BYTES
    from jaxport.registry._golden import examples_from_blob as examples_from_blob
    from jaxport.registry._names import DESCRIPTION_KEY as DESCRIPTION_KEY
    from jaxport.registry._names import DIGEST_PREFIX as DIGEST_PREFIX
    from jaxport.registry._names import MAX_DESCRIPTION_BYTES as MAX_DESCRIPTION_BYTES
    from jaxport.registry._names import Reference as Reference
    from jaxport.registry._names import parse_reference as parse_reference
    from jaxport.registry._platforms import LOCAL_PLATFORM as LOCAL_PLATFORM
    from jaxport.registry._publish import content_key as content_key
    from jaxport.registry._queue import QueuedJob as QueuedJob
    from jaxport.registry._registry import Registry as Registry
    from jaxport.registry._signatures import Signature as Signature
    from jaxport.registry._signatures import SignatureCheck as SignatureCheck
    from jaxport.registry._signatures import SignaturePolicy as SignaturePolicy
    from jaxport.registry._tokens import NewToken as NewToken
    from jaxport.registry._tokens import TokenInfo as TokenInfo
    from jaxport.registry._types import SHORT_DIGEST_HEX as SHORT_DIGEST_HEX
    from jaxport.registry._types import AliasMove as AliasMove
    from jaxport.registry._types import BlobProblem as BlobProblem
    from jaxport.registry._types import GcReport as GcReport
    from jaxport.registry._types import PushResult as PushResult
    from jaxport.registry._types import Ref as Ref
    from jaxport.registry._types import Rejection as Rejection
    from jaxport.registry._types import Resolution as Resolution
    from jaxport.registry._types import VariantInfo as VariantInfo
    from jaxport.registry._types import VerifyReport as VerifyReport
    from jaxport.registry._uploads import ArchiveParts as ArchiveParts
    from jaxport.registry._windows import VariantWindow as VariantWindow

__all__, __getattr__, __dir__ = attach(__name__)
