"""Audits: can the running jax still load, compile and run an archive?

Each variant is checked in three steps, and the first that fails gives the status:

1. static (``incompatible``): archive format version against this reader; calling convention
   version against jax's supported range
   (https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions); the
   platform available here; enough devices. Reported, not failed on: each module's StableHLO
   producer version against this jaxlib's range
   (https://github.com/openxla/stablehlo/blob/main/docs/compatibility.md; jax writes for an
   older target, so only deserializing tells), custom-call targets outside jax's
   guaranteed-stable list, disabled safety checks.
2. compile (``compile-error``): deserialize and lower + compile for the local platform from the
   avals alone (symbolic dimensions take the first small size that satisfies the constraints).
3. golden (``mismatch``): re-run the version's stored examples (``push(..., examples=...)``)
   and compare with the producer's outputs, with dtype-aware tolerances
   (``_examples.tolerance``); the largest absolute and relative errors are reported.

Anything else that goes wrong is ``error``, with the exception's type and message.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from jaxport._errors import JaxportError, UnsupportedVersionError
from jaxport.export import (
    MAX_SUPPORTED_FORMAT_VERSION,
    MIN_SUPPORTED_FORMAT_VERSION,
    _compat,
    inspect,
    loads,
)
from jaxport.registry._examples import Comparison, compare, decode_examples

__all__ = [
    "AuditResult",
    "Finding",
    "UpgradeRow",
    "audit_archive",
    "compare_findings",
    "release_key",
]

_DIM_CANDIDATES = (2, 3, 4, 8, 16, 1, 32, 64)


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The outcome of auditing one archive here; ``seconds`` is the audit's duration."""

    status: str
    reason: str
    checks: dict[str, str]
    seconds: float


@dataclasses.dataclass(frozen=True)
class Finding:
    """An audit of one variant, as the registry stores it (``seconds``: its duration)."""

    name: str
    version: int
    digest: str
    jax_version: str
    jaxlib_version: str
    platform: str
    status: str
    reason: str
    checks: dict[str, str]
    seconds: float
    created_at: float


@dataclasses.dataclass(frozen=True)
class UpgradeRow:
    """One variant's status under the running jax (``now``) and a target release (``after``)."""

    name: str
    version: int
    digest: str
    now: str
    after: str
    reason: str
    breaks: bool


def compare_findings(findings: list[Finding], current: str, target: str) -> list[UpgradeRow]:
    """What moving from jax ``current`` to ``target`` breaks, from stored findings (newest
    first; the newest per digest and release counts). ``after`` is "not audited" where the
    target has no finding; ``breaks``: ok now, not ok after."""
    latest: dict[tuple[str, str], Finding] = {}
    for f in findings:
        latest.setdefault((f.digest, f.jax_version), f)
    rows = []
    for (digest, jax_version), f in sorted(
        latest.items(), key=lambda kv: (kv[1].name, kv[1].version)
    ):
        if jax_version != current:
            continue
        after = latest.get((digest, target))
        rows.append(
            UpgradeRow(
                name=f.name,
                version=f.version,
                digest=digest,
                now=f.status,
                after=after.status if after else "not audited",
                reason=after.reason if after and after.status != "ok" else "",
                breaks=bool(after and f.status == "ok" and after.status != "ok"),
            )
        )
    return rows


def audit_archive(
    data: bytes, *, platform: str, nr_devices: int, examples: bytes | None = None
) -> AuditResult:
    """Audits archive bytes for ``platform`` with ``nr_devices`` devices available;
    ``examples`` is a golden-examples blob (``_examples``) to re-run, if any."""
    start = time.perf_counter()
    checks: dict[str, str] = {}
    try:
        status, reason = _audit(data, platform, nr_devices, examples, checks)
    except Exception as e:  # an audit reports failures; it does not raise them
        status, reason = "error", f"{type(e).__name__}: {e}"
    return AuditResult(status, reason, checks, time.perf_counter() - start)


def _audit(
    data: bytes, platform: str, nr_devices: int, examples: bytes | None, checks: dict[str, str]
) -> tuple[str, str]:
    try:
        info = inspect(data)
    except UnsupportedVersionError as e:
        checks["format version"] = str(e)
        return "incompatible", str(e)
    problem = _static(info, platform, nr_devices, checks)
    if problem:
        return "incompatible", problem
    try:
        exp = loads(data)
    except UnsupportedVersionError as e:
        return "incompatible", str(e)
    except JaxportError as e:
        return "error", f"{type(e).__name__}: {e}"
    try:
        _compile(exp, checks)
    except Exception as e:  # XLA and jax raise many types for a module they cannot compile
        checks["compile"] = f"{type(e).__name__}: {_first_line(e)}"
        return "compile-error", checks["compile"]
    if examples is None:
        checks["golden"] = "no stored examples"
        return "ok", "loads and compiles"
    try:
        comparison, count = _run_examples(exp, examples)
    except Exception as e:  # running may fail where compiling did not
        checks["golden"] = f"{type(e).__name__}: {_first_line(e)}"
        return "error", f"running the examples failed: {checks['golden']}"
    checks["golden"] = (
        f"{count} example(s): max abs error {comparison.max_abs:.3g}, "
        f"max rel error {comparison.max_rel:.3g}"
    )
    if not comparison.ok:
        return "mismatch", f"{comparison.worst} (beyond the dtype's tolerance)"
    return "ok", f"loads, compiles and matches {count} example(s)"


def _run_examples(exp: Any, blob: bytes) -> tuple[Comparison, int]:
    import jax

    pairs = decode_examples(blob)
    shardings = _in_shardings(exp)
    worst = Comparison(0.0, 0.0, True, "")
    for ins, outs in pairs:
        placed = [
            a if s is None else jax.device_put(a, s) for a, s in zip(ins, shardings, strict=True)
        ]
        args, kwargs = jax.tree.unflatten(exp.in_tree, placed)
        got = jax.tree.leaves(exp.call(*args, **kwargs))
        c = compare(got, outs)
        worst = Comparison(
            max(worst.max_abs, c.max_abs), max(worst.max_rel, c.max_rel),
            worst.ok and c.ok, worst.worst or c.worst,
        )  # fmt: skip
    return worst, len(pairs)


def _static(info: Any, platform: str, nr_devices: int, checks: dict[str, str]) -> str:
    lo, hi = MIN_SUPPORTED_FORMAT_VERSION, MAX_SUPPORTED_FORMAT_VERSION
    checks["format version"] = f"{info.format_version} (reader {lo}..{hi})"
    cc_lo, cc_hi = _compat.calling_convention_range()
    cc = info.calling_convention_version
    checks["calling convention"] = f"{cc} (jax {cc_lo}..{cc_hi})"
    if not cc_lo <= cc <= cc_hi:
        return f"calling convention version {cc} outside jax's {cc_lo}..{cc_hi}"
    # The producer string is the writer's StableHLO version; jax writes modules for an older
    # target (its compatibility window), so a newer producer is reported, not failed on:
    # deserializing and compiling below measure whether this jaxlib reads it.
    shlo_lo, shlo_hi = _stablehlo_range()
    for m in info.modules:
        label = "primal" if m.vjp_order == 0 else f"vjp {m.vjp_order}"
        inside = not m.stablehlo_version or _version_in(m.stablehlo_version, shlo_lo, shlo_hi)
        note = "" if inside else ", outside: compile decides"
        checks[f"StableHLO ({label})"] = (
            f"{m.stablehlo_version} (jaxlib {shlo_lo}..{shlo_hi}{note})"
        )
    unstable = sorted(set(info.custom_call_targets) - _stable_targets())
    checks["custom calls"] = (
        f"not guaranteed stable: {', '.join(unstable)}" if unstable else "all guaranteed stable"
    )
    checks["disabled safety checks"] = ", ".join(info.disabled_safety_checks) or "none"
    checks["platform"] = f"{platform} in {', '.join(info.platforms)}"
    if platform not in info.platforms:
        return f"exported for {', '.join(info.platforms)}; this machine runs {platform}"
    checks["devices"] = f"needs {info.nr_devices}, have {nr_devices}"
    if info.nr_devices > nr_devices:
        return f"exported for {info.nr_devices} devices; {nr_devices} available"
    return ""


def _compile(exp: Any, checks: dict[str, str]) -> None:
    import jax
    import numpy as np

    shardings = _in_shardings(exp)
    error: Exception | None = None
    for size in _DIM_CANDIDATES:
        specs = [
            jax.ShapeDtypeStruct(_concrete(a.shape, size), a.dtype, sharding=s)
            for a, s in zip(exp.in_avals, shardings, strict=True)
        ]
        args, kwargs = jax.tree.unflatten(exp.in_tree, specs)
        try:
            jax.jit(exp.call).lower(*args, **kwargs).compile()
        except Exception as e:  # a size that breaks a constraint: try the next one
            error = e
            if not any(not isinstance(d, int | np.integer) for a in exp.in_avals for d in a.shape):
                break
            continue
        checks["compile"] = "ok" + (f" (symbolic dims = {size})" if _symbolic(exp) else "")
        return
    assert error is not None
    raise error


def _in_shardings(exp: Any) -> list[Any]:
    """Shardings over this machine's first ``nr_devices`` devices for a sharded export's inputs."""
    if exp.nr_devices <= 1:
        return [None] * len(exp.in_avals)
    import jax
    import numpy as np

    devices = jax.devices()[: exp.nr_devices]
    _, named, _ = _compat.exported_named_shardings(exp)
    abstract = next((s.mesh for s in named if s is not None), None)
    if abstract is None:  # jax < 0.9: only the HloSharding form
        return _compat.hlo_shardings_on(exp.in_shardings_hlo, devices)
    mesh = jax.sharding.Mesh(np.array(devices).reshape(abstract.axis_sizes), abstract.axis_names)
    return list(exp.in_shardings_jax(mesh))


def _symbolic(exp: Any) -> bool:
    from jax._src import core

    return any(not core.is_constant_dim(d) for a in exp.in_avals for d in a.shape)


def _concrete(shape: tuple[Any, ...], size: int) -> tuple[int, ...]:
    from jax._src import core

    out = []
    for d in shape:
        if core.is_constant_dim(d):
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


def _stablehlo_range() -> tuple[str, str]:
    from jax._src.lib.mlir.dialects import hlo

    return str(hlo.get_minimum_version()), str(hlo.get_current_version())


def release_key(version: str) -> tuple[int, ...]:
    """A sort key for dotted release strings ("0.10.2" > "0.9.2"); non-numeric parts sort first."""
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def _version_in(version: str, lo: str, hi: str) -> bool:
    return release_key(lo) <= release_key(version) <= release_key(hi)


def _stable_targets() -> set[str]:
    from jax._src.export import _export

    return set(getattr(_export, "_CUSTOM_CALL_TARGETS_GUARANTEED_STABLE", ())) | {"shape_assertion"}
