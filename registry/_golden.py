"""A version's golden examples as one blob: ``(digest, npz bytes)`` with every output given.

``push`` stores the calls a producer vouches for (``Example(args, kwargs, outputs)``) beside the
archives, and audits re-run them. Outputs not given are computed by a variant that runs in this
process (``runs_here``), placed with its shardings as audits place them. A push through a
registry server computes them on the client (where the producer's jax runs the module it
wrote), sends the blob like any part, and the server reads it back with
``examples_from_blob`` (``np.load`` without pickles), so no module runs in the server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxport import InvalidNameError, UnsupportedFeatureError

__all__ = [
    "MAX_EXAMPLES_BYTES",
    "StoredExamples",
    "StoredModelExamples",
    "check_examples",
    "examples_from_blob",
    "golden_blob",
    "runs_here",
]

_MODEL = "model"
#: The largest examples blob a registry server reads from a client (bytes): its arrays are
#: held in memory while they are checked. Golden examples are a few calls' inputs and outputs.
MAX_EXAMPLES_BYTES = 256 << 20


def check_examples(info: Any, examples: Any) -> None:
    """A model's examples are ``{method: [Example, ...]}`` for methods it has (``info``: its
    ``ArchiveInfo``), a function's a sequence.

    Raises:
        InvalidNameError: the examples do not fit the archive's kind or methods.
    """
    if info.kind != _MODEL:
        if isinstance(examples, Mapping):
            raise InvalidNameError("a function's examples are a sequence, not a mapping")
        return
    if not isinstance(examples, Mapping):
        raise InvalidNameError("a model's examples are {method: [Example, ...]}")
    methods = {m.name for m in info.methods}
    unknown = sorted(set(examples) - methods)
    if unknown:
        raise InvalidNameError(
            f"examples name methods {unknown} the model does not have ({sorted(methods)})"
        )


def golden_blob(
    kind: str, examples: Any, runner: Callable[[], Any], tolerance: Any = None
) -> tuple[str, bytes]:
    """``(sha256, npz bytes)`` of ``examples`` (``kind``: ``"function"`` or ``"model"``).

    Args:
        runner: called once, and only if an example lacks its outputs: an ``Exported``
            (function) or ``Model`` that runs here, or None.
        tolerance: the audits' tolerance override (``push(..., tolerance=...)``; checked by
            ``jaxport.audit._examples.check_tolerance``), stored in the blob; None: the one
            ``examples`` carries when read back from a blob (``StoredExamples``), else none.

    Raises:
        UnsupportedFeatureError: an output is missing and nothing here runs the archive.
        InvalidNameError: a model method's example with keyword arguments; a malformed
            ``tolerance``.
    """
    from jaxport.audit import check_tolerance

    override = check_tolerance(
        tolerance if tolerance is not None else getattr(examples, "tolerance", None)
    )
    if kind == _MODEL:
        return _model_blob(examples, _Once(runner), override)
    import jax

    from jaxport.audit import Example, encode_examples

    run = _Once(runner)
    flat = []
    for example in examples:
        ex = example if isinstance(example, Example) else Example(*example)
        ins = jax.tree.leaves((tuple(ex.args), dict(ex.kwargs)))
        outputs = ex.outputs
        if outputs is None:
            outputs = _call_placed(run.get("jaxport.Example(args, kwargs, outputs)"), ins)
        flat.append((ins, jax.tree.leaves(outputs)))
    data = encode_examples(flat, override)
    return hashlib.sha256(data).hexdigest(), data


class StoredExamples(list):  # type: ignore[type-arg]
    """A function's examples read back from a blob, with the blob's tolerance override
    (``tolerance``: a ``Tolerance`` or None), so that pushing them again stores the same blob."""

    tolerance: Any = None


class StoredModelExamples(dict):  # type: ignore[type-arg]
    """A model's examples read back from a blob (``{method: [Example, ...]}``), with the
    blob's tolerance override."""

    tolerance: Any = None


def examples_from_blob(kind: str, data: bytes) -> Any:
    """The examples of a blob ``golden_blob`` made, every output given: a list of ``Example``
    (function; flat arguments) or ``{method: [Example, ...]}`` (model).

    Raises:
        CorruptArchiveError: not an examples blob (``audit/_examples.py`` reads it without
            trusting it: stored entries only, each its declared length, no pickles).
    """
    from jaxport.audit import Example, decode_examples, decode_model_examples, decode_tolerance

    found: StoredExamples | StoredModelExamples
    if kind == _MODEL:
        found = StoredModelExamples(
            (method, [Example(tuple(ins), {}, outs) for ins, outs in pairs])
            for method, pairs in decode_model_examples(data).items()
        )
    else:
        found = StoredExamples(Example(tuple(ins), {}, outs) for ins, outs in decode_examples(data))
    found.tolerance = decode_tolerance(data)
    return found


def runs_here(info: Any) -> bool:
    """Whether a variant runs in this process: exported for its platform, for at most as many
    devices as it has (a sharded variant on ``--xla_force_host_platform_device_count`` CPUs
    included)."""
    from jaxport.export._internal import local_device_count, local_platform

    here = local_platform()
    return here in info.platforms and info.nr_devices <= local_device_count(here)


class _Once:
    """``runner()`` called at most once; ``get`` raises where it gives None."""

    def __init__(self, runner: Callable[[], Any]):
        self._runner, self._called, self._value = runner, False, None

    def get(self, form: str) -> Any:
        if not self._called:
            self._value, self._called = self._runner(), True
        if self._value is None:
            raise UnsupportedFeatureError(
                f"no variant runs here to compute the examples' outputs: pass {form} with "
                "the producer's outputs (outputs are computed only by an Exported or Model "
                "passed to push, never by archive bytes or a file, whose modules are not "
                "the caller's code)"
            )
        return self._value


def _call_placed(exp: Any, leaves: list[Any]) -> Any:
    """``exp`` called on flat inputs, placed with its shardings on the local devices when it
    is sharded (as audits call it)."""
    import jax

    from jaxport.export._internal import in_shardings_on

    if exp.nr_devices > 1:
        shardings = in_shardings_on(exp, jax.local_devices())
        leaves = [
            a if s is None else jax.device_put(a, s) for a, s in zip(leaves, shardings, strict=True)
        ]
    args, kwargs = jax.tree.unflatten(exp.in_tree, leaves)
    return exp.call(*args, **kwargs)


def _model_blob(
    examples: Mapping[str, Sequence[Any]], run: _Once, override: Any
) -> tuple[str, bytes]:
    """A model's examples per method: the method's own arguments (no parameters) and its
    outputs."""
    import jax

    from jaxport.audit import Example, encode_model_examples

    by_method = {}
    for name, calls in examples.items():
        flat = []
        for call in calls:
            ex = call if isinstance(call, Example) else Example(*call)
            if ex.kwargs:
                raise InvalidNameError(f"method {name!r} takes positional arguments only")
            outputs = ex.outputs
            if outputs is None:
                outputs = run.get("jaxport.Example(args, {}, outputs)").methods[name](*ex.args)
            flat.append((jax.tree.leaves(tuple(ex.args)), jax.tree.leaves(outputs)))
        by_method[name] = flat
    data = encode_model_examples(by_method, override)
    return hashlib.sha256(data).hexdigest(), data
