"""The artifact registry: ``Registry`` (over a SQL database or a registry server), its result
types, references and blob stores.

Names load lazily: ``import jaxport.registry`` imports neither SQLAlchemy nor jax until a name
that needs them is used (``jaxport.registry._config`` is read by the CLI's ``--help``). Each
public name is listed once, as an import below; ``__all__`` and the loader are derived from
those lines (``jaxport._lazy``). These are the names users call:
``Registry``, the results it returns, references, blob stores and the environment variables
the registry reads. What jaxport's server, CLI and migrations share beyond them is in
``jaxport.registry._internal``, which is not API.
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
    from jaxport.registry._bundles import bundle_export as bundle_export
    from jaxport.registry._bundles import bundle_import as bundle_import
    from jaxport.registry._compiled_types import COMPILED_KEYS_ENV as COMPILED_KEYS_ENV
    from jaxport.registry._compiled_types import USE_COMPILED_ENV as USE_COMPILED_ENV
    from jaxport.registry._compiled_types import CompiledPolicy as CompiledPolicy
    from jaxport.registry._compiled_types import CompiledSet as CompiledSet
    from jaxport.registry._compiled_types import CompiledUse as CompiledUse
    from jaxport.registry._config import BLOBS_ENV as BLOBS_ENV
    from jaxport.registry._config import BLOBS_OPTIONS_ENV as BLOBS_OPTIONS_ENV
    from jaxport.registry._config import HOME_ENV as HOME_ENV
    from jaxport.registry._config import URL_ENV as URL_ENV
    from jaxport.registry._config import default_home as default_home
    from jaxport.registry._config import default_url as default_url
    from jaxport.registry._events import Event as Event
    from jaxport.registry._fleet_rescue import FleetRescueReport as FleetRescueReport
    from jaxport.registry._fleet_rescue import RescueCandidate as RescueCandidate
    from jaxport.registry._fleet_rescue import RescuedVariant as RescuedVariant
    from jaxport.registry._fleet_rescue import RescuedVersion as RescuedVersion
    from jaxport.registry._fleet_rescue import RescueRefusal as RescueRefusal
    from jaxport.registry._gate_types import AliasGates as AliasGates
    from jaxport.registry._gate_types import GateCheck as GateCheck
    from jaxport.registry._gate_types import GateResult as GateResult
    from jaxport.registry._golden import MAX_EXAMPLES_BYTES as MAX_EXAMPLES_BYTES
    from jaxport.registry._lineage import Lineage as Lineage
    from jaxport.registry._lineage import LineageNode as LineageNode
    from jaxport.registry._lineage import Provenance as Provenance
    from jaxport.registry._mirror import mirror as mirror
    from jaxport.registry._names import DESCRIPTION_KEY as DESCRIPTION_KEY
    from jaxport.registry._names import MAX_DESCRIPTION_BYTES as MAX_DESCRIPTION_BYTES
    from jaxport.registry._names import Reference as Reference
    from jaxport.registry._names import parse_reference as parse_reference
    from jaxport.registry._oci_report import CopyReport as CopyReport
    from jaxport.registry._platforms import LOCAL_PLATFORM as LOCAL_PLATFORM
    from jaxport.registry._queue import QueuedJob as QueuedJob
    from jaxport.registry._registry import Registry as Registry
    from jaxport.registry._registry_compiled import (
        CompiledFallbackWarning as CompiledFallbackWarning,
    )
    from jaxport.registry._registry_oci import OciTransfer as OciTransfer
    from jaxport.registry._rescue_queue import QueuedRescue as QueuedRescue
    from jaxport.registry._retention_types import RetentionDecision as RetentionDecision
    from jaxport.registry._retention_types import RetentionPlan as RetentionPlan
    from jaxport.registry._retention_types import RetentionPolicy as RetentionPolicy
    from jaxport.registry._signatures import Signature as Signature
    from jaxport.registry._signatures import SignatureCheck as SignatureCheck
    from jaxport.registry._signatures import SignaturePolicy as SignaturePolicy
    from jaxport.registry._tokens import NewToken as NewToken
    from jaxport.registry._tokens import TokenInfo as TokenInfo
    from jaxport.registry._types import AliasMove as AliasMove
    from jaxport.registry._types import BlobProblem as BlobProblem
    from jaxport.registry._types import GcReport as GcReport
    from jaxport.registry._types import PushResult as PushResult
    from jaxport.registry._types import Ref as Ref
    from jaxport.registry._types import Rejection as Rejection
    from jaxport.registry._types import Resolution as Resolution
    from jaxport.registry._types import VariantInfo as VariantInfo
    from jaxport.registry._types import VerifyReport as VerifyReport
    from jaxport.registry._watch_types import ReleaseSummary as ReleaseSummary
    from jaxport.registry._watch_types import SeenRelease as SeenRelease
    from jaxport.registry._watch_types import VariantForecast as VariantForecast
    from jaxport.registry._watch_types import WatchReport as WatchReport
    from jaxport.registry._windows import VariantWindow as VariantWindow

__all__, __getattr__, __dir__ = attach(__name__)
