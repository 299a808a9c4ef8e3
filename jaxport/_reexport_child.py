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
on stdout); 4: it cannot be written again here (the error on stdout).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
from pathlib import Path
from typing import Any

__all__ = ["NOT_READ", "NOT_WRITTEN", "SOURCE_KEY"]

#: Exit status: this jax cannot read the source archive (``registry/_reexport.py`` has the same).
NOT_READ = 3
#: Exit status: what was read cannot be written again here.
NOT_WRITTEN = 4
#: Archive metadata naming the archive a rescue re-exported (its sha256).
SOURCE_KEY = "jaxport.rescued_from"


def _refresh(exported: Any) -> tuple[Any, str]:
    """``exported`` with its module serialized as this jax serializes its own (and its VJPs,
    when asked for), and what was done (``export/_modules.reserialized``)."""
    from jaxport.export._internal import reserialized

    data = reserialized(bytes(exported.mlir_module_serialized))
    get_vjp = exported._get_vjp
    refreshed_vjp = None if get_vjp is None else (lambda _e: _refresh(get_vjp(exported))[0])
    changed = dataclasses.replace(exported, mlir_module_serialized=data, _get_vjp=refreshed_vjp)
    same = data == bytes(exported.mlir_module_serialized)
    return changed, "unchanged (already this jax's serialization)" if same else "re-serialized"


def _named_shardings(exported: Any) -> tuple[Any, str]:
    """``exported`` with named shardings derived from HloSharding-only ones, where it has such
    shardings for several devices; what was done.

    Raises:
        ValueError: a sharding this derivation cannot express (the reason says which).
    """
    names_in = getattr(exported, "_in_named_shardings", None)
    if names_in is None:
        return exported, "this jax has no named shardings: HloSharding form kept"
    hlo = (*exported.in_shardings_hlo, *exported.out_shardings_hlo)
    named = (*names_in, *exported._out_named_shardings)
    if exported.nr_devices <= 1 or all(h is None for h in hlo) or any(n is not None for n in named):
        return exported, "as stored"
    avals = (*exported.in_avals, *exported.out_avals)
    derived = [_named_of(h, a, exported.nr_devices) for h, a in zip(hlo, avals, strict=True)]
    n_in = len(exported.in_avals)
    fields: dict[str, Any] = {"_in_named_shardings": tuple(derived[:n_in]),
                              "_out_named_shardings": tuple(derived[n_in:])}  # fmt: skip
    if hasattr(exported, "_has_named_shardings"):  # jax 0.9 .. 0.11.0
        fields["_has_named_shardings"] = True
    changed = dataclasses.replace(exported, **fields)
    return changed, "named form derived from the HloSharding form (jax < 0.9)"


def _named_of(hlo: Any, aval: Any, nr_devices: int) -> Any:
    """A NamedSharding over an abstract mesh saying what ``hlo`` says for ``aval``: replicated,
    or tiled over devices in order, one mesh axis per tiled dimension.

    Raises:
        ValueError: another form (device order, partial replication, subgroups).
    """
    if hlo is None:
        return None
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    from jaxport.export._internal import named_to_hlo_sharding

    if hlo.is_replicated():
        dims: list[int] = []
    elif hlo.is_tiled() and list(hlo.tile_assignment_devices()) == list(range(nr_devices)):
        dims = list(hlo.tile_assignment_dimensions())
    else:
        raise ValueError(f"an HloSharding this rescue cannot name: {hlo}")
    sizes = tuple(d for d in dims if d > 1) or (nr_devices,)
    names = tuple(f"rescue{i}" for i in range(len(sizes)))
    mesh = AbstractMesh(sizes, names)
    axes = iter(names)
    spec = PartitionSpec(*(next(axes) if d > 1 else None for d in dims[: len(aval.shape)]))
    named = NamedSharding(mesh, spec)
    if named_to_hlo_sharding(named, aval) != hlo:
        raise ValueError(f"no named form says what {hlo} says")
    return named


def _run(exported: Any, leaves: list[Any]) -> list[Any]:
    import numpy as np

    from jaxport._rescue_child import _run as run_placed

    return [np.asarray(x) for x in run_placed(exported, leaves)]


def _check(source: Any, archive: bytes, work: Path) -> dict[str, Any]:
    """The goldens (``golden.npz``), else the source's outputs on deterministic inputs
    (written as ``examples.npz``), re-run on the re-export ``archive`` by an audit
    (``jaxport.audit.audit_archive``: loaded, compiled, placed, compared within its
    tolerance); the check's facts."""
    from jaxport._rescue_child import check_inputs, skip_reason
    from jaxport.audit import audit_archive, decode_examples, encode_examples
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
            return {"check": "error", "reason": f"the source: {type(e).__name__}: {e}"[:400],
                    "compared": 0}  # fmt: skip
        blob, kind = encode_examples([(inputs, wanted)]), "own"
        (work / "examples.npz").write_bytes(blob)
    result = audit_archive(archive, platform=here, examples=blob)
    count = len(decode_examples(blob))
    if result.status != "ok":
        check = "mismatch" if result.status == "mismatch" else "error"
        return {"check": check, "reason": f"{result.status}: {result.reason}", "compared": count}
    return {"check": kind, "reason": None, "compared": count}


def _child(workdir: str, memory_limit: int) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    import importlib.metadata

    import jax

    from jaxport._errors import JaxportError
    from jaxport._rescue_child import RESCUED_KEY
    from jaxport.export import dumps, inspect, loads

    work = Path(workdir)
    data = (work / "in.jaxport").read_bytes()
    request = json.loads((work / "request.json").read_text())
    allowed = [str(t) for t in request["allow_custom_calls"]]
    try:
        order = inspect(data).vjp_order
        source = loads(data, allow_custom_calls=allowed, outside_window="allow")
        named, shardings = _named_shardings(source)
        rescued, module = _refresh(named)
    except (JaxportError, ValueError) as e:
        print(f"{type(e).__name__}: {str(e)[:300]}")
        return NOT_READ
    meta = {RESCUED_KEY: f"jax {jax.__version__}", SOURCE_KEY: str(request["source_digest"])}
    try:
        archive = dumps(rescued, vjp_order=order, metadata=meta)
        loads(archive, allow_custom_calls=allowed)  # through the format, as a user will
    except JaxportError as e:
        print(f"{type(e).__name__}: {str(e)[:300]}")
        return NOT_WRITTEN
    (work / "archive.jaxport").write_bytes(archive)
    facts = {
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "module": module,
        "shardings": shardings,
        **_check(source, archive, work),
    }
    (work / "facts.json").write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], int(sys.argv[2])))
