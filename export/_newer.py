"""Archives written by a newer jax: telling them from corrupt ones.

A jax newer than the one installed may write modules in a StableHLO version the installed
jaxlib cannot deserialize. The archive is then well formed, only too new; MLIR's refusal
would otherwise read as a corrupt archive. When MLIR cannot read a module (measured: the
module sandbox's parse, or this process's for a trusted file) and either the module's own
StableHLO version (its bytecode's producer string) is newer than the installed jaxlib's
current version, or the archive's header says a newer jax wrote it, the refusal is a
``NewerFormatError`` naming both sides. A newer module that parses is read as any other.
"""

from __future__ import annotations

from jaxport import NewerFormatError
from jaxport.export import _compat, _modules

__all__ = ["newer_format_error", "written_newer"]


def written_newer(data: bytes, writer_jax: str) -> tuple[bool, bool]:
    """Whether module ``data`` declares a StableHLO version newer than the installed jaxlib's,
    and whether ``writer_jax`` is newer than the installed jax."""
    key = _compat.release_key
    module_shlo = _modules.stablehlo_version(data)
    newer_module = bool(module_shlo) and key(module_shlo) > key(_compat.stablehlo_range()[1])
    newer_writer = bool(writer_jax) and key(writer_jax) > key(_compat.jax_versions()[0])
    return newer_module, newer_writer


def newer_format_error(
    data: bytes, writer_jax: str, where: str, reason: str
) -> NewerFormatError | None:
    """The error for module ``data`` that MLIR could not read (``reason``), when it or its
    archive is newer than this installation; None when neither is (then it is corrupt)."""
    installed_jax = _compat.jax_versions()[0]
    installed_shlo = _compat.stablehlo_range()[1]
    module_shlo = _modules.stablehlo_version(data)
    if not any(written_newer(data, writer_jax)):
        return None
    writer = f"jax {writer_jax}" if writer_jax else "a jax that the header does not name"
    module = f"StableHLO {module_shlo}" if module_shlo else "no declared StableHLO version"
    return NewerFormatError(
        f"{where} was written by {writer} in {module}; the installed jax {installed_jax} "
        f"(jaxlib StableHLO up to {installed_shlo}) cannot read it: upgrade jax (or re-export "
        f"with this jax). MLIR: {reason[:200]}",
        writer_jax=writer_jax,
        installed_jax=installed_jax,
        module_stablehlo=module_shlo,
        installed_stablehlo=installed_shlo,
    )
