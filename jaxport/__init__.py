"""jaxport: a versioned, checksummed archive format and registry for ``jax.export.Exported``.

>>> import jax, jax.export, jax.numpy as jnp, jaxport
>>> exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float32))
>>> jaxport.loads(jaxport.dumps(exp)).call(jnp.zeros(3))
Array([0., 0., 0.], dtype=float32)

Only the errors and the version are imported eagerly: the archive functions (which import
jax) and the registry (which imports SQLAlchemy) load on first use, so ``import jaxport`` and
``jaxport --help`` stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jaxport._errors import (
    AuditError,
    AuthenticationError,
    ConflictError,
    CorruptArchiveError,
    DuplicateVariantError,
    IntegrityError,
    InvalidNameError,
    JaxportError,
    JaxportWarning,
    MissingCustomCallError,
    NewerFormatError,
    NotFoundError,
    OutsideJaxWindowError,
    OutsideJaxWindowWarning,
    ParamsMismatchError,
    PermissionDeniedError,
    RegistryError,
    RunError,
    SchemaVersionError,
    ServerUnavailableError,
    SignatureError,
    UnsafeArchiveError,
    UnsafeModuleError,
    UnsupportedFeatureError,
    UnsupportedVersionError,
    WrongKindError,
)
from jaxport._version import __version__

if TYPE_CHECKING:
    from jaxport._rescue import RescueReport, rescue
    from jaxport._signing import sign_file, verify_file
    from jaxport._window import JaxWindow, jax_window
    from jaxport.audit import AuditResult, Change, Example, Finding, MatrixCell, UpgradeRow
    from jaxport.export import (
        FORMAT_VERSION,
        HOST_CALLBACK_TARGETS,
        MAX_SUPPORTED_FORMAT_VERSION,
        MIN_SUPPORTED_FORMAT_VERSION,
        ArchiveInfo,
        AvalInfo,
        MethodInfo,
        Model,
        ModuleInfo,
        SectionInfo,
        TensorInfo,
        dumps,
        inspect,
        load,
        load_model,
        loads,
        loads_model,
        module_custom_calls,
        save,
        stable_custom_call_targets,
    )
    from jaxport.registry import (
        AliasMove,
        BlobProblem,
        Event,
        GcReport,
        NewToken,
        PushResult,
        QueuedJob,
        Ref,
        Registry,
        Rejection,
        Resolution,
        Signature,
        SignatureCheck,
        SignaturePolicy,
        TokenInfo,
        VariantInfo,
        VariantWindow,
        VerifyReport,
    )

#: Where each lazily imported public name lives.
_LAZY = {
    **dict.fromkeys(
        [
            "FORMAT_VERSION",
            "HOST_CALLBACK_TARGETS",
            "MAX_SUPPORTED_FORMAT_VERSION",
            "MIN_SUPPORTED_FORMAT_VERSION",
            "ArchiveInfo",
            "AvalInfo",
            "MethodInfo",
            "Model",
            "ModuleInfo",
            "SectionInfo",
            "TensorInfo",
            "dumps",
            "inspect",
            "load",
            "load_model",
            "loads",
            "loads_model",
            "module_custom_calls",
            "save",
            "stable_custom_call_targets",
        ],
        "jaxport.export",
    ),
    **dict.fromkeys(
        ["AuditResult", "Change", "Example", "Finding", "MatrixCell", "UpgradeRow"], "jaxport.audit"
    ),
    **dict.fromkeys(
        [
            "AliasMove",
            "BlobProblem",
            "Event",
            "GcReport",
            "NewToken",
            "PushResult",
            "QueuedJob",
            "Ref",
            "Registry",
            "Rejection",
            "Resolution",
            "Signature",
            "SignatureCheck",
            "SignaturePolicy",
            "TokenInfo",
            "VariantInfo",
            "VariantWindow",
            "VerifyReport",
        ],
        "jaxport.registry",
    ),
    **dict.fromkeys(["RescueReport", "rescue"], "jaxport._rescue"),
    **dict.fromkeys(["sign_file", "verify_file"], "jaxport._signing"),
    **dict.fromkeys(["JaxWindow", "jax_window"], "jaxport._window"),
}

__all__ = [
    "FORMAT_VERSION",
    "HOST_CALLBACK_TARGETS",
    "MAX_SUPPORTED_FORMAT_VERSION",
    "MIN_SUPPORTED_FORMAT_VERSION",
    "AliasMove",
    "ArchiveInfo",
    "AuditError",
    "AuditResult",
    "AuthenticationError",
    "AvalInfo",
    "BlobProblem",
    "Change",
    "ConflictError",
    "CorruptArchiveError",
    "DuplicateVariantError",
    "Event",
    "Example",
    "Finding",
    "GcReport",
    "IntegrityError",
    "InvalidNameError",
    "JaxWindow",
    "JaxportError",
    "JaxportWarning",
    "MatrixCell",
    "MethodInfo",
    "MissingCustomCallError",
    "Model",
    "ModuleInfo",
    "NewToken",
    "NewerFormatError",
    "NotFoundError",
    "OutsideJaxWindowError",
    "OutsideJaxWindowWarning",
    "ParamsMismatchError",
    "PermissionDeniedError",
    "PushResult",
    "QueuedJob",
    "Ref",
    "Registry",
    "RegistryError",
    "Rejection",
    "RescueReport",
    "Resolution",
    "RunError",
    "SchemaVersionError",
    "SectionInfo",
    "ServerUnavailableError",
    "Signature",
    "SignatureCheck",
    "SignatureError",
    "SignaturePolicy",
    "TensorInfo",
    "TokenInfo",
    "UnsafeArchiveError",
    "UnsafeModuleError",
    "UnsupportedFeatureError",
    "UnsupportedVersionError",
    "UpgradeRow",
    "VariantInfo",
    "VariantWindow",
    "VerifyReport",
    "WrongKindError",
    "__version__",
    "dumps",
    "inspect",
    "jax_window",
    "load",
    "load_model",
    "loads",
    "loads_model",
    "module_custom_calls",
    "rescue",
    "save",
    "sign_file",
    "stable_custom_call_targets",
    "verify_file",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxport' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise ModuleNotFoundError(
            f"{module} is not importable: Python found the source folder {__path__[0]} "
            "(the checkout's root is the working directory) instead of the installed "
            "package; run from another directory, or use `pytest` for the tests",
            name=module,
        ) from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
