"""What the two children of a fleet rescue share: ``jaxport/_reexport_child.py`` re-exports a
function archive, ``jaxport/_reexport_model_child.py`` a model's methods (its tensors copied).

Both run as ``PYTHON -I -m jaxport.<child> WORKDIR MEMORY_LIMIT`` in the jax release they write
for, read the same ``WORKDIR`` (``in.jaxport``, ``request.json``: the custom-call targets the
registry admitted and the source's sha256, ``golden.npz`` optionally) and end the same way:

- ``start``: the address-space limit set before jax is imported, the request read, the
  metadata every re-export carries (``RESCUED_KEY``, ``SOURCE_KEY``);
- ``refreshed`` and ``named_shardings``: an ``Exported``'s module serialized as this jax
  serializes its own, and its HloSharding-only shardings given their named form;
- ``audited``: the re-export checked by an audit against the goldens or the source's own
  outputs, as the check's facts (``check``, ``reason``, ``compared``);
- ``finish``: ``facts.json`` (``jax``, ``jaxlib``, ``module``, ``shardings`` and the check's);
- the exit statuses ``NOT_READ`` and ``NOT_WRITTEN`` (``registry/_reexport.py`` has the same),
  the error said on stdout by ``said``.
"""

from __future__ import annotations

import dataclasses
import json
import resource
from pathlib import Path
from typing import Any

__all__ = [
    "NOT_READ",
    "NOT_WRITTEN",
    "SOURCE_KEY",
    "Request",
    "audited",
    "finish",
    "named_shardings",
    "refreshed",
    "said",
    "source_failed",
    "start",
]

#: Exit status: this jax cannot read the source archive (``registry/_reexport.py`` has the same).
NOT_READ = 3
#: Exit status: what was read cannot be written again here.
NOT_WRITTEN = 4
#: Archive metadata naming the archive a rescue re-exported (its sha256).
SOURCE_KEY = "jaxport.rescued_from"


@dataclasses.dataclass(frozen=True)
class Request:
    """What a child was asked: its ``WORKDIR``, the custom-call targets the registry admitted
    at the source's push, and the metadata the re-export carries (this jax, the source)."""

    work: Path
    allowed: list[str]
    metadata: dict[str, str]


def start(workdir: str, memory_limit: int) -> Request:
    """Sets the address-space limit (``memory_limit`` bytes) before importing jax, then reads
    ``WORKDIR/request.json``."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    import jax

    from jaxport._rescue_child import RESCUED_KEY

    work = Path(workdir)
    request = json.loads((work / "request.json").read_text())
    source = str(request["source_digest"])
    meta = {RESCUED_KEY: f"jax {jax.__version__}", SOURCE_KEY: source}
    return Request(work, [str(t) for t in request["allow_custom_calls"]], meta)


def said(error: BaseException) -> str:
    """The line a child prints for an error that ends it: ``Type: message`` (300 characters)."""
    return f"{type(error).__name__}: {str(error)[:300]}"


def refreshed(exported: Any) -> tuple[Any, str]:
    """``exported`` with its module serialized as this jax serializes its own (and its VJPs,
    when asked for), and what was done (``export/_modules.reserialized``)."""
    from jaxport.export._internal import reserialized

    data = reserialized(bytes(exported.mlir_module_serialized))
    get_vjp = exported._get_vjp
    refreshed_vjp = None if get_vjp is None else (lambda _e: refreshed(get_vjp(exported))[0])
    changed = dataclasses.replace(exported, mlir_module_serialized=data, _get_vjp=refreshed_vjp)
    same = data == bytes(exported.mlir_module_serialized)
    return changed, "unchanged (already this jax's serialization)" if same else "re-serialized"


def named_shardings(exported: Any) -> tuple[Any, str]:
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


def source_failed(error: Exception) -> dict[str, Any]:
    """The check's facts when running the source for its own outputs raised ``error``."""
    reason = f"the source: {type(error).__name__}: {error}"[:400]
    return {"check": "error", "reason": reason, "compared": 0}


def audited(archive: Any, examples: bytes, kind: str, count: int) -> dict[str, Any]:
    """The re-export ``archive`` (bytes, or a mapped model) audited on this machine's platform
    against ``examples`` (``count`` of them; ``kind``: ``"golden"`` or ``"own"``): the check's
    facts. ``check`` is ``kind`` when the audit is ok, ``"mismatch"`` when its outputs differ
    beyond the audit's tolerance, else ``"error"``; ``reason`` says the audit's status and
    why."""
    from jaxport.audit import audit_archive
    from jaxport.export._internal import local_platform

    result = audit_archive(archive, platform=local_platform(), examples=examples)
    if result.status != "ok":
        check = "mismatch" if result.status == "mismatch" else "error"
        return {"check": check, "reason": f"{result.status}: {result.reason}", "compared": count}
    return {"check": kind, "reason": None, "compared": count}


def finish(work: Path, module: str, shardings: str, check: dict[str, Any]) -> int:
    """Writes ``WORKDIR/facts.json``: this jax and jaxlib, what was done to the modules and
    shardings, the check's facts; the exit status (0)."""
    import importlib.metadata

    import jax

    facts = {
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "module": module,
        "shardings": shardings,
        **check,
    }
    (work / "facts.json").write_text(json.dumps(facts))
    return 0
