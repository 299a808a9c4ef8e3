"""The child of ``jaxport.rescue``: runs in another jax release's interpreter, no pickling.

``PYTHON -I -m jaxport._rescue_child IN WORKDIR MEMORY_LIMIT``: sets an address-space limit
before importing jax, reads ``IN`` (jax-native ``Exported.serialize()`` bytes) with *that*
interpreter's ``jax.export.deserialize``, and writes into ``WORKDIR``:

- ``archive.jaxport``: ``jaxport.dumps(exp, vjp_order=N)`` (every VJP order the bytes carry,
  at most ``MAX_NATIVE_VJP_ORDER``), with metadata ``jaxport.converted_from=jax-native``,
  ``jaxport.rescued_with=jax X`` (the converter: the release that read it and wrote the
  archive, whose header therefore names it) and ``jaxport.original_writer`` (what the bytes
  say of the jax that wrote them: jax's native format does not name its release, so the
  calling convention version, the releases that export it, and the module's StableHLO);
- ``examples.npz`` (only when the check ran): one golden example, the inputs of
  ``check_inputs`` and the outputs this jax computed (``audit/_examples.py`` format,
  ``allow_pickle=False``);
- ``facts.json``: what it saw (``jax``, ``jaxlib``, ``vjp_order``, ``platforms``,
  ``nr_devices``, ``fun_name``, ``check`` -- ``"recorded"``, ``"not-run"`` or ``"error"`` --
  ``reason``, ``original_writer`` and ``converter``).

Exit status 0: done (whatever the check's status); 3: jax's reader refused the bytes (its
type name on stdout); 4: jaxport cannot store what jax read (the error on stdout).
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "NOT_NATIVE",
    "NOT_STORABLE",
    "RESCUED_KEY",
    "WRITER_KEY",
    "check_inputs",
    "original_writer",
    "skip_reason",
]

#: Exit status when jax's reader refused the bytes.
NOT_NATIVE = 3
#: Exit status when ``dumps`` refused what jax read.
NOT_STORABLE = 4
#: Metadata key naming the jax release that read the bytes (``"jax 0.10.2"``).
RESCUED_KEY = "jaxport.rescued_with"
#: Metadata key saying what is known of the jax that wrote the jax-native bytes.
WRITER_KEY = "jaxport.original_writer"


def original_writer(exported: Any) -> str:
    """What a jax-native Exported says of the jax that wrote it: its format names no release,
    so its calling convention version (and the releases that export it) and its module's
    StableHLO version (the producer string of its bytecode)."""
    from jaxport.export._internal import releases_exporting

    cc = int(exported.calling_convention_version)
    data = bytes(exported.mlir_module_serialized)
    start = data.find(b"StableHLO_v")
    end = data.find(b"\0", start) if start >= 0 else -1
    shlo = data[start + len(b"StableHLO_v") : end].decode(errors="replace")[:40] if end > 0 else ""
    module = f", module in StableHLO {shlo}" if shlo else ""
    return (
        f"an unknown jax release (jax-native files do not name it): calling convention "
        f"version {cc} ({releases_exporting(cc)}){module}"
    )


def skip_reason(exported: Any, platform: str, devices: int) -> str | None:
    """Why ``exported`` cannot be run here to record outputs, else None.

    Args:
        exported: a ``jax.export.Exported``.
        platform: this process's platform (``"cpu"``, ``"cuda"``, ...).
        devices: how many devices of it this process has.
    """
    if any(not isinstance(d, int) for a in exported.in_avals for d in a.shape):
        return "symbolic input shapes: no concrete inputs to run it on"
    if platform not in exported.platforms:
        return f"exported for {', '.join(exported.platforms)}, this process has {platform}"
    if exported.nr_devices > devices:
        return f"needs {exported.nr_devices} {platform} devices, this process has {devices}"
    return None


def check_inputs(avals: Any) -> list[np.ndarray]:
    """Deterministic inputs for concrete ``avals`` (each has ``.shape`` and ``.dtype``).

    Per leaf, ``k = arange(size)``: bool ``k % 2 == 1``; integers ``k % 7`` (in range of
    every integer dtype); floating ``(k % 17 - 8) / 8`` (in [-1, 1], exact in every float
    format with 3 or more mantissa bits, so bfloat16 and float8 too); complex that plus
    ``0.5j`` times it; each reshaped to the aval's shape and cast to its dtype.

    Returns:
        One numpy array per aval, in order.
    """
    out = []
    for aval in avals:
        dtype = np.dtype(aval.dtype)
        size = int(np.prod(aval.shape, dtype=np.int64))
        k = np.arange(size, dtype=np.int64)
        if dtype.kind == "b":
            leaf = k % 2 == 1
        elif dtype.kind in "iu":
            leaf = k % 7
        else:
            real = ((k % 17) - 8) / 8.0
            leaf = real + 0.5j * real if dtype.kind == "c" else real
        out.append(np.asarray(leaf).astype(dtype).reshape(aval.shape))
    return out


def _run(exported: Any, leaves: list[np.ndarray]) -> list[np.ndarray]:
    """The flat outputs of ``exported`` on flat inputs, placed with its shardings when it is
    sharded (as audits place them)."""
    import jax

    from jaxport.export._internal import in_shardings_on

    placed: list[Any] = list(leaves)
    if exported.nr_devices > 1:
        shardings = in_shardings_on(exported, jax.local_devices())
        placed = [
            a if s is None else jax.device_put(a, s) for a, s in zip(leaves, shardings, strict=True)
        ]
    args, kwargs = jax.tree.unflatten(exported.in_tree, placed)
    return [np.asarray(x) for x in jax.tree.leaves(exported.call(*args, **kwargs))]


def _check(exported: Any, work: Path) -> tuple[str, str | None]:
    """Runs ``exported`` on ``check_inputs`` and writes ``examples.npz``; the check's status
    and reason."""
    from jaxport.audit import encode_examples
    from jaxport.export._internal import local_device_count, local_platform

    here = local_platform()
    reason = skip_reason(exported, here, local_device_count(here))
    if reason is not None:
        return "not-run", reason
    inputs = check_inputs(exported.in_avals)
    try:
        outputs = _run(exported, inputs)
    except Exception as e:  # what jax raises running a module is not a fixed set
        return "error", f"{type(e).__name__}: {str(e)[:300]}"
    (work / "examples.npz").write_bytes(encode_examples([(inputs, outputs)]))
    return "recorded", None


def _child(src: str, workdir: str, memory_limit: int) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    import importlib.metadata

    import jax

    from jaxport._errors import JaxportError
    from jaxport.export import dumps
    from jaxport.export._internal import CONVERTED_KEY, read_native

    work = Path(workdir)
    try:
        exported, order = read_native(Path(src))
    except Exception as e:  # jax's reader raises anything on bytes that are not its format
        print(f"{type(e).__name__}: {str(e)[:300]}")
        return NOT_NATIVE
    writer = original_writer(exported)
    meta = {CONVERTED_KEY: "jax-native", RESCUED_KEY: f"jax {jax.__version__}", WRITER_KEY: writer}
    try:
        archive = dumps(exported, vjp_order=order, metadata=meta)
    except JaxportError as e:
        print(f"{type(e).__name__}: {e}")
        return NOT_STORABLE
    (work / "archive.jaxport").write_bytes(archive)
    status, reason = _check(exported, work)
    facts = {
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "vjp_order": order,
        "platforms": list(exported.platforms),
        "nr_devices": int(exported.nr_devices),
        "fun_name": str(exported.fun_name),
        "check": status,
        "reason": reason,
        "original_writer": writer,
        "converter": f"jax {jax.__version__} (jaxlib {importlib.metadata.version('jaxlib')})",
    }
    (work / "facts.json").write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2], int(sys.argv[3])))
