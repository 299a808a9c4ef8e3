"""A module's facts, as the sandbox read them, checked against what the archive's header says.

The header declares each module's custom-call targets and, through its Exported fields, the
signature of the module's ``main`` function. jax's calling convention
(https://docs.jax.dev/en/latest/export/export.html#calling-convention-versions) makes
``main``'s arguments: jax's global constants (the platform index when there are several
platforms, dimension variables), one ``!stablehlo.token`` per ordered effect, then the kept
array arguments (``module_kept_var_idx``) in order; its results: the tokens, then every
output. Each array's MLIR type is ``tensor<DIMSxELEMENT>``, with ``?`` for a symbolic dimension.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from jaxport import CorruptArchiveError

__all__ = ["check_facts", "mlir_type"]

# numpy/ml_dtypes dtype name -> MLIR element type (jax's ``mlir.dtype_to_ir_type``).
_ELEMENT = {
    "bool": "i1",
    "float0": "i1",
    **{f"int{n}": f"i{n}" for n in (2, 4, 8, 16, 32, 64)},
    **{f"uint{n}": f"ui{n}" for n in (2, 4, 8, 16, 32, 64)},
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "complex<f32>",
    "complex128": "complex<f64>",
    "float8_e4m3fn": "f8E4M3FN",
    "float8_e5m2": "f8E5M2",
    "float8_e4m3fnuz": "f8E4M3FNUZ",
    "float8_e5m2fnuz": "f8E5M2FNUZ",
    "float8_e4m3b11fnuz": "f8E4M3B11FNUZ",
    "float8_e4m3": "f8E4M3",
    "float8_e3m4": "f8E3M4",
    "float8_e8m0fnu": "f8E8M0FNU",
    "float4_e2m1fn": "f4E2M1FN",
    "float6_e2m3fn": "f6E2M3FN",
    "float6_e3m2fn": "f6E3M2FN",
}
_TOKEN = "!stablehlo.token"
_TENSOR = re.compile(r"^tensor<(?P<body>.*)>$")


def mlir_type(aval: Any) -> str | None:
    """``tensor<2x?xf32>`` for an aval, or None for a dtype whose lowering is not one array of
    the same shape (typed PRNG keys and other extended dtypes)."""
    element = _ELEMENT.get(getattr(aval.dtype, "name", ""))
    if element is None:
        return None
    dims = ["?" if not isinstance(d, int) else str(d) for d in aval.shape]
    return "tensor<" + "".join(d + "x" for d in dims) + element + ">"


def check_facts(facts: Mapping[str, Any], fields: Mapping[str, Any], where: str) -> None:
    """Checks a module's ``main`` against the Exported ``fields`` of the same level.

    Args:
        facts: the sandbox worker's facts of the module.
        fields: the decoded Exported fields (``in_avals``, ``out_avals``, ``platforms``,
            ``ordered_effects``, ``module_kept_var_idx``, ``nr_devices``).
        where: names the module in messages ("the primal module (section 0)").

    Raises:
        CorruptArchiveError: no public ``main``, or its arguments or results are not those
            the header declares, or its device attributes contradict ``nr_devices``.
    """
    main = facts.get("main")
    if not isinstance(main, Mapping) or not main.get("public"):
        raise CorruptArchiveError(f"{where} has no public function 'main'")
    constants = set(main.get("global_constants", ()))
    inputs = [t for i, t in enumerate(main["inputs"]) if i not in constants and t != _TOKEN]
    results = [t for t in main["results"] if t != _TOKEN]
    in_avals = fields["in_avals"]
    kept = [in_avals[i] for i in fields["module_kept_var_idx"]]
    _compare(inputs, kept, f"{where}: main's arguments")
    _compare(results, fields["out_avals"], f"{where}: main's results")
    if len(fields["platforms"]) > 1 and not constants:
        raise CorruptArchiveError(
            f"{where} is declared for platforms {list(fields['platforms'])} but its main takes "
            f"no platform index"
        )
    _check_devices(facts, fields["nr_devices"], where)


def _compare(found: Sequence[str], avals: Sequence[Any], what: str) -> None:
    if len(found) != len(avals):
        raise CorruptArchiveError(
            f"{what} are {len(found)} arrays, the header declares {len(avals)}"
        )
    for i, (t, aval) in enumerate(zip(found, avals, strict=True)):
        expected = mlir_type(aval)
        if expected is None:
            if not _TENSOR.match(t):
                raise CorruptArchiveError(f"{what}: #{i} is {t}, not an array")
        elif not _same_type(_strip_encoding(t), expected):
            raise CorruptArchiveError(f"{what}: #{i} is {t}, the header declares {expected}")


def _same_type(found: str, expected: str) -> bool:
    """The same element type and rank, each dimension equal or ``?`` in the module.

    A ``?`` in the module matches any declared dimension: jax calls a module exported with
    symbolic shapes at more refined ones (``_call_exported_lowering`` converts them), and
    synthesized Exporteds (jax's own back-compat tests) declare the concrete shapes of their
    inputs for a polymorphic module. A static dimension must match a static one exactly.
    """
    if found == expected:
        return True
    f, e = found[len("tensor<") : -1].split("x"), expected[len("tensor<") : -1].split("x")
    if len(f) != len(e) or f[-1] != e[-1]:
        return False
    return all(a == b or a == "?" or b == "?" for a, b in zip(f[:-1], e[:-1], strict=True))


def _strip_encoding(t: str) -> str:
    """``tensor<4xf32, #enc>`` -> ``tensor<4xf32>`` (a layout or sparsity encoding)."""
    m = _TENSOR.match(t)
    if m is None or "," not in m.group("body"):
        return t
    return "tensor<" + m.group("body").split(",", 1)[0].strip() + ">"


def _check_devices(facts: Mapping[str, Any], nr_devices: int, where: str) -> None:
    partitions, replicas = facts.get("num_partitions"), facts.get("num_replicas")
    if (
        isinstance(partitions, int)
        and isinstance(replicas, int)
        and partitions * replicas != nr_devices
    ):
        raise CorruptArchiveError(
            f"{where} is compiled for {partitions} partitions x {replicas} replicas, "
            f"the header declares {nr_devices} devices"
        )
