"""StableHLO modules: where each lies in the payload, and its provenance.

For each module the header records its StableHLO version (the producer string of the portable
artifact, https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md) and the
custom-call targets it uses, so that ``inspect`` and audits answer without decompressing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import flatbuffers

from jaxport import CorruptArchiveError, UnsupportedFeatureError
from jaxport.export import _compat, _fb
from jaxport.schema import fb

__all__ = [
    "ModuleRef",
    "check_readable",
    "custom_call_targets",
    "decode_module",
    "encode_module",
    "module_refs",
    "reserialized",
    "stablehlo_version",
    "without_locations",
    "writable_targets",
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


def custom_call_targets(
    modules: Sequence[bytes], *, path: str | None = None
) -> list[tuple[str, ...]]:
    """Per module, the sorted, unique ``call_target_name`` of its custom-call ops.

    The modules are parsed as jax parses them to call them (``deserialize_portable_artifact``:
    MLIR bytecode or text), and every op whose name after its dialect starts with
    ``custom_call`` counts (``stablehlo.custom_call``; ``mhlo.custom_call`` in a mixed
    artifact). A module is parsed only when it may hold one: see ``_may_call_custom``.

    Raises:
        CorruptArchiveError: a module that MLIR cannot parse, or a custom call without a
            string ``call_target_name``.
    """
    import jaxlib.mlir.ir as ir  # what jax._src.lib.mlir re-exports (0.7 to 0.10)

    results: list[tuple[str, ...]] = [() for _ in modules]
    for i, m in enumerate(modules):
        if _may_call_custom(m):
            with _CONTEXT.use(len(m)):
                results[i] = _targets_of(ir, _parse(ir, m, path), path)
    return results


def writable_targets(modules: Sequence[bytes], what: str) -> list[tuple[str, ...]]:
    """``custom_call_targets(modules)`` for a writer of ``what`` ("the Exported", "the model").

    Raises:
        UnsupportedFeatureError: a module MLIR cannot parse (where its custom calls must be
            read).
    """
    try:
        return custom_call_targets(modules)
    except CorruptArchiveError as e:
        raise UnsupportedFeatureError(f"cannot write {what}: {e}") from None


def module_refs(modules: Sequence[bytes], targets: Sequence[tuple[str, ...]]) -> list[ModuleRef]:
    """Each module's reference into section 0, where they lie one after the other."""
    refs, offset = [], 0
    for m, listed in zip(modules, targets, strict=True):
        refs.append(ModuleRef(0, offset, len(m), stablehlo_version(m), listed))
        offset += len(m)
    return refs


def check_readable(data: bytes, *, path: str | None = None) -> None:
    """Parses ``data`` in this process, as jax will to call it (diagnostics captured).

    Raises:
        CorruptArchiveError: MLIR cannot read it.
    """
    import jaxlib.mlir.ir as ir

    with _CONTEXT.use(len(data)):
        _parse(ir, data, path)


def _may_call_custom(module: bytes) -> bool:
    """False only when ``module`` certainly has no custom-call op.

    Sound against a hostile author for MLIR bytecode only: its ops are named by entries of
    its string section, stored verbatim (https://mlir.llvm.org/docs/BytecodeFormat/), and an
    op's full name is ``dialect + "." + name``, so a name part without a dot, like
    ``custom_call`` (``vhlo.custom_call_v1`` in a portable artifact), appears verbatim in the
    bytes. MLIR text, which ``deserialize_portable_artifact`` also accepts, can spell an op name
    with escapes (``"stablehlo.custom\\5Fcall"``), so a text module is always parsed.
    """
    return not module.startswith(_BYTECODE_MAGIC) or _contains(module, _CUSTOM_CALL_OP)


def _contains(data: bytes, needle: bytes, piece: int = 8 << 20) -> bool:
    """``needle in data``, searched ``piece`` bytes at a time: ``bytes.find`` holds the GIL,
    and a 400 MB module would stall every other thread (a compressor's feeder) for 0.1 s."""
    overlap = len(needle) - 1
    return any(data.find(needle, i, i + piece + overlap) >= 0 for i in range(0, len(data), piece))


def without_locations(data: bytes) -> bytes:
    """A portable artifact made by the running jax, with every location ``loc(unknown)``.

    Parses ``data``, runs MLIR's ``strip-debuginfo`` pass and serializes the module again as
    jax's exporter does (``jax._src.export._export._module_to_bytecode``: the same StableHLO
    target version and serialization mode). Only for modules the running jax has just
    exported: an older artifact would be re-targeted to this jax's StableHLO version.
    """
    import jaxlib.mlir.ir as ir
    import jaxlib.mlir.passmanager as passmanager

    from jaxport.export._jax import export_impl as _export

    with _CONTEXT.use(len(data)):
        module = _parse(ir, data, None)
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)
        return bytes(_export._module_to_bytecode(module))


def reserialized(data: bytes) -> bytes:
    """A portable artifact serialized again as the running jax's exporter serializes its own
    (``_module_to_bytecode``: its StableHLO target version and serialization mode), as a fleet
    rescue writes it (``jaxport/_reexport_child.py``): jaxlib's reader upgrades an older
    artifact on the way (https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md).

    Raises:
        CorruptArchiveError: jaxlib cannot read the module.
    """
    import jaxlib.mlir.ir as ir

    from jaxport.export._jax import export_impl as _export

    with _CONTEXT.use(len(data)):
        return bytes(_export._module_to_bytecode(_parse(ir, data, None)))


def _parse(ir: Any, data: bytes, path: str | None) -> Any:
    try:
        with _stderr_captured() as captured:
            module = _compat.module_from_portable_artifact(data)
            return ir.Module.parse(module) if isinstance(module, str | bytes) else module
    except Exception as e:  # jax raises JaxRuntimeError, MLIRError, ValueError, ... here
        said = " ".join(captured.getvalue().split())[:300]
        raise CorruptArchiveError(
            f"a module is not StableHLO that MLIR can read: {type(e).__name__}: {e}"
            + (f" (MLIR: {said})" if said else ""),
            path=path,
        ) from None


_STDERR_LOCK = threading.Lock()


@contextlib.contextmanager
def _stderr_captured() -> Iterator[io.StringIO]:
    """MLIR's diagnostics, which its C++ side writes to file descriptor 2, kept instead of
    printed (the caller's error message holds them); other threads' stderr meanwhile too."""
    captured = io.StringIO()
    with _STDERR_LOCK, tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.write(sink.read(64 * 1024).decode("utf-8", "replace"))


def _targets_of(ir: Any, module: Any, path: str | None) -> tuple[str, ...]:
    targets: set[str] = set()
    stack = [module.operation]
    while stack:
        op = stack.pop()
        if op.name.rpartition(".")[2].startswith("custom_call"):
            targets.add(_target_name(ir, op, path))
        for region in op.regions:
            for block in region.blocks:
                stack.extend(o.operation for o in block.operations)
    return tuple(sorted(targets))


def _target_name(ir: Any, op: Any, path: str | None) -> str:
    try:
        return str(ir.StringAttr(op.attributes["call_target_name"]).value)
    except (KeyError, ValueError):  # no such attribute; not a StringAttr
        raise CorruptArchiveError(
            f"a {op.name} op without a string call_target_name", path=path
        ) from None


class _SharedContext:
    """An MLIR context with jax's dialects, shared under a lock, replaced after a byte budget.

    Making a context costs 5 to 15 ms, parsing a small module under 1 ms: one is reused. But a
    context keeps every attribute it has parsed (a module's constants: tens of MB) until it is
    destroyed, so it is dropped once it has parsed ``budget`` bytes of modules. Contexts are
    not safe for concurrent use, hence the lock.
    """

    def __init__(self, budget: int):
        self._budget = budget
        self._lock = threading.Lock()
        self._context: Any = None
        self._parsed = 0

    @contextlib.contextmanager
    def use(self, nbytes: int) -> Iterator[Any]:
        """The context, entered and held alone, to parse a module of ``nbytes`` bytes."""
        from jaxport.export._jax import mlir

        with self._lock:
            if self._context is None or self._parsed + nbytes > self._budget:
                self._context = None  # freed before the next is made
                self._context, self._parsed = mlir.make_ir_context(), 0
            self._parsed += nbytes
            try:
                with self._context:
                    yield self._context
            finally:
                if self._parsed >= self._budget:
                    self._context = None


_CONTEXT = _SharedContext(budget=64 << 20)


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
    return int(fb.ModuleEnd(builder))


def decode_module(table: fb.Module) -> ModuleRef:
    """The ``ModuleRef`` of an ``fb.Module``."""
    return ModuleRef(
        section=table.Section(),
        offset=table.Offset(),
        length=table.Length(),
        stablehlo_version=_fb.read_str(table.StablehloVersion()),
        custom_call_targets=_fb.read_strs(table, "CustomCallTargets"),
    )
