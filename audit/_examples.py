"""Golden examples: inputs of an exported function with the outputs its producer computed.

Stored as one blob per version (content-addressed like archives): an ``.npz`` file, read with
``allow_pickle=False``, holding the flat input leaves ``in_0..``, the flat output leaves
``out_0..`` (each as raw bytes in a uint8 array) and ``meta``, a JSON list of
``[key, dtype name, shape]``, so every jax dtype (bfloat16, float8, ...) round-trips. The
same examples always make the same bytes (every zip entry dated 1980-01-01, as reproducible
builds date theirs), so pushing them again finds the version they are part of.
Audits re-run the inputs and compare outputs with dtype-aware tolerances. A model's blob
holds examples per method: the same keys prefixed ``<method>.`` (method names are identifiers),
the inputs being the method's own arguments (not the parameters).
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxport import CorruptArchiveError, RunError, _npz

__all__ = [
    "NO_DIFFERENCE",
    "Comparison",
    "Example",
    "compare",
    "decode_examples",
    "decode_model_examples",
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


def encode_examples(flat: Sequence[tuple[list[Any], list[Any]]]) -> bytes:
    """An npz blob of examples given as ``(flat inputs, flat outputs)`` pairs."""
    return _encode({"": flat})


def encode_model_examples(by_method: Mapping[str, Sequence[tuple[list[Any], list[Any]]]]) -> bytes:
    """An npz blob of a model's examples: per method, ``(flat arguments, flat outputs)``."""
    return _encode({f"{name}.": pairs for name, pairs in sorted(by_method.items())})


def _encode(by_prefix: Mapping[str, Sequence[tuple[list[Any], list[Any]]]]) -> bytes:
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


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing outputs of ``dtype``: 0 for integers and bool."""
    name = np.dtype(dtype).name
    if name.startswith(("int", "uint", "bool")):
        return 0.0, 0.0
    if "float8" in name or "float4" in name or "float6" in name:
        return 1.25e-1, 1e-1
    if name == "bfloat16":
        return 1.6e-2, 1e-2
    if name == "float16":
        return 2e-3, 1e-3
    if name in ("float64", "complex128"):
        return 1e-10, 1e-12
    return 1e-5, 1e-6


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Largest absolute and relative errors over all outputs, and whether they are within
    tolerance."""

    max_abs: float
    max_rel: float
    ok: bool
    worst: str

    def and_then(self, other: Comparison, label: str = "") -> Comparison:
        """Both comparisons as one: the larger errors, ok if both are, the first worst case
        (``other``'s prefixed with ``label``)."""
        other_worst = f"{label}{other.worst}" if other.worst else ""
        return Comparison(
            max(self.max_abs, other.max_abs),
            max(self.max_rel, other.max_rel),
            self.ok and other.ok,
            self.worst or other_worst,
        )


#: Nothing compared yet.
NO_DIFFERENCE = Comparison(0.0, 0.0, True, "")


def compare(got: Sequence[Any], want: Sequence[Any]) -> Comparison:
    """Compares flat outputs leaf by leaf with ``tolerance`` of each leaf's dtype."""
    max_abs = max_rel = 0.0
    ok, worst = True, ""
    if len(got) != len(want):
        return Comparison(
            float("inf"), float("inf"), False, f"{len(got)} outputs, expected {len(want)}"
        )
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g64 = np.asarray(g).astype(np.float64) if np.asarray(g).dtype.kind != "c" else np.asarray(g)
        w64 = np.asarray(w).astype(np.float64) if np.asarray(w).dtype.kind != "c" else np.asarray(w)
        if g64.shape != w64.shape:
            return Comparison(
                float("inf"), float("inf"), False, f"output {i}: shape {g64.shape} != {w64.shape}"
            )
        err = np.abs(g64 - w64)
        abs_err = float(err.max()) if err.size else 0.0
        rel_err = float((err / np.maximum(np.abs(w64), 1e-30)).max()) if err.size else 0.0
        rtol, atol = tolerance(np.asarray(w).dtype)
        if err.size and not bool(np.all(err <= atol + rtol * np.abs(w64))):
            ok = False
            name = np.asarray(w).dtype.name
            worst = worst or f"output {i} ({name}): max abs {abs_err:.3g}, max rel {rel_err:.3g}"
        max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
    return Comparison(max_abs, max_rel, ok, worst)
