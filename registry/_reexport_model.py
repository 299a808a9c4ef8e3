"""A fleet rescue's re-export of one model archive (``registry/_fleet_rescue.py``), in a child
of the managed environment (``jaxport/_reexport_model_child.py``).

As ``registry/_reexport.py`` for a function, with files instead of bytes: the caller writes the
source archive to a file (``Backend.write_file``, part by part), the child reads its skeleton,
writes the new archive beside it (each tensor's stored section copied byte for byte) and checks
it; the caller pushes that file, so a registry that holds the source stores the tensors' parts
once. Neither process holds the tensors to re-serialize: the child's address-space limit is
``registry/_reexport.py``'s plus twice the archive's size (the check maps the source and the new
archive, as ``jaxport.load_model`` does, and runs the methods).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxport import JaxportError, UnsupportedFeatureError

__all__ = ["ModelReexportResult", "reexport_model"]

_HASH_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class ModelReexportResult:
    """What the child did to one model archive: as ``ReexportResult``, with ``archive`` the
    path of the archive it wrote (in the caller's directory) and ``digest`` its sha256 (hex)."""

    archive: Path
    digest: str
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


def reexport_model(
    source: Path,
    *,
    directory: Path,
    source_digest: str,
    python: str,
    golden: bytes | None,
    allow_custom_calls: Sequence[str],
    timeout: float,
) -> ModelReexportResult:
    """Re-exports the model archive at ``source`` with the jax of ``python`` and checks it.

    Args:
        source: a model archive file (left as it is).
        directory: where the new archive is written (the caller removes it).
        source_digest: the source's sha256 (hex), recorded in the new archive's metadata.
        python: an interpreter with jax and this jaxport (a managed environment's).
        golden: the version's golden examples (a model's blob, per method), or None: the
            child compares the re-export with the source on deterministic arguments.
        allow_custom_calls: custom-call targets to accept (those the registry admitted).
        timeout: seconds the child may take.

    Raises:
        UnsupportedFeatureError: that jax cannot read the archive, or cannot write what it
            read; the archive the child wrote is not readable here.
        UnsafeArchiveError: the child crashed, ran out of memory or time.
    """
    from jaxport.export._internal import run_converter
    from jaxport.registry._reexport import _MEMORY_LIMIT, _raise_for, _unsafe

    work = Path(tempfile.mkdtemp(prefix="model-", dir=directory))
    os.symlink(source.resolve(), work / "in.jaxport")
    if golden is not None:
        (work / "golden.npz").write_bytes(golden)
    request = {"allow_custom_calls": list(allow_custom_calls), "source_digest": source_digest}
    (work / "request.json").write_text(json.dumps(request))
    limit = _MEMORY_LIMIT + 2 * source.stat().st_size
    cmd = [python, "-I", "-m", "jaxport._reexport_model_child", str(work), str(limit)]
    done = run_converter(cmd, timeout, lambda what: _unsafe(what, source_digest))
    _raise_for(done, source_digest)
    written = work / "archive.jaxport"
    _check_written(written, source_digest)
    facts: dict[str, Any] = json.loads((work / "facts.json").read_text())
    recorded = work / "examples.npz"
    return ModelReexportResult(
        archive=written,
        digest=_sha256(written),
        examples=recorded.read_bytes() if recorded.exists() else None,
        jax_version=str(facts["jax"]),
        jaxlib_version=str(facts["jaxlib"]),
        module=str(facts["module"]),
        shardings=str(facts["shardings"]),
        check=str(facts["check"]),
        reason=None if facts["reason"] is None else str(facts["reason"]),
        compared=int(facts["compared"]),
    )


def _check_written(path: Path, digest: str) -> None:
    """The child's archive, its header read by this jaxport (another release wrote it).

    Raises:
        UnsupportedFeatureError: there is none, or this jaxport cannot read it.
    """
    from jaxport.export import inspect

    try:
        inspect(path)
    except (JaxportError, OSError) as e:
        raise UnsupportedFeatureError(
            f"the re-export of {digest[:12]} is not readable here: {type(e).__name__}: {e}"
        ) from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
