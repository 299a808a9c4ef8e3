"""``jaxport run``: a model method on arrays read from an ``.npz`` file, outputs to another.

A function's inputs are bound to its positional arguments; a function that takes keyword
arguments is refused (an ``.npz`` has no way to say which array is which keyword).
Inputs: the ``.npz`` holds the method's flat inputs (its arguments' leaves), each bound by
its name, never by a guessed order: keyed by its path as ``jaxport inspect`` shows it
(``[0]``, ``[1]['mask']``), or by its key within its argument (``mask``; ``enc.mask`` for
``[1]['enc']['mask']``) where no other input has that key; ``arr_0``, ``arr_1``, ... as
``numpy.savez(f, *arrays)`` writes them are bound by position only where the position is not
a guess: no dict (or other keyed node) of the inputs has two or more entries, whose order
jax sorts and a file need not. A file whose keys do not bind every input exactly once is
refused with the names expected. It is read with ``allow_pickle=False``.

Outputs: each leaf of the result is named ``out`` followed by its key path (``out``,
``out[0]``, ``out['logits']``) and written with ``numpy.savez``. ml_dtypes types (bfloat16,
float8, int4, ...) have no ``.npz`` code: numpy writes them as raw bytes of their width
(``|V2``), which ``run`` accepts as inputs of that type.
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
    "DEFAULT_RUN_TIMEOUT",
    "InputSpec",
    "OutputSummary",
    "aval_text",
    "call_in_child",
    "call_method",
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
    dimension is its expression, e.g. ``"b"``) and numpy dtype name; ``name``: its key within
    its argument (``w``, ``enc.mask``; "" when it has none or another input has the same);
    ``positional``: whether ``arr_<its index>`` binds it (no keyed node of the method's
    inputs has two or more entries)."""

    path: str
    shape: tuple[int | str, ...]
    dtype: str
    name: str = ""
    positional: bool = True

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
    keys = _argument_keys(exp.in_tree, len(avals), skip)
    if keys is None:  # a custom node that cannot be rebuilt: flat leaves in jax's order
        return [
            InputSpec(f"[{i}]", tuple(_dim(d) for d in a.shape), _dtype_name(a.dtype))
            for i, a in enumerate(avals)
        ]
    from jax import tree_util

    names = [_name(k[1:]) for k in keys]
    positional = _ordered(keys)
    return [
        InputSpec(
            tree_util.keystr(k),
            tuple(_dim(d) for d in a.shape),
            _dtype_name(a.dtype),
            name if names.count(name) == 1 else "",
            positional,
        )
        for k, a, name in zip(keys, avals, names, strict=True)
    ]


def _name(keys: tuple[Any, ...]) -> str:
    """``enc.mask`` for the keys ``['enc']['mask']``; "" for a bare argument."""
    from jax import tree_util

    parts = []
    for k in keys:
        if isinstance(k, tree_util.DictKey):
            parts.append(str(k.key))
        elif isinstance(k, tree_util.SequenceKey):
            parts.append(str(k.idx))
        elif isinstance(k, tree_util.GetAttrKey):
            parts.append(k.name)
        else:
            parts.append(str(getattr(k, "key", k)))
    return ".".join(parts)


def _ordered(keys: Sequence[tuple[Any, ...]]) -> bool:
    """Whether the leaves' order is the one a caller writes them in: every node with two or
    more children is a list or tuple (jax orders a dict's entries by sorted key, a custom
    node's as it flattens them)."""
    from jax import tree_util

    children: dict[tuple[Any, ...], set[Any]] = {}
    for key in keys:
        for depth, entry in enumerate(key):
            if not isinstance(entry, tree_util.SequenceKey):
                children.setdefault(key[:depth], set()).add(entry)
    return all(len(c) < 2 for c in children.values())


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


def _argument_keys(in_tree: Any, n: int, skip: int = 1) -> list[tuple[Any, ...]] | None:
    """Key paths of the leaves of the arguments after the first ``skip``, each starting with
    the argument's index; None when a custom node cannot be rebuilt from placeholders."""
    from jax import tree_util

    try:
        keys: list[tuple[Any, ...]] = []
        for i, tree in enumerate(_argument_trees(in_tree, skip)):
            leaves = tree_util.tree_flatten_with_path(
                tree_util.tree_unflatten(tree, [0] * tree.num_leaves)
            )[0]
            keys += [(tree_util.SequenceKey(i), *k) for k, _ in leaves]
    except Exception:  # a custom node that cannot be rebuilt from placeholders
        return None
    return keys if len(keys) == n else None


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
                raise RunError(f"{path}: {takes}; the file holds {got}{_naming(specs)}")
            pairs = [(headers[key], spec) for key, spec in zip(order, specs, strict=True)]
            for header, spec in pairs:
                _check_header(header, spec, takes)
            return [_as_input(_npz.read(archive, h, path), s) for h, s in pairs]
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
        raise RunError(f"{path} is not an .npz file (write one with numpy.savez): {e}") from None


def _takes(what: str, specs: Sequence[InputSpec]) -> str:
    listed = "; ".join(map(str, specs)) or "nothing"
    return f"{what} takes {len(specs)} input(s): {listed}"


def _naming(specs: Sequence[InputSpec]) -> str:
    """How the inputs may be named, for a refusal."""
    if not specs:
        return ""
    names = [s.name or s.path for s in specs]
    ways = f"; name the arrays {', '.join(names)}" + (
        f" (or by path: {', '.join(s.path for s in specs)})"
        if names != [s.path for s in specs]
        else ""
    )
    if specs[0].positional:
        numbered = "arr_0" if len(specs) == 1 else f"arr_0..arr_{len(specs) - 1} in that order"
        return ways + f", or {numbered}"
    return ways + " (arr_0, arr_1, ... would be a guess: jax orders a dict's keys sorted)"


def _aliases(index: int, spec: InputSpec) -> set[str]:
    names = {spec.path}
    if spec.name:
        names.add(spec.name)
    if spec.positional:
        names.add(f"arr_{index}")
    return names


def _order(keys: list[str], specs: Sequence[InputSpec]) -> list[str] | None:
    """The file's keys in the method's input order, each binding exactly one input by its
    path, its name or (where not a guess) its position; None when they do not bind every
    input exactly once."""
    aliases = [_aliases(i, s) for i, s in enumerate(specs)]
    bound: list[str | None] = [None] * len(specs)
    for key in keys:
        matches = [i for i, names in enumerate(aliases) if key in names]
        if len(matches) != 1 or bound[matches[0]] is not None:
            return None
        bound[matches[0]] = key
    if any(b is None for b in bound):
        return None
    return [b for b in bound if b is not None]


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
    from jaxport.export._internal import numpy_dtype

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


def call_function(exp: Any, inputs: Sequence[Any], *, jit: bool = False) -> Any:
    """A function archive's ``exp.call`` (with ``jit``: ``jax.jit(exp.call)``, what ``jaxport
    compile`` compiles) on the flat ``inputs``, rebuilt into its positional arguments.

    Raises:
        RunError: jax refused the call (as ``call_method``).
    """
    import jax

    fun = jax.jit(exp.call) if jit else exp.call
    return _call(fun, _arguments(exp.in_tree, inputs, skip=0), f"function {exp.fun_name!r}")


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
        from jaxport.export._internal import translate_call_error

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


# -- the call, in a child process killed at its time limit ----------------------------------

#: Seconds ``jaxport run`` lets the call take by default (``--timeout``).
DEFAULT_RUN_TIMEOUT = 600.0
#: Exit status of the child when jaxport refused the call (the error is in ``error.json``).
_REFUSED = 2


def call_in_child(
    archive: Path,
    method: str | None,
    inputs: Path,
    *,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    allow_custom_calls: Sequence[str] = (),
    compiled_cache: str | None = None,
    report: dict[str, Any] | None = None,
) -> tuple[bytes, list[OutputSummary]]:
    """``method`` of the model archive at ``archive`` (None: the function archive itself) on
    the ``.npz`` at ``inputs``, called in a child process (``jaxport._run_child``) that is
    killed after ``timeout`` seconds and dies with this process (``jaxport._children``).

    A call cannot be interrupted within jax (a module that loops runs until it ends), so it
    runs where a deadline can be enforced: the child reads the archive and the inputs again,
    as ``load``/``load_model`` and ``load_inputs`` do here, under the allow-listed
    environment (``jaxport._environ``), and writes its outputs to a file. It has no
    address-space limit (a GPU runtime maps far more than it uses), as the call had none here.

    ``compiled_cache`` (``run --use-compiled``): jax's persistent compilation cache directory
    the child uses (verified compiled sets written there, ``Registry.use_compiled``), with
    XLA's own caches off as where they were compiled; a function is then called as
    ``jax.jit(exp.call)``, and ``report["cache_hits"]`` says how many compiles of the child
    were cache hits.

    Returns:
        ``(npz_bytes, summaries)``: the outputs as ``output_bytes`` writes them and as
        ``summarize`` shows them.

    Raises:
        TimeLimitError: the call did not end within ``timeout`` seconds; it was killed.
        RunError: the child crashed (a signal, its memory limit), or refused the call as
            ``call_method`` does; another ``JaxportError`` the child raised is raised again
            as its class where its message alone rebuilds it.
    """
    import json
    import subprocess
    import sys
    import tempfile

    from jaxport import _children
    from jaxport._environ import worker_environment
    from jaxport._errors import TimeLimitError

    what = "the function" if method is None else f"method {method!r}"
    with tempfile.TemporaryDirectory(prefix="jaxport-run-") as tmp:
        work = Path(tmp)
        request = {
            "archive": str(Path(archive).resolve()),
            "method": method,
            "inputs": str(Path(inputs).resolve()),
            "allow_custom_calls": list(allow_custom_calls),
            "use_compiled": compiled_cache is not None,
        }
        (work / "request.json").write_text(json.dumps(request))
        cmd = [sys.executable, "-I", "-m", "jaxport._run_child", str(work)]
        env = worker_environment()
        if compiled_cache is not None:
            env["JAX_COMPILATION_CACHE_DIR"] = compiled_cache
            env["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] = "none"  # _compile_child.XLA_CACHES
        try:
            done = _children.run(cmd, timeout=timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise TimeLimitError(
                f"{what} did not finish within {timeout:g} s and was stopped (raise the limit "
                "with --timeout SECONDS)",
                seconds=timeout,
            ) from None
        except OSError as e:
            raise RunError(f"{what} could not be run: {sys.executable}: {e.strerror}") from None
        if done.returncode == _REFUSED and (work / "error.json").is_file():
            raise _rebuilt(json.loads((work / "error.json").read_text()))
        if done.returncode != 0:
            from jaxport.export._internal import converter_status

            lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
            tail = f": {lines[-1][:300]}" if lines else ""
            status = converter_status(done.returncode).replace("the converter", "it")
            raise RunError(f"{what} crashed: {status}{tail}")
        summaries = json.loads((work / "summaries.json").read_text())
        if report is not None and (work / "compiled.json").is_file():
            report.update(json.loads((work / "compiled.json").read_text()))
        return (work / "out.npz").read_bytes(), [_summary(s) for s in summaries]


def _summary(fields: dict[str, Any]) -> OutputSummary:
    first = tuple(fields["first"])
    return OutputSummary(
        fields["name"], tuple(fields["shape"]), fields["dtype"], fields["min"], fields["max"], first
    )


def _rebuilt(error: dict[str, Any]) -> JaxportError:
    """The child's ``JaxportError`` as its own class where its message (and the attributes
    the child sent) rebuild it, else as a ``RunError`` naming that class."""
    from jaxport import _errors

    name, message = str(error.get("type")), str(error.get("message"))
    cls = getattr(_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, JaxportError):
        attributes = error.get("attributes") or {}
        for kwargs in (attributes, {}):
            try:
                rebuilt = cls(message, **kwargs)
            except TypeError:
                continue
            rebuilt.args = (message,)  # as the child wrote it (a path is not appended twice)
            return rebuilt
    return RunError(f"{name}: {message}")
