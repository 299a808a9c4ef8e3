"""The public surface is pinned: a change to it is a deliberate change to these lists."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest

import jaxport
import jaxport.audit
import jaxport.export
import jaxport.registry
from jaxport import _errors

PUBLIC = [
    "FORMAT_VERSION",
    "HOST_CALLBACK_TARGETS",
    "MAX_SUPPORTED_FORMAT_VERSION",
    "MIN_SUPPORTED_FORMAT_VERSION",
    "AliasGates",
    "AliasMove",
    "ArchiveInfo",
    "AuditError",
    "AuditResult",
    "AuthenticationError",
    "AvalInfo",
    "BlobProblem",
    "Change",
    "CompiledFallbackWarning",
    "CompiledPolicy",
    "CompiledSet",
    "CompiledUse",
    "ConflictError",
    "CopyReport",
    "CorruptArchiveError",
    "DuplicateVariantError",
    "Event",
    "Example",
    "Finding",
    "FleetRescueReport",
    "GateCheck",
    "GateError",
    "GateResult",
    "GcReport",
    "IntegrityError",
    "InvalidArgumentError",
    "InvalidNameError",
    "JaxWindow",
    "JaxportError",
    "JaxportWarning",
    "Lineage",
    "LineageNode",
    "MatrixCell",
    "MethodInfo",
    "MissingCustomCallError",
    "MissingExtraError",
    "Model",
    "ModuleInfo",
    "NewToken",
    "NewerFormatError",
    "NotFoundError",
    "OciError",
    "OciTransfer",
    "OutsideJaxWindowError",
    "OutsideJaxWindowWarning",
    "PackageIndexError",
    "ParamsMismatchError",
    "PermissionDeniedError",
    "Provenance",
    "PushResult",
    "QueuedJob",
    "QueuedRescue",
    "Ref",
    "Registry",
    "RegistryError",
    "Rejection",
    "ReleaseSummary",
    "RescueCandidate",
    "RescueRefusal",
    "RescueReport",
    "RescuedVariant",
    "RescuedVersion",
    "Resolution",
    "RetentionDecision",
    "RetentionPlan",
    "RetentionPolicy",
    "RunError",
    "SchemaVersionError",
    "SectionInfo",
    "SeenRelease",
    "ServerUnavailableError",
    "Signature",
    "SignatureCheck",
    "SignatureError",
    "SignaturePolicy",
    "TensorInfo",
    "TimeLimitError",
    "TokenInfo",
    "UnsafeArchiveError",
    "UnsafeModuleError",
    "UnsupportedFeatureError",
    "UnsupportedVersionError",
    "UpgradeRow",
    "VariantForecast",
    "VariantInfo",
    "VariantWindow",
    "VerifyReport",
    "WatchReport",
    "WebhookError",
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


#: What users call of ``jaxport.export`` and ``jaxport.registry`` (issue 25 §1); what jaxport's own
#: packages share beyond these is in each package's ``_internal`` module, which is not API.
EXPORT_PUBLIC = [
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
    "allowed_targets",
    "convert_native",
    "dumps",
    "inspect",
    "is_host_callback",
    "load",
    "load_model",
    "loads",
    "loads_model",
    "module_custom_calls",
    "save",
    "stable_custom_call_targets",
    "target_releases",
]
REGISTRY_PUBLIC = [
    "BLOBS_ENV",
    "BLOBS_OPTIONS_ENV",
    "COMPILED_KEYS_ENV",
    "DESCRIPTION_KEY",
    "HOME_ENV",
    "LOCAL_PLATFORM",
    "MAX_DESCRIPTION_BYTES",
    "MAX_EXAMPLES_BYTES",
    "URL_ENV",
    "USE_COMPILED_ENV",
    "AliasGates",
    "AliasMove",
    "BlobProblem",
    "BlobStore",
    "CompiledFallbackWarning",
    "CompiledPolicy",
    "CompiledSet",
    "CompiledUse",
    "CopyReport",
    "Event",
    "FleetRescueReport",
    "FsspecBlobStore",
    "GateCheck",
    "GateResult",
    "GcReport",
    "Lineage",
    "LineageNode",
    "LocalBlobStore",
    "NewToken",
    "OciTransfer",
    "Provenance",
    "PushResult",
    "QueuedJob",
    "QueuedRescue",
    "Ref",
    "Reference",
    "Registry",
    "Rejection",
    "ReleaseSummary",
    "RescueCandidate",
    "RescueRefusal",
    "RescuedVariant",
    "RescuedVersion",
    "Resolution",
    "RetentionDecision",
    "RetentionPlan",
    "RetentionPolicy",
    "SeenRelease",
    "Signature",
    "SignatureCheck",
    "SignaturePolicy",
    "Stray",
    "TokenInfo",
    "VariantForecast",
    "VariantInfo",
    "VariantWindow",
    "VerifyReport",
    "WatchReport",
    "bundle_export",
    "bundle_import",
    "default_home",
    "default_url",
    "mirror",
    "open_blob_store",
    "parse_reference",
]


def _isort_key(name: str) -> tuple[int, str]:
    """RUF022's order: SCREAMING_CASE, then CamelCase, then the rest."""
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def test_public_names():
    assert jaxport.__all__ == PUBLIC
    for name in jaxport.__all__:
        assert getattr(jaxport, name) is not None


def test_package_public_names():
    assert jaxport.export.__all__ == EXPORT_PUBLIC
    assert jaxport.registry.__all__ == REGISTRY_PUBLIC


def test_internal_modules_share_no_name_with_the_public_ones():
    import jaxport.export._internal
    import jaxport.registry._internal

    for package, internal in [
        (jaxport.export, jaxport.export._internal),
        (jaxport.registry, jaxport.registry._internal),
    ]:
        assert internal.__all__ == sorted(internal.__all__, key=_isort_key)
        assert not set(internal.__all__) & set(package.__all__) - {"MAX_EXAMPLES_BYTES"}
        for name in internal.__all__:
            assert getattr(internal, name) is not None, name


@pytest.mark.parametrize("module", [jaxport, jaxport.export, jaxport.registry, jaxport.audit])
def test_all_is_sorted_and_resolves(module):
    assert module.__all__ == sorted(module.__all__, key=_isort_key)
    for name in module.__all__:
        assert hasattr(module, name), name


def test_every_error_and_result_type_is_public():
    errors = [c for _, c in inspect.getmembers(_errors, inspect.isclass)]
    errors = [c for c in errors if issubclass(c, jaxport.JaxportError)]
    assert {c.__name__ for c in errors} <= set(jaxport.__all__)
    for name in jaxport.registry.__all__ + jaxport.audit.__all__:
        value = getattr(
            jaxport.registry if hasattr(jaxport.registry, name) else jaxport.audit, name
        )
        # inputs, and what the registry reads of an audit (its facts of a variant)
        inputs = (
            "ArchiveParts", "AuditJob", "Environment", "Facts", "Reference", "RegistryConfig",
            "Stray",
        )  # fmt: skip
        if inspect.isclass(value) and dataclasses.is_dataclass(value) and name not in inputs:
            assert name in jaxport.__all__, name


def test_error_hierarchy():
    """Every class of the tree drawn at the top of jaxport/_errors.py, with its built-in."""
    expected = {
        "CorruptArchiveError": (jaxport.JaxportError, ValueError),
        "IntegrityError": (jaxport.CorruptArchiveError,),
        "UnsupportedVersionError": (jaxport.JaxportError, ValueError),
        "NewerFormatError": (jaxport.UnsupportedVersionError,),
        "OutsideJaxWindowError": (jaxport.JaxportError, ValueError),
        "UnsupportedFeatureError": (jaxport.JaxportError, ValueError),
        "UnsafeArchiveError": (jaxport.UnsupportedFeatureError,),
        "MissingCustomCallError": (jaxport.UnsupportedFeatureError,),
        "MissingExtraError": (jaxport.UnsupportedFeatureError,),
        "UnsafeModuleError": (jaxport.UnsafeArchiveError,),
        "ParamsMismatchError": (jaxport.JaxportError, ValueError),
        "RunError": (jaxport.JaxportError, ValueError),
        "TimeLimitError": (jaxport.JaxportError, TimeoutError),
        "InvalidArgumentError": (jaxport.JaxportError, TypeError),
        "AuditError": (jaxport.JaxportError,),
        "PackageIndexError": (jaxport.AuditError,),
        "WebhookError": (jaxport.JaxportError,),
        "SignatureError": (jaxport.JaxportError,),
        "RegistryError": (jaxport.JaxportError,),
        "NotFoundError": (jaxport.RegistryError, LookupError),
        "InvalidNameError": (jaxport.RegistryError, ValueError),
        "ConflictError": (jaxport.RegistryError,),
        "GateError": (jaxport.ConflictError,),
        "DuplicateVariantError": (jaxport.RegistryError, ValueError),
        "SchemaVersionError": (jaxport.RegistryError,),
        "PermissionDeniedError": (jaxport.RegistryError, PermissionError),
        "AuthenticationError": (jaxport.PermissionDeniedError,),
        "ServerUnavailableError": (jaxport.RegistryError,),
        "OciError": (jaxport.RegistryError,),
        "WrongKindError": (jaxport.RegistryError, TypeError),
    }
    defined = {
        n
        for n, c in inspect.getmembers(_errors, inspect.isclass)
        if issubclass(c, jaxport.JaxportError) and c is not jaxport.JaxportError
    }
    assert defined == set(expected)
    for name, bases in expected.items():
        cls = getattr(jaxport, name)
        assert all(issubclass(cls, b) for b in bases), name
        assert name in (_errors.__doc__ or ""), f"{name} is missing from the drawn tree"


def test_warning_hierarchy():
    """The warnings drawn at the top of jaxport/_errors.py."""
    assert issubclass(jaxport.JaxportWarning, UserWarning)
    assert issubclass(jaxport.OutsideJaxWindowWarning, jaxport.JaxportWarning)
    assert "OutsideJaxWindowWarning" in (_errors.__doc__ or "")


def test_versions():
    assert jaxport.MIN_SUPPORTED_FORMAT_VERSION <= jaxport.FORMAT_VERSION
    assert jaxport.FORMAT_VERSION <= jaxport.MAX_SUPPORTED_FORMAT_VERSION


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("import jaxport", ("jax", "sqlalchemy", "alembic")),
        ("import jaxport.export", ("jax", "sqlalchemy", "alembic")),
        ("import jaxport.registry", ("jax", "sqlalchemy", "alembic")),
        ("import jaxport._window", ("jax", "sqlalchemy", "alembic")),
        ("import jaxport._rescue", ("jax", "sqlalchemy", "alembic")),
        ("from jaxport.registry import Registry", ("jax", "sqlalchemy", "alembic")),
    ],
)
def test_imports_stay_light(statement, absent):
    code = f"{statement}; import sys; print(sorted(m for m in {absent!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_known_platforms_agree():
    from jaxport.export._compat import KNOWN_PLATFORMS
    from jaxport.registry._names import KNOWN_PLATFORMS as REGISTRY_PLATFORMS

    assert KNOWN_PLATFORMS == REGISTRY_PLATFORMS


@pytest.mark.parametrize("module", [jaxport, jaxport.export, jaxport.registry, jaxport.audit])
def test_names_are_listed_once(module):
    """Each package lists a public name in one import line (``from M import X as X``); its
    ``__all__`` and lazy loader come from those lines (``jaxport._lazy``)."""
    import ast

    tree = ast.parse(inspect.getsource(module))
    assigned = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in ast.walk(node.targets[0])
        if isinstance(t, ast.Name)
    }
    assert assigned == {"__all__", "__getattr__", "__dir__"}
    imported = [
        a.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
        if a.asname == a.name
    ]
    assert sorted(imported) == sorted(module.__all__)
    assert len(set(imported)) == len(imported)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        module.not_a_name  # noqa: B018
