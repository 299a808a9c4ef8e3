"""Compatibility audits: can a jax load, compile and run an archive, with the same numbers?

No SQL here: the registry (``Registry.audit``) chooses what to audit and stores the findings.
"""

from __future__ import annotations

from jaxport.audit._checks import audit_archive
from jaxport.audit._diff import Change, diff_archives, diff_variant_sets
from jaxport.audit._examples import Example, decode_examples, encode_examples
from jaxport.audit._matrix import MatrixCell, matrix_cells, matrix_releases
from jaxport.audit._report import (
    NOT_AUDITED,
    NOT_RUN,
    STATUSES,
    AuditResult,
    Finding,
    UpgradeRow,
    compare_findings,
    short_digest,
)
from jaxport.audit._worker import DEFAULT_MEMORY_LIMIT, AuditJob, Environment, run_audits

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "NOT_AUDITED",
    "NOT_RUN",
    "STATUSES",
    "AuditJob",
    "AuditResult",
    "Change",
    "Environment",
    "Example",
    "Finding",
    "MatrixCell",
    "UpgradeRow",
    "audit_archive",
    "compare_findings",
    "decode_examples",
    "diff_archives",
    "diff_variant_sets",
    "encode_examples",
    "matrix_cells",
    "matrix_releases",
    "run_audits",
    "short_digest",
]
