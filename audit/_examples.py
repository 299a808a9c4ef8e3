"""Golden examples: inputs of an exported function with the outputs its producer computed.

Stored as one blob per version (content-addressed like archives): an ``.npz`` file, read with
``allow_pickle=False``, holding the flat input leaves ``in_0..``, the flat output leaves
``out_0..`` (each as raw bytes in a uint8 array) and ``meta``, a JSON list of
``[key, dtype name, shape]``, so every jax dtype (bfloat16, float8, ...) round-trips. The
same examples always make the same bytes (every zip entry dated 1980-01-01, as reproducible
builds date theirs), so pushing them again finds the version they are part of.
An optional ``tolerance`` entry (JSON ``{"rtol", "atol"}``: ``push(..., tolerance=...)``)
overrides the dtype rule (``tolerance``); readers that predate it ignore the entry. Audits
re-run the inputs and compare outputs with those tolerances. A model's blob
holds examples per method: the same keys prefixed ``<method>.`` (method names are identifiers),
the inputs being the method's own arguments (not the parameters).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxport import CorruptArchiveError, InvalidNameError, RunError, _npz

__all__ = [
    "NO_DIFFERENCE",
    "Comparison",
    "Example",
    "Tolerance",
    "check_tolerance",
    "compare",
    "decode_examples",
    "decode_model_examples",
    "decode_tolerance",
    "encode_examples",
    "encode_model_examples",
    "tolerance",
]

Pairs = list[tuple[list[np.ndarray], list[np.ndarray]]]


@dataclasses.dataclass(frozen=True)
class Example:
    """One call: ``fn(*args, **kwargs)``; ``outputs`` as the producer computed them (None:
    computed at push time by the pushed Exported)."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    outputs: Any = None


def encode_examples(
    flat: Sequence[tuple[list[Any], list[Any]]], tolerance: Tolerance | None = None
) -> bytes:
    """An npz blob of examples given as ``(flat inputs, flat outputs)`` pairs, with the
    tolerance ``override`` (``check_tolerance``) if any."""
    return _encode({"": flat}, tolerance)


def encode_model_examples(
    by_method: Mapping[str, Sequence[tuple[list[Any], list[Any]]]],
    tolerance: Tolerance | None = None,
) -> bytes:
    """An npz blob of a model's examples: per method, ``(flat arguments, flat outputs)``."""
    return _encode({f"{name}.": pairs for name, pairs in sorted(by_method.items())}, tolerance)


def _encode(
    by_prefix: Mapping[str, Sequence[tuple[list[Any], list[Any]]]], tolerance: Tolerance | None
) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    meta = []
    for prefix, flat in by_prefix.items():
        for i, (ins, outs) in enumerate(flat):
            for side, leaves in (("in", ins), ("out", outs)):
                for j, leaf in enumerate(leaves):
                    a = np.asarray(leaf)
                    key = f"{prefix}{i}_{side}_{j}"
                    arrays[key] = np.frombuffer(np.ascontiguousarray(a).tobytes(), dtype=np.uint8)
                    meta.append([key, a.dtype.name, list(a.shape)])
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    if tolerance is not None:  # absent otherwise: blobs of earlier releases keep their bytes
        arrays["tolerance"] = np.frombuffer(encode_tolerance(tolerance), dtype=np.uint8)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as npz:  # np.savez's layout, undated
        for key, array in arrays.items():
            entry = zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH)
            with npz.open(entry, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return buf.getvalue()


#: The date of every entry of an examples blob (zip's earliest).
_EPOCH = (1980, 1, 1, 0, 0, 0)


def decode_examples(data: bytes) -> Pairs:
    """The ``(flat inputs, flat outputs)`` pairs of an npz blob.

    Raises:
        CorruptArchiveError: not an examples blob.
    """
    return _decode(data).get("", [])


def decode_model_examples(data: bytes) -> dict[str, Pairs]:
    """A model's examples blob: per method, its ``(flat arguments, flat outputs)`` pairs.

    Raises:
        CorruptArchiveError: not an examples blob.
    """
    return {prefix[:-1]: pairs for prefix, pairs in _decode(data).items() if prefix}


def _decode(data: bytes) -> dict[str, Pairs]:
    """The blob's pairs per prefix, read without trusting it: every entry a stored (not
    deflated) raw-bytes array whose declared length is its length, the entries together no
    larger than the blob (no entry read twice), ``meta`` a list of ``[key, dtype, shape]``."""
    try:
        raw = _raw_entries(data)
        meta = _meta(raw.pop("meta"))
        found: dict[str, dict[int, tuple[list[np.ndarray], list[np.ndarray]]]] = {}
        for key, dtype_name, shape in meta:
            prefix, _, rest = key.rpartition(".")
            i, side, _ = rest.split("_")
            if side not in ("in", "out"):
                raise ValueError(f"entry {key!r} is neither an input nor an output")
            leaf = np.frombuffer(raw[key], dtype=_dtype(dtype_name)).reshape(shape)
            pairs = found.setdefault(f"{prefix}." if prefix else "", {})
            pairs.setdefault(int(i), ([], []))[0 if side == "in" else 1].append(leaf)
    except (ValueError, KeyError, TypeError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise CorruptArchiveError(f"not a golden-examples blob: {e}") from None
    return {prefix: [pairs[i] for i in sorted(pairs)] for prefix, pairs in found.items()}


def _raw_entries(data: bytes) -> dict[str, bytes]:
    """Each ``.npy`` entry's bytes (``encode_examples`` writes stored uint8 arrays only), every
    header checked before any data is read (``jaxport/_npz.py``)."""
    where = Path("the golden-examples blob")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as npz:
            found = _npz.headers(npz, where)
            for h in found.values():
                stored = h.member.compress_type == zipfile.ZIP_STORED
                if not stored or h.dtype != np.uint8 or len(h.shape) != 1:
                    raise ValueError(f"entry {h.key[:80]!r} is not a stored raw-bytes array")
            return {key: _npz.read(npz, h, where).tobytes() for key, h in found.items()}
    except RunError as e:  # _npz's own error, for jaxport run's inputs
        raise ValueError(str(e).removeprefix(f"{where}: ")) from None


def _meta(data: bytes) -> list[tuple[str, str, list[int]]]:
    try:
        meta = json.loads(data)
    except RecursionError:
        raise ValueError("meta is nested too deep") from None
    if not isinstance(meta, list):
        raise ValueError("meta is not a list")
    for item in meta:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in item[2])
        ):
            raise ValueError("meta is not a list of [key, dtype, shape]")
    return [(k, d, shape) for k, d, shape in meta]


def _dtype(name: str) -> np.dtype:
    """A leaf's dtype by name: numpy's, or jax's extra ones (bfloat16, float8_*, int4, ...);
    never one that holds Python objects."""
    import jax.numpy as jnp

    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"dtype {name[:40]!r}")
    dtype = np.dtype(getattr(jnp, name, name))
    if dtype.hasobject:
        raise ValueError(f"dtype {name!r} holds Python objects")
    return dtype


#: Per dtype: jax's ``default_tolerance`` (``jax/_src/public_test_util.py``), used by
#: ``assertAllClose`` as both rtol and atol and so by the back-compat tests
#: (``jax/_src/internal_test_util/export_back_compat_test_util.py``, ``run_one_test``), and
#: how many ulps of the output's magnitude rounding may move an element (see ``tolerance``).
_DTYPE_TOLERANCE: dict[str, tuple[float, int]] = {
    "float64": (1e-15, 512),
    "complex128": (1e-15, 512),
    "float32": (1e-6, 512),
    "complex64": (1e-6, 512),
    "float16": (1e-3, 2),
    "bfloat16": (1e-2, 2),
    "float4_e2m1fn": (1.0, 1),
    "float8_e8m0fnu": (1.0, 1),
}
#: Any other float8 type (e3m4, e4m3, e4m3fn, e4m3fnuz, e4m3b11fnuz, e5m2, e5m2fnuz).
_FLOAT8 = (1e-1, 1)
#: The rtol jax's back-compat tests use when a test gives none (``run_one_test``): the floor
#: of every float dtype's rtol (float64's default, 1e-15, would be far below it).
_BACK_COMPAT_RTOL = 1e-7


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """What a golden output may differ by: element ``i`` passes when
    ``|got[i] - want[i]| <= atol + rtol * |want[i]|`` (numpy's ``allclose`` rule, as jax's
    ``assertAllClose``). Integers and bools are compared exactly (0, 0).

    ``source`` says where the numbers come from: ``"dtype"`` (``tolerance``) or
    ``"override"`` (``push(..., tolerance=...)``)."""

    rtol: float
    atol: float
    source: str = "dtype"

    def describe(self) -> str:
        """``"atol 3.1e-05 + rtol 1e-06 x |expected| (float32 rule)"``-like text."""
        what = "override" if self.source == "override" else "dtype rule"
        return f"atol {self.atol:.3g} + rtol {self.rtol:.3g} x |expected| ({what})"


def tolerance(dtype: np.dtype, magnitude: float = 0.0) -> Tolerance:
    """The tolerance for one output leaf of ``dtype`` whose expected values reach
    ``magnitude`` (the largest finite ``|want|`` of the leaf).

    Modelled on jax's own back-compat tests, which compare a module's outputs with
    ``assertAllClose`` (``export_back_compat_test_util.run_one_test``: rtol 1e-7 unless the test
    gives one, atol the per-dtype default of ``jax._src.public_test_util.default_tolerance``:
    float32 1e-6, float64 1e-15, float16 1e-3, bfloat16 1e-2, float8 1e-1). Here rtol is the
    larger of 1e-7 and that default, and the atol the larger of that default and a number of
    ulps of the leaf's magnitude. That elementwise atol alone
    fails a real model's rounding noise: a float32 logit near zero that is a sum of terms of
    size ~1 carries an error of a few ulps of those terms, not of itself (a GPT-2's logits
    moved by 4.5e-6 across jax releases; jax's own tests then pass ``atol``/``rtol`` per test,
    e.g. ``_ATOL`` 1e-4 for float32 linear algebra). The number of ulps of the magnitude is
    512 for 32- and 64-bit types (long
    reductions accumulate in that precision, noise growing with ~sqrt(length)), 2 for
    float16/bfloat16 and 1 for 8- and 4-bit floats (XLA accumulates those in float32 and
    rounds once). A real numerical break (a changed activation, a lost precision step,
    another algorithm) moves outputs by far more than 512 ulps of their magnitude (float32:
    6e-5 of it).

    Integers and bools: exact.
    """
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        return Tolerance(0.0, 0.0)
    tol, ulps = _DTYPE_TOLERANCE.get(dt.name, _FLOAT8 if "float8" in dt.name else (1e-6, 512))
    eps = float(np.finfo(dt).eps) if dt.kind in "fc" else _ml_eps(dt)
    return Tolerance(max(tol, _BACK_COMPAT_RTOL), max(tol, ulps * eps * float(magnitude)))


def _ml_eps(dt: np.dtype) -> float:
    """The machine epsilon of an ml_dtypes float (bfloat16, float8_*): numpy's finfo does not
    know them, ``ml_dtypes.finfo`` does."""
    try:
        import ml_dtypes

        return float(ml_dtypes.finfo(dt).eps)  # type: ignore[no-untyped-call]
    except (ImportError, ValueError, TypeError):
        return 1.0


def check_tolerance(value: Any) -> Tolerance | None:
    """``push(..., tolerance=...)``'s argument as a ``Tolerance`` override (None: none).

    Accepts a number (used as both rtol and atol, as jax's ``assertAllClose(tol)``), a
    ``(rtol, atol)`` pair, a mapping ``{"rtol": ..., "atol": ...}``, a ``Tolerance``, or the
    CLI's text: ``"1e-4"`` or ``"rtol=1e-5,atol=1e-4"``.

    Raises:
        InvalidNameError: anything else, or a value that is not a finite number >= 0.
    """
    if value is None:
        return None
    if isinstance(value, Tolerance):
        rtol, atol = value.rtol, value.atol
    elif isinstance(value, str):
        rtol, atol = _parse_tolerance(value)
    elif isinstance(value, Mapping):
        if set(value) - {"rtol", "atol"} or not value:
            raise InvalidNameError("tolerance takes the keys rtol and atol only")
        rtol, atol = value.get("rtol", 0.0), value.get("atol", 0.0)
    elif isinstance(value, tuple | list):
        if len(value) != 2:
            raise InvalidNameError("tolerance as a pair is (rtol, atol)")
        rtol, atol = value
    else:
        rtol = atol = value
    return Tolerance(_non_negative(rtol, "rtol"), _non_negative(atol, "atol"), "override")


def _parse_tolerance(text: str) -> tuple[Any, Any]:
    parts = dict.fromkeys(("rtol", "atol"), "0")
    if "=" not in text:
        return _number(text), _number(text)
    for item in text.split(","):
        key, _, number = item.partition("=")
        if key.strip() not in parts:
            raise InvalidNameError(f"tolerance: {item[:40]!r} is not rtol=X or atol=X")
        parts[key.strip()] = number
    return _number(parts["rtol"]), _number(parts["atol"])


def _number(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise InvalidNameError(f"tolerance: {text[:40]!r} is not a number") from None


def _non_negative(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise InvalidNameError(f"tolerance {what} must be a number, got {value!r:.40}")
    number = float(value)
    if not (math.isfinite(number) and number >= 0):
        raise InvalidNameError(f"tolerance {what} must be finite and >= 0, got {number}")
    return number


def encode_tolerance(override: Tolerance) -> bytes:
    """The ``tolerance`` entry of an examples blob (JSON ``{"rtol": r, "atol": a}``)."""
    return json.dumps({"rtol": override.rtol, "atol": override.atol}, sort_keys=True).encode()


def decode_tolerance(data: bytes) -> Tolerance | None:
    """The override stored in an examples blob (``push(..., tolerance=...)``); None: the
    dtype rule applies.

    Raises:
        CorruptArchiveError: not an examples blob, or a malformed ``tolerance`` entry.
    """
    try:
        raw = _raw_entries(data)
    except ValueError as e:
        raise CorruptArchiveError(f"not a golden-examples blob: {e}") from None
    if "tolerance" not in raw:
        return None
    try:
        found = json.loads(raw["tolerance"])
        return check_tolerance(dict(found))
    except (ValueError, TypeError, RecursionError, InvalidNameError) as e:
        raise CorruptArchiveError(f"golden-examples blob: bad tolerance entry: {e}") from None


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Largest absolute and relative errors over all outputs, and whether they are within
    tolerance.

    ``max_rel`` is relative to the output's magnitude: a leaf's largest absolute error over its
    largest ``|expected|`` (an element-by-element ratio is meaningless near zero).
    ``tolerance`` describes the tolerance of the leaf that came closest to (or went furthest
    past) its limit, ``ratio`` that leaf's largest ``error / allowed``; ``worst`` describes the
    first leaf beyond tolerance ("" when all are within)."""

    max_abs: float
    max_rel: float
    ok: bool
    worst: str
    tolerance: str = ""
    ratio: float = 0.0

    def and_then(self, other: Comparison, label: str = "") -> Comparison:
        """Both comparisons as one: the larger errors, ok if both are, the first worst case
        (``other``'s prefixed with ``label``), the tolerance of the leaf nearest its limit."""
        other_worst = f"{label}{other.worst}" if other.worst else ""
        nearer = other if other.ratio > self.ratio or not self.tolerance else self
        return Comparison(
            max(self.max_abs, other.max_abs),
            max(self.max_rel, other.max_rel),
            self.ok and other.ok,
            self.worst or other_worst,
            nearer.tolerance,
            max(self.ratio, other.ratio),
        )


#: Nothing compared yet.
NO_DIFFERENCE = Comparison(0.0, 0.0, True, "")


def compare(
    got: Sequence[Any], want: Sequence[Any], override: Tolerance | None = None
) -> Comparison:
    """Compares flat outputs leaf by leaf: ``override`` where given, else ``tolerance`` of
    each leaf's dtype and magnitude. NaN matches NaN and an infinity the same infinity (numpy's
    ``assert_allclose(equal_nan=True)``, as jax's tests); one without the other is an
    infinite error."""
    if len(got) != len(want):
        return Comparison(
            float("inf"), float("inf"), False, f"{len(got)} outputs, expected {len(want)}"
        )
    result = NO_DIFFERENCE
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g_arr, w_arr = np.asarray(g), np.asarray(w)
        if g_arr.shape != w_arr.shape:
            return Comparison(
                float("inf"),
                float("inf"),
                False,
                f"output {i}: shape {g_arr.shape} != {w_arr.shape}",
            )
        result = result.and_then(_compare_leaf(i, g_arr, w_arr, override))
    return result


def _compare_leaf(i: int, g: np.ndarray, w: np.ndarray, override: Tolerance | None) -> Comparison:
    wide = np.complex128 if w.dtype.kind == "c" or g.dtype.kind == "c" else np.float64
    g64, w64 = g.astype(wide), w.astype(wide)
    if not w64.size:
        return NO_DIFFERENCE
    same = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
    finite = np.isfinite(w64)
    magnitude = float(np.abs(w64[finite]).max()) if finite.any() else 0.0
    tol = override or tolerance(w.dtype, magnitude)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(same, 0.0, np.abs(g64 - w64))
    err = np.where(np.isnan(err), np.inf, err)
    allowed = tol.atol + tol.rtol * np.abs(np.where(finite, w64, 0.0))
    abs_err = float(err.max())
    rel_err = abs_err / magnitude if magnitude else (0.0 if abs_err == 0 else float("inf"))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(err == 0, 0.0, err / allowed)
    ratio = float(np.nanmax(np.where(np.isnan(ratios), np.inf, ratios)))
    ok = bool(np.all(err <= allowed))
    name = w.dtype.name
    worst = ""
    if not ok:
        at = int(np.argmax(np.where(err <= allowed, -1.0, err)))
        index = np.unravel_index(at, w.shape) if w.shape else ()
        worst = (
            f"output {i} ({name}{list(w.shape)}): max abs error {abs_err:.3g}, max rel error "
            f"{rel_err:.3g} (of max |expected| {magnitude:.3g}); at {list(map(int, index))}: "
            f"got {g64.flat[at]:.6g}, expected {w64.flat[at]:.6g}, beyond "
            f"{tol.describe()}"
        )
    return Comparison(abs_err, rel_err, ok, worst, f"{name}: {tol.describe()}", ratio)
