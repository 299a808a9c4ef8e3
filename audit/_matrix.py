"""The compatibility matrix: variants x (jax release, platform), from stored findings.

A row is one variant ``(name, version, digest)`` on one platform; a column one jax release. The
CLI's table and its ``--json`` are both made of ``matrix_cells``, so they hold the same cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxport.audit._report import NOT_AUDITED, Finding, newest_findings, short_digest

__all__ = ["MatrixCell", "matrix_cells", "matrix_releases"]


@dataclasses.dataclass(frozen=True)
class MatrixCell:
    """One cell: a variant on a platform under one jax release, with the newest finding there
    (``finding`` None and ``status`` ``"not audited"`` where that release has none)."""

    name: str
    version: int
    digest: str
    platform: str
    jax_version: str
    status: str
    finding: Finding | None
    short_digest: str = dataclasses.field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "short_digest", short_digest(self.digest))


def matrix_releases(findings: Sequence[Finding]) -> list[str]:
    """The jax releases that have a finding, oldest first (``release_key`` order)."""
    from jaxport.export._internal import release_key

    return sorted({f.jax_version for f in findings}, key=release_key)


def matrix_cells(findings: Sequence[Finding]) -> list[MatrixCell]:
    """Every cell of the matrix of ``findings`` (newest first), row by row: rows in (name,
    version, digest, platform) order, each with one cell per release in ``matrix_releases``
    order; a cell holds the finding ``newest_findings`` picks for its row and release (a full
    audit's before a static one's, a measured one before a later ``not-run``)."""
    latest = newest_findings(findings)
    rows = sorted({k[:4] for k in latest})
    releases = matrix_releases(findings)
    cells = []
    for name, version, digest, platform in rows:
        for release in releases:
            cell = latest.get((name, version, digest, platform, release))
            status = cell.status if cell else NOT_AUDITED
            cells.append(MatrixCell(name, version, digest, platform, release, status, cell))
    return cells
