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

from typing import Any

from jaxport import NewerFormatError
from jaxport.export import _compat, _modules

__all__ = ["newer_format_error", "newer_note", "unloadable_here", "written_newer"]


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


def newer_note(errors: list[NewerFormatError]) -> str:
    """One sentence for the modules ``newer_modules_passed`` let through: who wrote them and
    that this jax cannot load them ("" when there are none)."""
    if not errors:
        return ""
    e = errors[0]
    writer = f"jax {e.writer_jax}" if e.writer_jax else "a jax that the header does not name"
    module = f" in StableHLO {e.module_stablehlo}" if e.module_stablehlo else ""
    return (
        f"newer than this jax: written by {writer}{module}; the installed jax "
        f"{e.installed_jax} (StableHLO up to {e.installed_stablehlo}) cannot load it, so its "
        f"{len(errors)} newer module(s) were not parsed here (load it with a newer jax)"
    )


def unloadable_here(info: Any) -> str:
    """Why the installed jax cannot load the archive ``info`` describes (an ``ArchiveInfo``),
    from its header alone: a module whose StableHLO version is newer than this jaxlib reads
    (StableHLO's compatibility rule: a consumer reads artifacts of its version or older,
    https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md); "" when nothing in
    the header says so. A writer jax newer than the installed one alone is reported as a
    possibility (jax writes modules for an older StableHLO target, so it may still load)."""
    key = _compat.release_key
    installed_jax = _compat.jax_versions()[0]
    installed_shlo = _compat.stablehlo_range()[1]
    newer = sorted(
        {m.stablehlo_version for m in info.modules if m.stablehlo_version}
        - {v for v in (m.stablehlo_version for m in info.modules) if key(v) <= key(installed_shlo)},
        key=key,
    )
    writer = info.jax_version or ""
    if newer:
        by = f" by jax {writer}" if writer and writer != "unknown" else ""
        return (
            f"the installed jax {installed_jax} cannot load it: written{by} in StableHLO "
            f"{newer[-1]}, newer than this jaxlib reads (up to {installed_shlo})"
        )
    if writer and writer != "unknown" and key(writer) > key(installed_jax):
        return (
            f"written by jax {writer}, newer than the installed jax {installed_jax}: it may "
            "not load here (its modules declare StableHLO versions this jaxlib reads)"
        )
    return ""
