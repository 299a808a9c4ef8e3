"""Audits: can the running jax still load, compile and run an archive on a platform here?

Each (variant, platform) is checked in steps; the first that fails gives the status (the
statuses and what each proves: ``_report``):

1. static (``incompatible``): archive format version against this reader; calling convention
   version against jax's supported range
   (https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions). Reported,
   not failed on: each module's StableHLO producer version against this jaxlib's range
   (https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md; jax writes for an
   older target, so only deserializing tells), custom-call targets outside jax's
   guaranteed-stable list, disabled safety checks.
2. here (``not-run``): the platform's devices exist on this machine, as many as the export
   needs. Otherwise nothing more is measured.
3. compile (``compile-error``): deserialize, then lower and compile on this platform's devices
   from the avals (symbolic dimensions take the first golden example's input shapes, else the
   first small size the constraints allow, else the first concrete output dimension that
   refines: ``_dim_candidates``), each input on
   its own sharding's mesh (an export may use several meshes:
   ``jaxport.export._internal.in_shardings_on``).
4. golden (``mismatch``): re-run the version's stored examples (``push(..., examples=...)``)
   and compare with the producer's outputs, with tolerances per dtype and output magnitude
   (``_examples.tolerance``, modelled on jax's back-compat tests) or the push's override
   (``push(..., tolerance=...)``); the finding states the largest absolute and relative errors
   and the tolerance used.

A model archive (``jaxport.Model``) goes through the same steps: every method's calling
convention, the devices of the method that needs the most, loading (every tensor read and
checked against its sha256), then every method compiled with its parameters' avals, then each
method's stored examples (``push(model, examples={method: [...]})``) re-run with the model's
parameters bound.

Anything else that goes wrong is ``error``, with the exception's type and message. Run this
in a worker process (``_worker``): jaxlib can crash on malformed modules.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from jaxport import JaxportError, UnsafeModuleError, UnsupportedVersionError
from jaxport.audit._examples import (
    NO_DIFFERENCE,
    Comparison,
    compare,
    decode_examples,
    decode_model_examples,
    decode_tolerance,
)
from jaxport.audit._report import NOT_RUN, AuditResult
from jaxport.export import (
    MAX_SUPPORTED_FORMAT_VERSION,
    MIN_SUPPORTED_FORMAT_VERSION,
    inspect,
    is_host_callback,
    loads,
    loads_model,
    module_custom_calls,
)
from jaxport.export._internal import (
    in_shardings_on,
    is_constant_dim,
    local_device_count,
    newer_modules_passed,
    newer_note,
    release_key,
    releases_exporting,
    runnable_calling_conventions,
    running_stable_targets,
    stablehlo_range,
    translate_call_error,
)

__all__ = ["audit_archive", "check_archive"]

_DIM_CANDIDATES = (2, 3, 4, 8, 16, 1, 32, 64)
_FORCE_DEVICES = "XLA_FLAGS=--xla_force_host_platform_device_count={n}"


def audit_archive(data: bytes, *, platform: str, examples: bytes | None = None) -> AuditResult:
    """Audits archive bytes for ``platform`` (cpu, cuda, rocm, tpu) with this process's jax
    and devices; ``examples`` is a golden-examples blob (``_examples``) to re-run, if any.

    Never raises for a bad archive: every failure is a status (``_report.STATUSES``).
    """
    start = time.perf_counter()
    checks: dict[str, str] = {}
    try:
        status, reason = _audit(data, platform, examples, checks)
    except Exception as e:  # an audit reports failures; it does not raise them
        status, reason = _failed(e)
    return AuditResult(status, reason, checks, time.perf_counter() - start)


def check_archive(data: bytes) -> AuditResult:
    """Reads all of an archive as ``loads`` does, every module parsed: ``ok``, or ``error``
    with the reason (e.g. a header whose custom-call list disagrees with its modules). For
    ``verify --deep``; run it in a worker (``_worker``): parsing is where jaxlib can crash.

    An archive a newer jax wrote is well formed, only too new: every digest, limit and header
    fact is checked, its newer modules cannot be parsed here (``newer_modules_passed``); it is
    ``ok`` with ``checks["newer"]`` and a reason saying "newer than this jax"."""
    start = time.perf_counter()
    checks: dict[str, str] = {}
    with newer_modules_passed() as newer:
        status, reason = _read_all(data, checks, newer)
    if status == "ok" and newer:
        checks["newer"] = newer_note(newer)
        reason = f"every digest and header fact checks out; {checks['newer']}"
    return AuditResult(status, reason, checks, time.perf_counter() - start)


def _read_all(data: bytes, checks: dict[str, str], newer: list[Any]) -> tuple[str, str]:
    """``check_archive``'s reading; ``newer``: the modules a newer jax wrote, let through (the
    modules' own custom calls are then not read: this jax cannot parse them)."""
    try:
        info = inspect(data)
        allowed = _auditable_targets(info)
        if info.kind == "model":
            model = loads_model(data, allow_custom_calls=allowed, outside_window="allow")
            _ = model.params  # every tensor read and checked against its sha256
            chains = [(exp, model.vjp_orders[n]) for n, exp in model.exported.items()]
        else:
            exp = loads(data, allow_custom_calls=allowed, outside_window="allow")
            chains = [(exp, info.vjp_order)]
        for exp, vjp_order in chains:
            for _ in range(vjp_order):
                exp = exp.vjp()
        if not newer:
            targets = module_custom_calls(data)
            checks["custom calls (modules)"] = ", ".join(sorted({t for m in targets for t in m}))
        return "ok", "every module reads, and matches the header"
    except Exception as e:  # a check reports failures; it does not raise them
        return _failed(e)


def _failed(e: Exception) -> tuple[str, str]:
    """The status and reason of an exception: ``crash`` where the module sandbox's worker died
    or hung on a module (``UnsafeModuleError``), else ``error``."""
    return ("crash" if isinstance(e, UnsafeModuleError) else "error"), f"{type(e).__name__}: {e}"


def _audit(
    data: bytes, platform: str, examples: bytes | None, checks: dict[str, str]
) -> tuple[str, str]:
    try:
        info = inspect(data)
    except UnsupportedVersionError as e:
        checks["format version"] = str(e)
        return "incompatible", str(e)
    problem = _static(info, checks)
    if problem:
        return "incompatible", problem
    missing = _not_here(info, platform, checks)
    if missing:
        return NOT_RUN, missing
    if info.kind == "model":
        return _audit_model(data, info, platform, checks, examples)
    try:
        # Compiling is what measures a custom call, so every target the header names is let
        # through, except host callbacks, which no archive may call (export/_custom_calls.py).
        exp = loads(data, allow_custom_calls=_auditable_targets(info), outside_window="allow")
    except UnsupportedVersionError as e:
        return "incompatible", str(e)
    except JaxportError as e:
        return _failed(e)
    try:
        with _on(platform):
            _compile(exp, platform, checks, _example_shapes(examples))
    except Exception as e:  # XLA and jax raise many types for a module they cannot compile
        e = translate_call_error(e, info.fun_name) or e
        checks["compile"] = f"{type(e).__name__}: {_first_line(e)}"
        return "compile-error", checks["compile"]
    if examples is None:
        checks["golden"] = "no stored examples"
        return "ok", "loads and compiles"
    run = functools.partial(_run_examples, exp, platform, examples)
    return _golden(run, platform, checks, "compiles")


def _golden(
    run: Callable[[], tuple[Comparison, int]], platform: str, checks: dict[str, str], what: str
) -> tuple[str, str]:
    """Step 4: ``run()`` re-runs the stored examples; ``what`` is what passed before it."""
    try:
        with _on(platform):
            comparison, count = run()
    except Exception as e:  # running may fail where compiling did not
        checks["golden"] = f"{type(e).__name__}: {_first_line(e)}"
        return "error", f"running the examples failed: {checks['golden']}"
    checks["golden"] = (
        f"{count} example(s): max abs error {comparison.max_abs:.3g}, "
        f"max rel error {comparison.max_rel:.3g}; tolerance {comparison.tolerance or 'none'}"
    )
    if not comparison.ok:
        return "mismatch", comparison.worst
    return "ok", (
        f"loads, {what} and matches {count} example(s): max abs error "
        f"{comparison.max_abs:.3g}, max rel error {comparison.max_rel:.3g}, within "
        f"{comparison.tolerance or 'any tolerance'}"
    )


def _audit_model(
    data: bytes, info: Any, platform: str, checks: dict[str, str], examples: bytes | None
) -> tuple[str, str]:
    """Steps 3 and 4 for a model: load it (every tensor verified), compile each method, re-run
    each method's stored examples."""
    try:
        model = loads_model(
            data, allow_custom_calls=_auditable_targets(info), outside_window="allow"
        )
        _ = model.params  # reads every tensor and checks its sha256
    except UnsupportedVersionError as e:
        return "incompatible", str(e)
    except JaxportError as e:
        return _failed(e)
    checks["tensors"] = f"{len(model.tensors)} read, every sha256 checked"
    for name, exp in model.exported.items():
        try:
            with _on(platform):
                _compile(exp, platform, checks)
        except Exception as e:  # XLA and jax raise many types for a module they cannot compile
            e = translate_call_error(e, name) or e
            checks[f"compile ({name})"] = f"{type(e).__name__}: {_first_line(e)}"
            return "compile-error", f"method {name}: {checks[f'compile ({name})']}"
        checks[f"compile ({name})"] = checks.pop("compile")
    methods = ", ".join(model.exported)
    if examples is None:
        checks["golden"] = "no stored examples"
        return "ok", f"loads and compiles every method ({methods})"
    run = functools.partial(_run_model_examples, model, examples)
    return _golden(run, platform, checks, f"compiles every method ({methods})")


def _run_model_examples(model: Any, blob: bytes) -> tuple[Comparison, int]:
    """Each method's examples re-run with the model's parameters bound."""
    import jax
    from jax import tree_util

    worst, count = NO_DIFFERENCE, 0
    override = decode_tolerance(blob)
    for name, pairs in decode_model_examples(blob).items():
        exp = model.exported[name]
        arg_trees = tree_util.treedef_children(tree_util.treedef_children(exp.in_tree)[0])[1:]
        args_tree = tree_util.treedef_tuple(arg_trees)
        for ins, outs in pairs:
            args = tree_util.tree_unflatten(args_tree, ins)
            c = compare(jax.tree.leaves(model.methods[name](*args)), outs, override)
            worst = worst.and_then(c, f"{name}: ")
            count += 1
    return worst, count


def _run_examples(exp: Any, platform: str, blob: bytes) -> tuple[Comparison, int]:
    import jax

    pairs = decode_examples(blob)
    override = decode_tolerance(blob)
    shardings = _in_shardings(exp, platform)
    worst = NO_DIFFERENCE
    for ins, outs in pairs:
        placed = [
            a if s is None else jax.device_put(a, s) for a, s in zip(ins, shardings, strict=True)
        ]
        args, kwargs = jax.tree.unflatten(exp.in_tree, placed)
        got = jax.tree.leaves(exp.call(*args, **kwargs))
        worst = worst.and_then(compare(got, outs, override))
    return worst, len(pairs)


def _static(info: Any, checks: dict[str, str]) -> str:
    lo, hi = MIN_SUPPORTED_FORMAT_VERSION, MAX_SUPPORTED_FORMAT_VERSION
    checks["format version"] = f"{info.format_version} (reader {lo}..{hi})"
    cc_lo, cc_hi = runnable_calling_conventions()
    versions = {m.calling_convention_version for m in info.methods}
    versions = versions or {info.calling_convention_version}
    checks["calling convention"] = f"{', '.join(map(str, sorted(versions)))} (jax {cc_lo}..{cc_hi})"
    outside = sorted(v for v in versions if not cc_lo <= v <= cc_hi)
    if outside:
        return (
            f"calling convention version {outside[0]} outside the {cc_lo}..{cc_hi} jax runs: "
            f"{releases_exporting(outside[0])}"
        )
    # The producer string is the writer's StableHLO version; jax writes modules for an older
    # target (its compatibility window), so a newer producer is reported, not failed on:
    # deserializing and compiling below measure whether this jaxlib reads it.
    shlo_lo, shlo_hi = stablehlo_range()
    for m in info.modules:
        label = "primal" if m.vjp_order == 0 else f"vjp {m.vjp_order}"
        label = f"{m.method} {label}" if m.method else label
        inside = not m.stablehlo_version or _version_in(m.stablehlo_version, shlo_lo, shlo_hi)
        note = "" if inside else ", outside: compile decides"
        checks[f"StableHLO ({label})"] = (
            f"{m.stablehlo_version} (jaxlib {shlo_lo}..{shlo_hi}{note})"
        )
    stable = running_stable_targets() | {"shape_assertion"}
    unstable = sorted(set(info.custom_call_targets) - stable)
    checks["custom calls"] = (
        f"not guaranteed stable: {', '.join(unstable)}" if unstable else "all guaranteed stable"
    )
    checks["disabled safety checks"] = ", ".join(info.disabled_safety_checks) or "none"
    return ""


def _auditable_targets(info: Any) -> tuple[str, ...]:
    return tuple(t for t in info.custom_call_targets if not is_host_callback(t))


def _not_here(info: Any, platform: str, checks: dict[str, str]) -> str:
    """Why the compile and golden checks cannot run here for ``platform`` ("" if they can)."""
    if platform not in info.platforms:
        checks["platform"] = f"{platform} not in {', '.join(info.platforms)}"
        return f"not exported for {platform} (exported for {', '.join(info.platforms)})"
    have = local_device_count(platform)
    checks["devices"] = f"needs {info.nr_devices} {platform}, have {have}"
    if have == 0:
        return f"no {platform} device here"
    if info.nr_devices > have:
        hint = f" (on CPU: {_FORCE_DEVICES.format(n=info.nr_devices)})" if platform == "cpu" else ""
        return f"{info.nr_devices} {platform} devices needed, {have} available{hint}"
    return ""


@contextlib.contextmanager
def _on(platform: str) -> Iterator[None]:
    """Unsharded computations in this block run on ``platform``'s first device."""
    import jax

    with jax.default_device(_devices(platform)[0]):
        yield


def _devices(platform: str) -> list[Any]:
    import jax

    return list(jax.devices("gpu" if platform in ("cuda", "rocm") else platform))


def _compile(
    exp: Any, platform: str, checks: dict[str, str], example_shapes: list[Any] | None = None
) -> None:
    """Lowers and compiles ``exp`` for ``platform`` from its avals; symbolic dimensions take
    the shapes of the first golden example's inputs (``example_shapes``) when there is one,
    else each size of ``_dim_candidates`` for every variable, until one compiles.

    Raises:
        Exception: whatever jax or XLA raised for the last shapes tried.
    """
    import jax

    shardings = _in_shardings(exp, platform)
    attempts: list[tuple[str, list[tuple[int, ...]]]] = []
    if example_shapes is not None and _symbolic(exp):
        attempts.append(("the first example's shapes", [tuple(s) for s in example_shapes]))
    for size in _dim_candidates(exp):
        attempts.append((str(size), [_concrete(a.shape, size) for a in exp.in_avals]))
    error: Exception | None = None
    for label, shapes in attempts:
        specs = [
            jax.ShapeDtypeStruct(shape, a.dtype, sharding=s)
            for shape, a, s in zip(shapes, exp.in_avals, shardings, strict=True)
        ]
        args, kwargs = jax.tree.unflatten(exp.in_tree, specs)
        try:
            jax.jit(exp.call).lower(*args, **kwargs).compile()
        except Exception as e:  # a size that breaks a constraint: try the next one
            error = e
            if not _symbolic(exp):
                break
            continue
        checks["compile"] = "ok" + (f" (symbolic dims = {label})" if _symbolic(exp) else "")
        return
    assert error is not None
    raise error


def _example_shapes(examples: bytes | None) -> list[Any] | None:
    """The shapes of the first golden example's inputs, flat; None without examples, or when
    the blob does not decode (step 4 reports that)."""
    if examples is None:
        return None
    try:
        pairs = decode_examples(examples)
    except JaxportError:
        return None
    return [tuple(a.shape) for a in pairs[0][0]] if pairs else None


def _dim_candidates(exp: Any) -> tuple[int, ...]:
    """The sizes tried for every dimension variable: ``_DIM_CANDIDATES``, then each concrete
    output dimension larger than 1.

    The second kind is for an export whose outputs are concrete though its inputs are
    symbolic: jax's own back-compat Exporteds take their ``out_avals`` from one run's results
    (``export_back_compat_test_util.run_serialized``), e.g. ``approx_max_k(a, k=b)`` of
    ``f32[b + 4]`` declares ``f32[20]``, so only ``b = 20`` refines (jax then rejects every
    other size: "Error refining shapes").
    """
    outputs = {int(d) for a in exp.out_avals for d in a.shape if is_constant_dim(d) and int(d) > 1}
    return _DIM_CANDIDATES + tuple(sorted(outputs - set(_DIM_CANDIDATES)))


def _in_shardings(exp: Any, platform: str) -> list[Any]:
    """Shardings over the platform's first ``nr_devices`` devices for a sharded export's inputs."""
    if exp.nr_devices <= 1:
        return [None] * len(exp.in_avals)
    return in_shardings_on(exp, _devices(platform))


def _symbolic(exp: Any) -> bool:
    return any(not is_constant_dim(d) for a in exp.in_avals for d in a.shape)


def _concrete(shape: tuple[Any, ...], size: int) -> tuple[int, ...]:
    out = []
    for d in shape:
        if is_constant_dim(d):
            out.append(int(d))
        else:
            env = {v: size for v in _dim_vars(d)}
            out.append(int(d._evaluate(env)))
    return tuple(out)


def _dim_vars(d: Any) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(d))) - {
        "mod",
        "floordiv",
        "max",
        "min",
        "non_negative",
    }


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:500] if text else ""


def _version_in(version: str, lo: str, hi: str) -> bool:
    key = release_key
    return key(lo) <= key(version) <= key(hi)
