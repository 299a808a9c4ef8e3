"""Re-export one jaxport archive under another jax release, in a child process of that release's
interpreter (``jaxport/_reexport_child.py``): what a fleet rescue does to each variant.

Nothing of the archive is parsed in this process but its header (``jaxport.inspect``, which
reads no module): the child reads it with jaxport's decoder under the managed environment's
jax, writes it again, and runs the check. Data crosses the boundary as files only (archives,
``.npz`` read with ``allow_pickle=False``, JSON); the child gets the allow-listed environment
(``jaxport/_environ.py``), an address-space limit and a time limit.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxport import JaxportError, UnsafeArchiveError, UnsupportedFeatureError

__all__ = [
    "NOT_READ",
    "NOT_WRITTEN",
    "ChildOutcome",
    "ReexportResult",
    "check_readable",
    "launch",
    "outcome",
    "reexport",
]

#: The child's exit statuses (``jaxport/_reexport_child.py`` defines the same; a test pins
#: them): the managed jax cannot read the archive; it cannot write what it read.
NOT_READ, NOT_WRITTEN = 3, 4

#: The child's address-space limit, bytes (as ``jaxport/_rescue.py``).
_MEMORY_LIMIT = 16 << 30


@dataclasses.dataclass(frozen=True)
class ChildOutcome:
    """What a re-export child said of one archive (its ``facts.json`` and recorded examples).

    Attributes:
        examples: golden examples recorded by the own check (inputs, the source's outputs;
            ``audit/_examples.py`` bytes), None when the goldens were re-run or nothing ran.
        jax_version: the child's jax; ``jaxlib_version`` its jaxlib.
        module: what was done to the modules (``"re-serialized"``, ...).
        shardings: what was done to the shardings.
        check: ``"golden"``, ``"own"`` (passed), ``"not-run"``, ``"mismatch"`` or ``"error"``.
        reason: why the check did not pass, else None.
        compared: how many examples were compared.
    """

    examples: bytes | None
    jax_version: str
    jaxlib_version: str
    module: str
    shardings: str
    check: str
    reason: str | None
    compared: int

    @property
    def passed(self) -> bool:
        """Whether the check ran and the re-export computes what it must."""
        return self.check in ("golden", "own")


@dataclasses.dataclass(frozen=True)
class ReexportResult(ChildOutcome):
    """What the child did to one function archive: ``archive``, the archive written by the
    child's jax (bytes), and the ``ChildOutcome``."""

    archive: bytes


def reexport(
    archive: bytes,
    *,
    source_digest: str,
    python: str,
    golden: bytes | None,
    allow_custom_calls: Sequence[str],
    timeout: float,
) -> ReexportResult:
    """Re-exports ``archive`` with the jax of ``python`` and checks it.

    Args:
        archive: a function's jaxport archive.
        source_digest: its sha256 (hex), recorded in the new archive's metadata.
        python: an interpreter with jax and this jaxport (a managed environment's).
        golden: the golden examples to re-run (``audit/_examples.py`` bytes), or None: the
            child compares the re-export with the source on deterministic inputs.
        allow_custom_calls: custom-call targets to accept (those the registry admitted).
        timeout: seconds the child may take.

    Raises:
        UnsupportedFeatureError: that jax cannot read the archive, or cannot write what it
            read; the archive the child wrote is not readable here.
        UnsafeArchiveError: the child crashed, ran out of memory or time.
    """
    with tempfile.TemporaryDirectory(prefix="jaxport-reexport-") as tmp:
        work = Path(tmp)
        (work / "in.jaxport").write_bytes(archive)
        launch(
            work, "jaxport._reexport_child", _MEMORY_LIMIT, python=python, golden=golden,
            allow_custom_calls=allow_custom_calls, source_digest=source_digest, timeout=timeout,
        )  # fmt: skip
        written = (work / "archive.jaxport").read_bytes()
        check_readable(written, source_digest)
        return ReexportResult(archive=written, **outcome(work))


def launch(
    work: Path, module: str, memory_limit: int, *, python: str, golden: bytes | None,
    allow_custom_calls: Sequence[str], source_digest: str, timeout: float,
) -> None:  # fmt: skip
    """Runs the child ``module`` on the directory ``work`` (its source as ``in.jaxport``), the
    golden examples and the request written beside it; ``memory_limit`` in bytes.

    Raises:
        UnsupportedFeatureError: that jax cannot read the archive, or cannot write what it read.
        UnsafeArchiveError: the child crashed, ran out of memory or time.
    """
    from jaxport.export._internal import run_converter

    if golden is not None:
        (work / "golden.npz").write_bytes(golden)
    request = {"allow_custom_calls": list(allow_custom_calls), "source_digest": source_digest}
    (work / "request.json").write_text(json.dumps(request))
    cmd = [python, "-I", "-m", module, str(work), str(memory_limit)]
    done = run_converter(cmd, timeout, lambda what: _unsafe(what, source_digest))
    _raise_for(done, source_digest)


def outcome(work: Path) -> dict[str, Any]:
    """The ``ChildOutcome`` fields of what a child that exited 0 left in ``work``."""
    facts: dict[str, Any] = json.loads((work / "facts.json").read_text())
    recorded = work / "examples.npz"
    return {
        "examples": recorded.read_bytes() if recorded.exists() else None,
        "jax_version": str(facts["jax"]),
        "jaxlib_version": str(facts["jaxlib"]),
        "module": str(facts["module"]),
        "shardings": str(facts["shardings"]),
        "check": str(facts["check"]),
        "reason": None if facts["reason"] is None else str(facts["reason"]),
        "compared": int(facts["compared"]),
    }


def _raise_for(done: Any, digest: str) -> None:
    said = done.stdout.decode(errors="replace").strip()[:500]
    if done.returncode == NOT_READ:
        raise UnsupportedFeatureError(f"the managed jax cannot read it: {said}")
    if done.returncode == NOT_WRITTEN:
        raise UnsupportedFeatureError(f"the managed jax cannot write it again: {said}")
    if done.returncode != 0:
        from jaxport.export._internal import converter_status

        lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        tail = f": {lines[-1][:300]}" if lines else ""
        raise _unsafe(f"{converter_status(done.returncode)}{tail}", digest)


def check_readable(archive: bytes | Path, digest: str) -> None:
    """The child's archive (bytes, or its file), its header read by this jaxport (another
    release wrote it).

    Raises:
        UnsupportedFeatureError: there is no such file, or this jaxport cannot read it.
    """
    from jaxport.export import inspect

    try:
        inspect(archive)
    except (JaxportError, OSError) as e:
        raise UnsupportedFeatureError(
            f"the re-export of {digest[:12]} is not readable here: {type(e).__name__}: {e}"
        ) from None


def _unsafe(what: str, digest: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"the re-export of {digest[:12]} did not finish: {what}; nothing was parsed in this "
        "process",
        targets=(),
        vjp_order=0,
        path=None,
    )
