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
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from jaxport._signing import file_sha256
from jaxport.registry._reexport import (
    _MEMORY_LIMIT,
    ChildOutcome,
    check_readable,
    launch,
    outcome,
)

__all__ = ["ModelReexportResult", "reexport_model"]


@dataclasses.dataclass(frozen=True)
class ModelReexportResult(ChildOutcome):
    """What the child did to one model archive: ``archive``, the path of the archive it wrote
    (in the caller's directory), ``digest`` its sha256 (hex), and the ``ChildOutcome``."""

    archive: Path
    digest: str


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
    work = Path(tempfile.mkdtemp(prefix="model-", dir=directory))
    os.symlink(source.resolve(), work / "in.jaxport")
    limit = _MEMORY_LIMIT + 2 * source.stat().st_size
    launch(
        work, "jaxport._reexport_model_child", limit, python=python, golden=golden,
        allow_custom_calls=allow_custom_calls, source_digest=source_digest, timeout=timeout,
    )  # fmt: skip
    written = work / "archive.jaxport"
    check_readable(written, source_digest)
    return ModelReexportResult(archive=written, digest=file_sha256(written), **outcome(work))
