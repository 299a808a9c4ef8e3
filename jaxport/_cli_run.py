"""``jaxport run``: a model method, or a function archive's function, on arrays read from an
``.npz`` file, outputs to another.

A function's inputs are bound to its positional arguments, in order; a function that takes
keyword arguments is refused (an ``.npz`` has no way to say which array is which keyword).
Inputs: the ``.npz`` holds the method's flat inputs (its arguments' leaves, in
``jax.tree_util`` order): either ``arr_0``, ``arr_1``, ... as ``numpy.savez(f, *arrays)``
writes them, or keyed by their paths as ``jaxport inspect`` shows them (``[0]``,
``[1]['mask']``). It is read with ``allow_pickle=False``. Outputs: each leaf of the result is
named ``out`` followed by its key path (``out``, ``out[0]``, ``out['logits']``) and written with
``numpy.savez``. ml_dtypes types (bfloat16, float8, int4, ...) have no ``.npz`` code: numpy
writes them as raw bytes of their width (``|V2``), which ``run`` accepts as inputs of that type.
"""

from __future__ import annotations

import dataclasses
import io
import math
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxport import _npz
from jaxport._errors import JaxportError, RunError
from jaxport._files import check_regular_file

__all__ = [
    "InputSpec",
    "OutputSummary",
    "aval_text",
    "call_function",
    "call_method",
    "function_specs",
    "input_specs",
    "load_inputs",
    "output_arrays",
    "output_bytes",
    "signature",
    "summarize",
]

#: Leading values an output summary shows.
_FIRST_VALUES = 3


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One flat input of a method: its path (``[0]``, ``[1]['w']``), shape (a symbolic
    dimension is its expression, e.g. ``"b"``) and numpy dtype name."""

    path: str
    shape: tuple[int | str, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.path} {aval_text(self.shape, self.dtype)}"


@dataclasses.dataclass(frozen=True)
class OutputSummary:
    """An output leaf as ``run`` prints it: name, shape, dtype, min, max and its first values
    (None for min and max of an empty or complex array; floats that are not finite as text)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    min: float | int | str | None
    max: float | int | str | None
    first: tuple[float | int | str | bool, ...]


def aval_text(shape: Sequence[int | str], dtype: str) -> str:
    """``float32[b,4]``; a scalar is ``float32[]``."""
    return f"{dtype}[{','.join(map(str, shape))}]"


def signature(inputs: Sequence[tuple[str, str]], outputs: Sequence[tuple[str, str]]) -> str:
    """``(float32[b,4]) -> float32[b,3]`` from ``(path, aval text)`` pairs.

    Paths are shown only where they say more than the position: pytree arguments or results.
    """
    results = _leaves(outputs)
    if len(outputs) != 1 or outputs[0][0] != "":
        results = f"({results})"
    return f"({_leaves(inputs)}) -> {results}"


def _leaves(leaves: Sequence[tuple[str, str]]) -> str:
    positional = all(p in ("", f"[{i}]") for i, (p, _) in enumerate(leaves))
    return ", ".join(t if positional else f"{p} {t}" for p, t in leaves)


def input_specs(model: Any, method: str) -> list[InputSpec]:
    """The flat inputs ``method`` of ``model`` takes after its parameters.

    Raises:
        RunError: the model has no such method (the message lists its methods).
    """
    exported = model.exported
    if method not in exported:
        raise RunError(f"the model has no method {method!r}; its methods: {', '.join(exported)}")
    exp = exported[method]
    return _specs(exp, exp.in_avals[model.params_tree.num_leaves :], skip=1)


def function_specs(exp: Any) -> list[InputSpec]:
    """The flat inputs of a function archive's ``Exported``: its positional arguments' leaves.

    Raises:
        RunError: the function takes keyword arguments (inputs bind by position only).
    """
    from jax import tree_util

    kwargs: Any = tree_util.treedef_children(exp.in_tree)[1]
    if kwargs.num_leaves or tree_util.treedef_children(kwargs):
        raise RunError(
            f"function {exp.fun_name!r} takes keyword arguments: jaxport run binds the "
            ".npz's arrays to positional arguments only"
        )
    return _specs(exp, exp.in_avals, skip=0)


def _specs(exp: Any, avals: Sequence[Any], *, skip: int) -> list[InputSpec]:
    paths = _argument_paths(exp.in_tree, len(avals), skip)
    return [
        InputSpec(p, tuple(_dim(d) for d in a.shape), _dtype_name(a.dtype))
        for p, a in zip(paths, avals, strict=True)
    ]


def _dtype_name(dtype: Any) -> str:
    try:
        return str(np.dtype(dtype).name)
    except TypeError:  # a PRNG key type: not a numpy dtype
        return str(dtype)


def _dim(d: Any) -> int | str:
    return d if isinstance(d, int) else str(d)


def _argument_trees(in_tree: Any, skip: int = 1) -> list[Any]:
    """The treedefs of the arguments: ``in_tree`` is that of ``(args, kwargs)``; the first
    ``skip`` arguments are left out (a model method's parameters: 1)."""
    from jax import tree_util

    return list(tree_util.treedef_children(tree_util.treedef_children(in_tree)[0])[skip:])


def _argument_paths(in_tree: Any, n: int, skip: int = 1) -> list[str]:
    """Key paths of the leaves of the arguments after the first ``skip``, as ``[i]...``."""
    from jax import tree_util

    try:
        paths = []
        for i, tree in enumerate(_argument_trees(in_tree, skip)):
            leaves = tree_util.tree_flatten_with_path(
                tree_util.tree_unflatten(tree, [0] * tree.num_leaves)
            )[0]
            paths += [f"[{i}]{tree_util.keystr(k)}" for k, _ in leaves]
    except Exception:  # a custom node that cannot be rebuilt from placeholders
        paths = []
    return paths if len(paths) == n else [f"[{i}]" for i in range(n)]


def load_inputs(
    path: Path, specs: Sequence[InputSpec], method: str, *, kind: str = "method"
) -> list[np.ndarray[Any, Any]]:
    """The arrays of the ``.npz`` at ``path`` as ``method``'s flat inputs, in order, checked
    against ``specs`` (dtype, rank and every concrete dimension; jax checks symbolic ones).

    Every array's header is read and checked (against ``specs`` and against what its zip
    member can hold: ``jaxport._npz``) before any array's data is read, so a file that
    declares more than it holds, or inputs of another shape, costs no allocation.

    Raises:
        RunError: not a regular file or not an ``.npz`` of arrays (pickled objects included),
            other keys or a number of arrays than the method takes, an array of another dtype
            or shape (naming the argument, what it takes and what was given), sizes declared
            beyond what the file holds.
    """
    check_regular_file(path, RunError)
    try:
        with zipfile.ZipFile(path) as archive:
            headers = _npz.headers(archive, path)
            takes = _takes(f"{kind} {method!r}", specs)
            order = _order(list(headers), specs)
            if order is None:
                got = ", ".join(headers) or "no arrays"
                raise RunError(f"{path}: {takes}; the file holds {got}")
            pairs = [(headers[key], spec) for key, spec in zip(order, specs, strict=True)]
            for header, spec in pairs:
                _check_header(header, spec, takes)
            return [_as_input(_npz.read(archive, h, path), s) for h, s in pairs]
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
        raise RunError(f"{path} is not an .npz file (write one with numpy.savez): {e}") from None


def _takes(what: str, specs: Sequence[InputSpec]) -> str:
    listed = "; ".join(map(str, specs)) or "nothing"
    return f"{what} takes {len(specs)} input(s): {listed}"


def _order(keys: list[str], specs: Sequence[InputSpec]) -> list[str] | None:
    """The file's keys in the method's input order, or None when they are not its inputs."""
    for order in ([s.path for s in specs], [f"arr_{i}" for i in range(len(specs))]):
        if sorted(keys) == sorted(order):
            return order
    return None


def _check_header(header: _npz.NpyHeader, spec: InputSpec, takes: str) -> None:
    expected = _numpy_dtype(spec.dtype)
    dtype = header.dtype
    if dtype.kind == "V" and dtype.itemsize == expected.itemsize and not dtype.names:
        dtype = expected  # how numpy.savez writes an ml_dtypes type
    shape_ok = len(header.shape) == len(spec.shape) and all(
        isinstance(d, str) or d == n for d, n in zip(spec.shape, header.shape, strict=True)
    )
    if dtype != expected or not shape_ok:
        got = aval_text(header.shape, header.dtype.name)
        wanted = aval_text(spec.shape, spec.dtype)
        raise RunError(f"input {header.key} is {got}, {spec.path} must be {wanted}; {takes}")


def _as_input(array: np.ndarray[Any, Any], spec: InputSpec) -> np.ndarray[Any, Any]:
    expected = _numpy_dtype(spec.dtype)
    return array.view(expected) if array.dtype != expected else array


def _numpy_dtype(name: str) -> np.dtype[Any]:
    from jaxport.export._dtypes import numpy_dtype

    try:
        dtype: np.dtype[Any] = numpy_dtype(name)
    except JaxportError:
        raise RunError(f"an input of type {name} cannot be read from an .npz") from None
    return dtype


def call_method(model: Any, method: str, inputs: Sequence[Any]) -> Any:
    """``model.methods[method]`` on the flat ``inputs``, rebuilt into its arguments.

    Raises:
        RunError: jax refused the call (a platform the method was not exported for, too few
            devices, symbolic dimensions that disagree), or a shape assertion failed.
        MissingCustomCallError: the method calls a custom-call target jaxlib lacks.
        JaxportError: a parameter tensor could not be read (``IntegrityError``, ...).
    """
    args = _arguments(model.exported[method].in_tree, inputs, skip=1)
    return _call(model.methods[method], args, f"method {method!r}")


def call_function(exp: Any, inputs: Sequence[Any]) -> Any:
    """A function archive's ``exp.call`` on the flat ``inputs``, rebuilt into its positional
    arguments.

    Raises:
        RunError: jax refused the call (as ``call_method``).
    """
    return _call(exp.call, _arguments(exp.in_tree, inputs, skip=0), f"function {exp.fun_name!r}")


def _arguments(in_tree: Any, inputs: Sequence[Any], *, skip: int) -> list[Any]:
    from jax import tree_util

    args, start = [], 0
    for tree in _argument_trees(in_tree, skip):
        args.append(tree_util.tree_unflatten(tree, inputs[start : start + tree.num_leaves]))
        start += tree.num_leaves
    return args


def _call(fun: Any, args: Sequence[Any], what: str) -> Any:
    import jax

    try:
        return fun(*args)
    except JaxportError:
        raise
    except (ValueError, TypeError, jax.errors.JaxRuntimeError) as e:
        from jaxport.export._calls import translate_call_error

        typed = translate_call_error(e, what)
        if typed is not None:
            raise typed from None
        raise RunError(f"{what} cannot run here: {_first_line(e)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def output_arrays(result: Any) -> dict[str, np.ndarray[Any, Any]]:
    """The result's leaves as host arrays, named ``out`` + key path (``out['logits']``)."""
    from jax import tree_util

    leaves = tree_util.tree_flatten_with_path(result)[0]
    return {f"out{tree_util.keystr(k)}": np.asarray(v) for k, v in leaves}


def output_bytes(arrays: dict[str, np.ndarray[Any, Any]]) -> bytes:
    """``arrays`` as ``.npz`` bytes (``numpy.savez``, uncompressed)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def summarize(name: str, array: np.ndarray[Any, Any]) -> OutputSummary:
    """What ``run`` prints of an output: its first values, min and max."""
    flat = array.reshape(-1)
    numeric = array.dtype.kind in "biuf" or array.dtype.kind == "V"
    values = flat[:_FIRST_VALUES]
    if array.dtype.kind not in "biufc":  # ml_dtypes types: shown as float32
        values = values.astype(np.float32)
        flat = flat.astype(np.float32)
    lo = hi = None
    if numeric and flat.size:
        lo, hi = _scalar(np.min(flat)), _scalar(np.max(flat))
    return OutputSummary(
        name, tuple(array.shape), array.dtype.name, lo, hi, tuple(_scalar(v) for v in values)
    )


def _scalar(value: Any) -> float | int | str | bool:
    item = value.item()
    if isinstance(item, float) and not math.isfinite(item):
        return str(item)
    if isinstance(item, complex):
        return str(item)
    return item  # type: ignore[no-any-return]
