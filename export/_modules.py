"""StableHLO modules: where each lies in the payload, and its provenance.

For each module the header records its StableHLO version (the producer string of the portable
artifact, https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md) and the
custom-call targets it uses, so that ``inspect`` and audits answer without decompressing.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Sequence
from typing import Any

import flatbuffers

from jaxport.export import _compat, _fb
from jaxport.schema import fb

__all__ = [
    "ModuleRef",
    "custom_call_targets",
    "decode_module",
    "encode_module",
    "stablehlo_version",
]

_BYTECODE_MAGIC = b"ML\xefR"
_STABLEHLO_PRODUCER = b"StableHLO_v"
_CUSTOM_CALL_OP = b"custom_call"


@dataclasses.dataclass(frozen=True)
class ModuleRef:
    """A module's byte range in a decompressed section (bytes) and its provenance."""

    section: int
    offset: int
    length: int
    stablehlo_version: str
    custom_call_targets: tuple[str, ...]


def stablehlo_version(data: bytes) -> str:
    """The StableHLO version of a portable artifact (``"1.15.0"``), or "" if it has none.

    The MLIR bytecode starts with the magic ``ML\\xefR``, a PrefixVarInt bytecode version and
    a NUL-terminated producer string, ``StableHLO_v<version>`` for portable artifacts
    (https://mlir.llvm.org/docs/BytecodeFormat/).
    """
    if not data.startswith(_BYTECODE_MAGIC) or len(data) < 6:
        return ""
    first = data[4]
    start = 4 + ((first & -first).bit_length() if first else 9)
    end = data.find(b"\0", start, start + 128)
    producer = data[start:end] if end > 0 else b""
    if not producer.startswith(_STABLEHLO_PRODUCER):
        return ""
    return producer[len(_STABLEHLO_PRODUCER) :].decode("ascii", "replace")


def custom_call_targets(modules: Sequence[bytes]) -> list[tuple[str, ...]]:
    """Per module, the sorted, unique ``call_target_name`` of its ``stablehlo.custom_call`` ops."""
    from jax._src.lib.mlir import ir

    results: list[tuple[str, ...]] = [() for _ in modules]
    # Fast path: the bytecode lists every op name it uses as a string ("custom_call_v1" for
    # VHLO), so a module without that string has no custom call and need not be parsed.
    todo = [i for i, m in enumerate(modules) if _CUSTOM_CALL_OP in m]
    if todo:
        with _CONTEXT_LOCK, _ir_context():
            for i in todo:
                results[i] = _targets_of(ir, _compat.module_from_portable_artifact(modules[i]))
    return results


def _targets_of(ir: Any, module: Any) -> tuple[str, ...]:
    if isinstance(module, str | bytes):
        module = ir.Module.parse(module)
    targets: set[str] = set()
    stack = [module.operation]
    while stack:
        op = stack.pop()
        if op.name == "stablehlo.custom_call":
            targets.add(ir.StringAttr(op.attributes["call_target_name"]).value)
        for region in op.regions:
            for block in region.blocks:
                stack.extend(o.operation for o in block.operations)
    return tuple(sorted(targets))


# Making an MLIR context with jax's dialects costs milliseconds: one is kept and used under a
# lock (an MLIR context is not safe for concurrent use).
_CONTEXT_LOCK = threading.Lock()


@functools.cache
def _ir_context() -> Any:
    from jax._src.interpreters import mlir

    return mlir.make_ir_context()


def encode_module(builder: flatbuffers.Builder, ref: ModuleRef) -> int:
    """An ``fb.Module``."""
    version = builder.CreateString(ref.stablehlo_version)
    targets = _fb.str_vector(builder, ref.custom_call_targets)
    fb.ModuleStart(builder)
    fb.ModuleAddSection(builder, ref.section)
    fb.ModuleAddOffset(builder, ref.offset)
    fb.ModuleAddLength(builder, ref.length)
    fb.ModuleAddStablehloVersion(builder, version)
    fb.ModuleAddCustomCallTargets(builder, targets)
    return fb.ModuleEnd(builder)


def decode_module(table: fb.Module) -> ModuleRef:
    """The ``ModuleRef`` of an ``fb.Module``."""
    return ModuleRef(
        section=table.Section(),
        offset=table.Offset(),
        length=table.Length(),
        stablehlo_version=_fb.read_str(table.StablehloVersion()),
        custom_call_targets=_fb.read_strs(table, "CustomCallTargets"),
    )
