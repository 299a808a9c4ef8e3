"""The module sandbox's worker: parses StableHLO modules from untrusted archives, reports facts.

Run by ``jaxport.export._sandbox`` as ``PYTHON -I THIS_FILE MEMORY_LIMIT``, never imported by
jaxport: it imports only jaxlib (its MLIR bindings and the portable-artifact reader jax uses to
call a module), not jax and not jaxport, so it starts in about 0.1 s. It sets its own
address-space limit (``RLIMIT_AS``) before importing anything large. The parent enforces the
time limit (it kills the worker) and treats the worker's death as the module's verdict.

Protocol, one JSON object per line:

- worker -> parent, once: ``{"jaxlib_version": V}``
- parent -> worker, per module: ``{"path": FILE, "size": N}``: the module is the first N
  bytes of FILE (the parent's one copy of it, mapped here). It must be MLIR bytecode: MLIR
  text is refused here too (the parent refuses it first), since jaxlib's text parser is the
  one that a deeply nested attribute crashes.
- worker -> parent: ``{"ok": true, "facts": {...}}`` or ``{"ok": false, "error": MESSAGE}``
  when MLIR refuses the module (a parse error, not a crash).

Facts: ``targets`` (sorted custom-call target names), ``main`` (the public ``main`` function's
argument and result types as MLIR prints them, and which arguments are jax's global constants),
``num_partitions`` / ``num_replicas`` (module attributes, or null), ``ops`` (how many ops).
"""

from __future__ import annotations

import json
import mmap
import resource
import sys
from typing import Any

_BYTECODE_MAGIC = b"ML\xefR"
_CONTEXT_BUDGET = 64 << 20  # bytes of modules parsed in one MLIR context before a new one


def _limit_memory(limit: int) -> None:
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class _Parser:
    """jaxlib's reader, in a context with the dialects jax registers (``make_ir_context``)."""

    def __init__(self) -> None:
        from jaxlib.mlir import ir

        self.ir = ir
        self.deserialize = _portable_artifact_reader()
        self._context: Any = None
        self._parsed = 0

    def context(self, nbytes: int) -> Any:
        if self._context is None or self._parsed + nbytes > _CONTEXT_BUDGET:
            self._context = None
            self._context, self._parsed = _make_context(self.ir), 0
        self._parsed += nbytes
        return self._context

    def parse(self, data: bytes) -> Any:
        with self.context(len(data)) as ctx:
            module = self.deserialize(data)
            if isinstance(module, str | bytes):  # older jaxlibs return the module's bytecode
                module = self.ir.Module.parse(module, context=ctx)
            return module


def _portable_artifact_reader() -> Any:
    try:
        from jaxlib import _jax
    except ImportError:  # jaxlib < 0.7.1
        from jaxlib import xla_extension as _jax  # type: ignore[attr-defined,no-redef,unused-ignore]
    return _jax.mlir.deserialize_portable_artifact


def _make_context(ir: Any) -> Any:
    """A context like jax's ``mlir.make_ir_context``, from jaxlib alone."""
    import importlib

    context = ir.Context()
    try:
        from jaxlib.mlir._mlir_libs import _jax_mlir_ext

        registry = ir.DialectRegistry()
        _jax_mlir_ext.register_dialects(registry)
        context.append_dialect_registry(registry)
        context.load_all_available_dialects()
    except (ImportError, AttributeError):  # older jaxlibs register these below
        pass
    for name, register in (
        ("sdy", "register_dialect"),
        ("mpmd", "register_dialect"),
        ("mhlo", "register_mhlo_dialect"),
        ("chlo", "register_dialect"),
        ("stablehlo", "register_dialect"),
    ):
        try:
            dialect = importlib.import_module(f"jaxlib.mlir.dialects.{name}")
        except ImportError:
            continue
        getattr(dialect, register)(context)
    return context


def facts_of(ir: Any, module: Any) -> dict[str, Any]:
    """What the parent checks against the archive's header, read from a parsed module."""
    targets: set[str] = set()
    main: dict[str, Any] | None = None
    ops = 0
    stack = [module.operation]
    while stack:
        op = stack.pop()
        ops += 1
        name = op.name
        if name.rpartition(".")[2].startswith("custom_call"):
            targets.add(_target_name(ir, op))
        elif name == "func.func" and main is None and _symbol(ir, op) == "main":
            main = _signature(ir, op)
        for region in op.regions:
            for block in region.blocks:
                stack.extend(o.operation for o in block.operations)
    attrs = module.operation.attributes
    return {
        "targets": sorted(targets),
        "main": main,
        "num_partitions": _int_attr(ir, attrs, "mhlo.num_partitions"),
        "num_replicas": _int_attr(ir, attrs, "mhlo.num_replicas"),
        "ops": ops,
    }


class ModuleRefused(Exception):
    """The module is well-formed MLIR but not what a jax export is (reported, not a crash)."""


def _target_name(ir: Any, op: Any) -> str:
    try:
        return str(ir.StringAttr(op.attributes["call_target_name"]).value)
    except (KeyError, ValueError):
        raise ModuleRefused(f"a {op.name} op without a string call_target_name") from None


def _symbol(ir: Any, op: Any) -> str | None:
    try:
        return str(ir.StringAttr(op.attributes["sym_name"]).value)
    except (KeyError, ValueError):
        return None


def _signature(ir: Any, op: Any) -> dict[str, Any]:
    try:
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    except (KeyError, ValueError):
        raise ModuleRefused("the main function has no function type") from None
    try:
        visibility = str(ir.StringAttr(op.attributes["sym_visibility"]).value)
    except (KeyError, ValueError):
        visibility = "public"
    return {
        "public": visibility == "public",
        "inputs": [str(t) for t in ftype.inputs],
        "results": [str(t) for t in ftype.results],
        "global_constants": _global_constant_args(ir, op, len(ftype.inputs)),
    }


def _global_constant_args(ir: Any, op: Any, n: int) -> list[int]:
    try:
        arg_attrs = ir.ArrayAttr(op.attributes["arg_attrs"])
    except (KeyError, ValueError):
        return []
    found = []
    for i in range(min(n, len(arg_attrs))):
        try:
            if "jax.global_constant" in ir.DictAttr(arg_attrs[i]):
                found.append(i)
        except ValueError:
            continue
    return found


def _int_attr(ir: Any, attrs: Any, name: str) -> int | None:
    try:
        return int(ir.IntegerAttr(attrs[name]).value)
    except (KeyError, ValueError):
        return None


def _handle(parser: _Parser, request: dict[str, Any]) -> dict[str, Any]:
    size = int(request["size"])
    with open(request["path"], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if size > len(m):
            return {"ok": False, "error": "the module file is shorter than its size"}
        data = m[:size]
    if not data.startswith(_BYTECODE_MAGIC):
        return {"ok": False, "error": "not MLIR bytecode (MLIR text is refused)"}
    try:
        module = parser.parse(data)
    except Exception as e:  # jaxlib raises ValueError, MLIRError, RuntimeError, ... here
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    try:
        with module.context:
            return {"ok": True, "facts": facts_of(parser.ir, module)}
    except ModuleRefused as e:
        return {"ok": False, "error": str(e)}
    except Exception as e:  # the bindings refuse to describe a malformed op or attribute
        return {"ok": False, "error": f"unreadable op: {type(e).__name__}: {e}"[:2000]}


def main() -> None:
    _limit_memory(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    import jaxlib.version

    parser = _Parser()
    out = sys.stdout
    out.write(json.dumps({"jaxlib_version": jaxlib.version.__version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        _alarm(request.get("deadline"))  # its own deadline, should the parent not kill it
        reply = _handle(parser, request)
        _alarm(None)
        out.write(json.dumps(reply) + "\n")
        out.flush()


#: Seconds past the parent's time limit at which a worker's own alarm ends it.
DEADLINE_GRACE = 5


def _alarm(deadline: Any) -> None:
    """SIGALRM (which ends the process) ``deadline + DEADLINE_GRACE`` seconds from now, or
    none for None: a worker whose parent stopped watching still ends (``jaxport._children``)."""
    import math
    import signal

    finite = isinstance(deadline, int | float) and math.isfinite(deadline) and deadline >= 0
    signal.alarm(min(math.ceil(deadline) + DEADLINE_GRACE, 2**31 - 1) if finite else 0)


if __name__ == "__main__":
    main()
