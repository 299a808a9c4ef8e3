"""The child of a fleet rescue (``registry/_reexport.py``): re-exports one jaxport archive under
the jax release of the interpreter it runs in, no pickling.

``PYTHON -I -m jaxport._reexport_child WORKDIR MEMORY_LIMIT`` sets an address-space limit
before importing jax, then reads from ``WORKDIR``:

- ``in.jaxport``: the source archive (read with jaxport's own decoder, ``outside_window=
  "allow"``, accepting the custom-call targets in ``request.json``: those the registry
  admitted at its push);
- ``golden.npz`` (optional): the source version's golden examples (``audit/_examples.py``).

and writes into it:

- ``archive.jaxport``: the same function written again by this jax: its module deserialized
  and serialized as this jax serializes its own exports (``_export._module_to_bytecode``, the
  StableHLO version jax targets), its VJPs likewise; shardings stored in the HloSharding form
  only (jax < 0.9) are given their named form where it says the same (checked with jax's own
  ``named_to_hlo_sharding``). The header then names this jax as the producer;
- ``examples.npz`` (only for the own check): the deterministic inputs
  (``_rescue_child.check_inputs``) with the *source's* outputs on them;
- ``facts.json``: ``jax``, ``jaxlib``, ``module`` (what happened to the modules),
  ``shardings``, ``check`` (``"golden"``: the goldens reproduce; ``"own"``: the re-export
  computes what the source computes on deterministic inputs; ``"not-run"``; ``"mismatch"``;
  ``"error"``), ``reason`` and ``compared`` (examples compared).

Exit status 0: written (whatever the check says); 3: the source cannot be read here (the error
on stdout); 4: it cannot be written again here (the error on stdout). What it shares with the
model's child (``jaxport/_reexport_model_child.py``) is ``jaxport/_reexport_common.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from jaxport._reexport_common import NOT_READ, NOT_WRITTEN, SOURCE_KEY

__all__ = ["NOT_READ", "NOT_WRITTEN", "SOURCE_KEY"]


def _run(exported: Any, leaves: list[Any]) -> list[Any]:
    import numpy as np

    from jaxport._rescue_child import _run as run_placed

    return [np.asarray(x) for x in run_placed(exported, leaves)]


def _check(source: Any, archive: bytes, work: Path) -> dict[str, Any]:
    """The goldens (``golden.npz``), else the source's outputs on deterministic inputs
    (written as ``examples.npz``), re-run on the re-export ``archive`` by an audit
    (``jaxport.audit.audit_archive``: loaded, compiled, placed, compared within its
    tolerance); the check's facts."""
    from jaxport._reexport_common import audited, source_failed
    from jaxport._rescue_child import check_inputs, skip_reason
    from jaxport.audit import decode_examples, encode_examples
    from jaxport.export._internal import local_device_count, local_platform

    here = local_platform()
    reason = skip_reason(source, here, local_device_count(here))
    if reason is not None:
        return {"check": "not-run", "reason": reason, "compared": 0}
    golden = work / "golden.npz"
    if golden.exists():
        blob, kind = golden.read_bytes(), "golden"
    else:
        inputs = check_inputs(source.in_avals)
        try:
            wanted = _run(source, inputs)
        except Exception as e:  # what jax raises running a module is not a fixed set
            return source_failed(e)
        blob, kind = encode_examples([(inputs, wanted)]), "own"
        (work / "examples.npz").write_bytes(blob)
    return audited(archive, blob, kind, len(decode_examples(blob)))


def _child(workdir: str, memory_limit: int) -> int:
    from jaxport._reexport_common import finish, named_shardings, refreshed, said, start

    asked = start(workdir, memory_limit)  # before jax is imported

    from jaxport._errors import JaxportError
    from jaxport.export import dumps, inspect, loads

    data = (asked.work / "in.jaxport").read_bytes()
    try:
        order = inspect(data).vjp_order
        source = loads(data, allow_custom_calls=asked.allowed, outside_window="allow")
        named, shardings = named_shardings(source)
        rescued, module = refreshed(named)
    except (JaxportError, ValueError) as e:
        print(said(e))
        return NOT_READ
    try:
        archive = dumps(rescued, vjp_order=order, metadata=asked.metadata)
        loads(archive, allow_custom_calls=asked.allowed)  # through the format, as a user will
    except JaxportError as e:
        print(said(e))
        return NOT_WRITTEN
    (asked.work / "archive.jaxport").write_bytes(archive)
    return finish(asked.work, module, shardings, _check(source, archive, asked.work))


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], int(sys.argv[2])))
