"""The child of a fleet rescue for a model archive (``registry/_reexport_model.py``): writes the
model again under the jax release of the interpreter it runs in, its tensors untouched.

``PYTHON -I -m jaxport._reexport_model_child WORKDIR MEMORY_LIMIT`` sets an address-space
limit before importing jax, then reads from ``WORKDIR``:

- ``in.jaxport``: the source model archive. Only its skeleton (header and modules' section) is
  read to write the new archive (``export/_model_rewrite.py``): each method's modules are
  re-serialized as this jax serializes its own exports and given named shardings where they
  are in the HloSharding form only (``jaxport/_reexport_common.py``, as for a function);
  each tensor's stored section is copied a bounded slice at a time, byte for byte;
- ``golden.npz`` (optional): the source version's golden examples (a model's, per method);
- ``request.json``: the custom-call targets the registry admitted, the source's sha256;

and writes into it ``archive.jaxport``, ``examples.npz`` (only for the own check: per method,
deterministic arguments, ``_rescue_child.check_inputs``, with the *source's* outputs on
them) and ``facts.json`` (as the function child's: ``jax``, ``jaxlib``, ``module``,
``shardings``, ``check``, ``reason``, ``compared``).

The check loads the archives memory-mapped (``jaxport.load_model``): its tensors are read
when the methods run, as an audit reads them (``jaxport.audit.audit_archive``).

Exit status 0: written (whatever the check says); 3: the source cannot be read here; 4: what
was read cannot be written again here (the error on stdout). What it shares with the function's
child (``jaxport/_reexport_child.py``) is ``jaxport/_reexport_common.py``.
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path
from typing import Any

from jaxport._reexport_common import NOT_READ, NOT_WRITTEN

__all__ = ["NotWritten", "rewrite"]


class NotWritten(Exception):
    """What the source's methods became cannot be written by this jax (the reason)."""


def rewrite(
    source: Path, target: Path, allowed: list[str], metadata: dict[str, str]
) -> tuple[Any, str, str]:
    """Writes the model at ``source`` again into ``target`` with its methods re-serialized
    (``metadata`` added to its own); the source's header and what was done to its modules and
    shardings.

    Raises:
        JaxportError, ValueError: the source cannot be read, or a sharding cannot be named
            (``_reexport_common.named_shardings``).
        NotWritten: what was read cannot be written again by this jax.
    """
    from jaxport._errors import JaxportError
    from jaxport._reexport_common import named_shardings, refreshed, said
    from jaxport.export._internal import read_skeleton, rewritten_chunks

    fd = os.open(source, os.O_RDONLY)
    try:
        total = os.fstat(fd).st_size
        header = read_skeleton(fd, total, allow_custom_calls=allowed, path=str(source))
        exported, modules, shardings = {}, set(), set()
        for name, exp in header.exported.items():
            named, sharding = named_shardings(exp)
            exported[name], module = refreshed(named)
            modules.add(module)
            shardings.add(sharding)
        chunks = rewritten_chunks(fd, header, exported, {**header.metadata, **metadata})
        try:
            with target.open("wb") as out:
                for chunk in chunks:
                    out.write(chunk)
        except JaxportError as e:
            raise NotWritten(said(e)) from None
    finally:
        os.close(fd)
    return header, _said(modules), _said(shardings)


def _said(notes: set[str]) -> str:
    """One note for every method: the one they share, else each (sorted)."""
    return "; ".join(sorted(notes))


def _mapped(path: Path) -> memoryview:
    with path.open("rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _own_examples(source: Any) -> bytes:
    """Per method, ``check_inputs`` of its arguments and the source model's outputs on them."""
    import jax
    import numpy as np
    from jax import tree_util

    from jaxport._rescue_child import check_inputs
    from jaxport.audit import encode_model_examples

    n = len(source.tensors)
    by_method = {}
    for name, exp in source.exported.items():
        inputs = check_inputs(exp.in_avals[n:])
        arg_trees = tree_util.treedef_children(tree_util.treedef_children(exp.in_tree)[0])[1:]
        args = tree_util.tree_unflatten(tree_util.treedef_tuple(arg_trees), inputs)
        outputs = [np.asarray(x) for x in jax.tree.leaves(source.methods[name](*args))]
        by_method[name] = [(inputs, outputs)]
    return encode_model_examples(by_method)


def _check(header: Any, work: Path, allowed: list[str]) -> dict[str, Any]:
    """The goldens, else the source's outputs on deterministic arguments (``examples.npz``),
    re-run on ``archive.jaxport`` by an audit; the check's facts. A method with symbolic
    input shapes has no deterministic arguments: only goldens check it (their shapes)."""
    from jaxport._reexport_common import audited, source_failed
    from jaxport._rescue_child import skip_reason
    from jaxport.audit import decode_model_examples
    from jaxport.export import load_model
    from jaxport.export._internal import local_device_count, local_platform

    here = local_platform()
    devices = local_device_count(here)
    golden = work / "golden.npz"
    for name, exp in sorted(header.exported.items()):
        reason = skip_reason(exp, here, devices)
        if reason is not None and not (golden.exists() and reason.startswith("symbolic")):
            return {"check": "not-run", "reason": f"method {name}: {reason}", "compared": 0}
    if golden.exists():
        blob, kind = golden.read_bytes(), "golden"
    else:
        try:
            source = load_model(work / "in.jaxport", allow_custom_calls=allowed,
                                outside_window="allow")  # fmt: skip
            blob = _own_examples(source)
        except Exception as e:  # what jax raises running a module is not a fixed set
            return source_failed(e)
        kind = "own"
        (work / "examples.npz").write_bytes(blob)
    archive: Any = _mapped(work / "archive.jaxport")  # tensors mapped, read as methods run
    count = sum(len(pairs) for pairs in decode_model_examples(blob).values())
    return audited(archive, blob, kind, count)


def _child(workdir: str, memory_limit: int) -> int:
    from jaxport._reexport_common import finish, said, start

    asked = start(workdir, memory_limit)  # before jax is imported

    from jaxport._errors import JaxportError
    from jaxport.export import load_model

    target = asked.work / "archive.jaxport"
    try:
        header, module, shardings = rewrite(
            asked.work / "in.jaxport", target, asked.allowed, asked.metadata
        )
    except NotWritten as e:
        print(e)
        return NOT_WRITTEN
    except (JaxportError, ValueError) as e:
        print(said(e))
        return NOT_READ
    try:
        load_model(target, allow_custom_calls=asked.allowed)  # through the format, as a user will
    except JaxportError as e:
        print(said(e))
        return NOT_WRITTEN
    return finish(asked.work, module, shardings, _check(header, asked.work, asked.allowed))


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], int(sys.argv[2])))
