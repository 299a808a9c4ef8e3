"""The public surface is pinned: a change to it is a deliberate change to this list."""

from __future__ import annotations

import jaxport


def test_public_names():
    assert jaxport.__all__ == [
        "FORMAT_VERSION",
        "MAX_SUPPORTED_FORMAT_VERSION",
        "MIN_SUPPORTED_FORMAT_VERSION",
        "ArchiveInfo",
        "AvalInfo",
        "ConflictError",
        "CorruptArchiveError",
        "Example",
        "IntegrityError",
        "InvalidNameError",
        "JaxportError",
        "ModuleInfo",
        "NotFoundError",
        "Ref",
        "Registry",
        "RegistryError",
        "Resolution",
        "SchemaVersionError",
        "SectionInfo",
        "UnsupportedFeatureError",
        "UnsupportedVersionError",
        "VariantInfo",
        "__version__",
        "dumps",
        "inspect",
        "load",
        "loads",
        "save",
    ]
    for name in jaxport.__all__:
        assert hasattr(jaxport, name)


def test_error_hierarchy():
    assert issubclass(jaxport.CorruptArchiveError, jaxport.JaxportError)
    assert issubclass(jaxport.CorruptArchiveError, ValueError)
    assert issubclass(jaxport.IntegrityError, jaxport.CorruptArchiveError)
    assert issubclass(jaxport.UnsupportedVersionError, jaxport.JaxportError)
    assert issubclass(jaxport.UnsupportedVersionError, ValueError)
    assert issubclass(jaxport.UnsupportedFeatureError, jaxport.JaxportError)
    assert issubclass(jaxport.NotFoundError, jaxport.RegistryError)
    assert issubclass(jaxport.NotFoundError, LookupError)
    assert issubclass(jaxport.InvalidNameError, ValueError)
    assert issubclass(jaxport.RegistryError, jaxport.JaxportError)


def test_versions():
    assert jaxport.MIN_SUPPORTED_FORMAT_VERSION <= jaxport.FORMAT_VERSION
    assert jaxport.FORMAT_VERSION <= jaxport.MAX_SUPPORTED_FORMAT_VERSION
