"""jaxport: a versioned, checksummed archive format and registry for ``jax.export.Exported``.

>>> import jax, jax.numpy as jnp, jaxport
>>> exp = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float32))
>>> jaxport.loads(jaxport.dumps(exp)).call(jnp.zeros(3))
Array([0., 0., 0.], dtype=float32)
"""

from __future__ import annotations

import os as _os

# In a source checkout `jaxport/` sits beside `schema/`, `export/`, `registry/` and
# `migrations/`, which are the subpackages jaxport.schema, jaxport.export, ... (the
# package-dir mapping in pyproject.toml). When the checkout's root comes first on sys.path
# (`python -c` run there), this finds them as the installed package does.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isfile(
    _os.path.join(_root, "schema", "jaxport.fbs")
):
    __path__.append(_root)

from jaxport._errors import (  # noqa: E402
    ConflictError,
    CorruptArchiveError,
    IntegrityError,
    InvalidNameError,
    JaxportError,
    NotFoundError,
    RegistryError,
    SchemaVersionError,
    UnsupportedFeatureError,
    UnsupportedVersionError,
)
from jaxport._version import __version__  # noqa: E402
from jaxport.export import (  # noqa: E402
    FORMAT_VERSION,
    MAX_SUPPORTED_FORMAT_VERSION,
    MIN_SUPPORTED_FORMAT_VERSION,
    ArchiveInfo,
    AvalInfo,
    ModuleInfo,
    SectionInfo,
    dumps,
    inspect,
    load,
    loads,
    save,
)
from jaxport.registry import Example, Ref, Registry, Resolution, VariantInfo  # noqa: E402

__all__ = [
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
