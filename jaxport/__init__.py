"""jaxport: a versioned, checksummed archive format and registry for ``jax.export.Exported``.

>>> import jax, jax.export, jax.numpy as jnp, jaxport
>>> exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float32))
>>> jaxport.loads(jaxport.dumps(exp)).call(jnp.zeros(3))
Array([0., 0., 0.], dtype=float32)

Only the errors and the version are imported eagerly: the archive functions (which import
jax) and the registry (which imports SQLAlchemy) load on first use, so ``import jaxport`` and
``jaxport --help`` stay fast. Each public name is listed once, as an import below
(``from MODULE import NAME as NAME``, under ``TYPE_CHECKING`` for a name loaded on first use):
``__all__`` and the loader are derived from those lines (``jaxport._lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._errors import AuditError as AuditError
from jaxport._errors import AuthenticationError as AuthenticationError
from jaxport._errors import ConflictError as ConflictError
from jaxport._errors import CorruptArchiveError as CorruptArchiveError
from jaxport._errors import DuplicateVariantError as DuplicateVariantError
from jaxport._errors import GateError as GateError
from jaxport._errors import IntegrityError as IntegrityError
from jaxport._errors import InvalidArgumentError as InvalidArgumentError
from jaxport._errors import InvalidNameError as InvalidNameError
from jaxport._errors import JaxportError as JaxportError
from jaxport._errors import JaxportWarning as JaxportWarning
from jaxport._errors import MissingCustomCallError as MissingCustomCallError
from jaxport._errors import MissingExtraError as MissingExtraError
from jaxport._errors import NewerFormatError as NewerFormatError
from jaxport._errors import NotFoundError as NotFoundError
from jaxport._errors import OciError as OciError
from jaxport._errors import OutsideJaxWindowError as OutsideJaxWindowError
from jaxport._errors import OutsideJaxWindowWarning as OutsideJaxWindowWarning
from jaxport._errors import PackageIndexError as PackageIndexError
from jaxport._errors import ParamsMismatchError as ParamsMismatchError
from jaxport._errors import PermissionDeniedError as PermissionDeniedError
from jaxport._errors import RegistryError as RegistryError
from jaxport._errors import RunError as RunError
from jaxport._errors import SchemaVersionError as SchemaVersionError
from jaxport._errors import ServerUnavailableError as ServerUnavailableError
from jaxport._errors import SignatureError as SignatureError
from jaxport._errors import TimeLimitError as TimeLimitError
from jaxport._errors import UnsafeArchiveError as UnsafeArchiveError
from jaxport._errors import UnsafeModuleError as UnsafeModuleError
from jaxport._errors import UnsupportedFeatureError as UnsupportedFeatureError
from jaxport._errors import UnsupportedVersionError as UnsupportedVersionError
from jaxport._errors import WebhookError as WebhookError
from jaxport._errors import WrongKindError as WrongKindError
from jaxport._lazy import attach
from jaxport._version import __version__ as __version__

if TYPE_CHECKING:
    from jaxport._rescue import RescueReport as RescueReport
    from jaxport._rescue import rescue as rescue
    from jaxport._signing import sign_file as sign_file
    from jaxport._signing import verify_file as verify_file
    from jaxport._window import JaxWindow as JaxWindow
    from jaxport._window import jax_window as jax_window
    from jaxport.audit import AuditResult as AuditResult
    from jaxport.audit import Change as Change
    from jaxport.audit import Example as Example
    from jaxport.audit import Finding as Finding
    from jaxport.audit import MatrixCell as MatrixCell
    from jaxport.audit import UpgradeRow as UpgradeRow
    from jaxport.export import FORMAT_VERSION as FORMAT_VERSION
    from jaxport.export import HOST_CALLBACK_TARGETS as HOST_CALLBACK_TARGETS
    from jaxport.export import MAX_SUPPORTED_FORMAT_VERSION as MAX_SUPPORTED_FORMAT_VERSION
    from jaxport.export import MIN_SUPPORTED_FORMAT_VERSION as MIN_SUPPORTED_FORMAT_VERSION
    from jaxport.export import ArchiveInfo as ArchiveInfo
    from jaxport.export import AvalInfo as AvalInfo
    from jaxport.export import MethodInfo as MethodInfo
    from jaxport.export import Model as Model
    from jaxport.export import ModuleInfo as ModuleInfo
    from jaxport.export import SectionInfo as SectionInfo
    from jaxport.export import TensorInfo as TensorInfo
    from jaxport.export import dumps as dumps
    from jaxport.export import inspect as inspect
    from jaxport.export import load as load
    from jaxport.export import load_model as load_model
    from jaxport.export import loads as loads
    from jaxport.export import loads_model as loads_model
    from jaxport.export import module_custom_calls as module_custom_calls
    from jaxport.export import save as save
    from jaxport.export import stable_custom_call_targets as stable_custom_call_targets
    from jaxport.registry import AliasGates as AliasGates
    from jaxport.registry import AliasMove as AliasMove
    from jaxport.registry import BlobProblem as BlobProblem
    from jaxport.registry import CompiledFallbackWarning as CompiledFallbackWarning
    from jaxport.registry import CompiledPolicy as CompiledPolicy
    from jaxport.registry import CompiledSet as CompiledSet
    from jaxport.registry import CompiledUse as CompiledUse
    from jaxport.registry import CopyReport as CopyReport
    from jaxport.registry import Event as Event
    from jaxport.registry import FleetRescueReport as FleetRescueReport
    from jaxport.registry import GateCheck as GateCheck
    from jaxport.registry import GateResult as GateResult
    from jaxport.registry import GcReport as GcReport
    from jaxport.registry import Lineage as Lineage
    from jaxport.registry import LineageNode as LineageNode
    from jaxport.registry import NewToken as NewToken
    from jaxport.registry import OciTransfer as OciTransfer
    from jaxport.registry import Provenance as Provenance
    from jaxport.registry import PushResult as PushResult
    from jaxport.registry import QueuedJob as QueuedJob
    from jaxport.registry import QueuedRescue as QueuedRescue
    from jaxport.registry import Ref as Ref
    from jaxport.registry import Registry as Registry
    from jaxport.registry import Rejection as Rejection
    from jaxport.registry import ReleaseSummary as ReleaseSummary
    from jaxport.registry import RescueCandidate as RescueCandidate
    from jaxport.registry import RescuedVariant as RescuedVariant
    from jaxport.registry import RescuedVersion as RescuedVersion
    from jaxport.registry import RescueRefusal as RescueRefusal
    from jaxport.registry import Resolution as Resolution
    from jaxport.registry import RetentionDecision as RetentionDecision
    from jaxport.registry import RetentionPlan as RetentionPlan
    from jaxport.registry import RetentionPolicy as RetentionPolicy
    from jaxport.registry import SeenRelease as SeenRelease
    from jaxport.registry import Signature as Signature
    from jaxport.registry import SignatureCheck as SignatureCheck
    from jaxport.registry import SignaturePolicy as SignaturePolicy
    from jaxport.registry import TokenInfo as TokenInfo
    from jaxport.registry import VariantForecast as VariantForecast
    from jaxport.registry import VariantInfo as VariantInfo
    from jaxport.registry import VariantWindow as VariantWindow
    from jaxport.registry import VerifyReport as VerifyReport
    from jaxport.registry import WatchReport as WatchReport

__all__, __getattr__, __dir__ = attach(__name__)
