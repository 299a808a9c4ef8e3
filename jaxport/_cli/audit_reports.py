"""Audit reports as ``jaxport audit`` prints them: what was found, with the jax and jaxlib that
produced the report and when.

Each report is one document (the table, or ``--json``): ``AuditReport`` (one audit run: the
jax that audited), ``MatrixReport`` (stored findings: the jax running the report) and
``UpgradeReport`` (stored and fresh findings: the jax running the report is ``current``).
``generated_at`` is unix seconds (ISO 8601 in UTC in JSON and in the tables).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jaxport.audit import Finding, MatrixCell, UpgradeRow

__all__ = [
    "AuditReport",
    "MatrixReport",
    "UpgradeReport",
    "audit_report",
    "matrix_report",
    "upgrade_report",
]

#: What a report says where the jax that produced it is not known (an audit in another
#: environment that found nothing to audit).
UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """``jaxport audit``: the findings of one run, by ``jax_version`` / ``jaxlib_version``."""

    jax_version: str
    jaxlib_version: str
    generated_at: float
    findings: tuple[Finding, ...]
    report: str = "audit"


@dataclasses.dataclass(frozen=True)
class MatrixReport:
    """``jaxport audit matrix``: every cell of variants x jax releases (``releases``, oldest
    first), row by row; made by the running ``jax_version`` / ``jaxlib_version``."""

    jax_version: str
    jaxlib_version: str
    generated_at: float
    releases: tuple[str, ...]
    cells: tuple[MatrixCell, ...]
    report: str = "matrix"


@dataclasses.dataclass(frozen=True)
class UpgradeReport:
    """``jaxport audit upgrade``: each variant and platform under ``current`` (the running
    jax) and ``target``; made by the running ``jax_version`` / ``jaxlib_version``."""

    jax_version: str
    jaxlib_version: str
    generated_at: float
    current: str
    target: str
    rows: tuple[UpgradeRow, ...]
    report: str = "upgrade"


def _running() -> tuple[str, str]:
    from jaxport.export._internal import jax_versions

    return jax_versions()


def audit_report(findings: Sequence[Finding], *, other_python: bool) -> AuditReport:
    """The report of one audit run: its jax is the findings' (the worker's), else, when the
    run found nothing to audit, this process's (``"unknown"`` for another interpreter)."""
    if findings:
        jax_version, jaxlib_version = findings[0].jax_version, findings[0].jaxlib_version
    elif other_python:
        jax_version = jaxlib_version = UNKNOWN
    else:
        jax_version, jaxlib_version = _running()
    return AuditReport(jax_version, jaxlib_version, time.time(), tuple(findings))


def matrix_report(findings: Sequence[Finding]) -> MatrixReport:
    """The matrix of stored ``findings`` (newest first)."""
    from jaxport.audit import matrix_cells, matrix_releases

    jax_version, jaxlib_version = _running()
    return MatrixReport(
        jax_version,
        jaxlib_version,
        time.time(),
        tuple(matrix_releases(findings)),
        tuple(matrix_cells(findings)),
    )


def upgrade_report(rows: Sequence[UpgradeRow], target: str) -> UpgradeReport:
    """The upgrade report of ``rows`` (``Registry.upgrade_report``) towards ``target`` (a
    release, or an interpreter: then the release its rows name)."""
    jax_version, jaxlib_version = _running()
    current = rows[0].current if rows else jax_version
    target = rows[0].target if rows else target
    return UpgradeReport(jax_version, jaxlib_version, time.time(), current, target, tuple(rows))
