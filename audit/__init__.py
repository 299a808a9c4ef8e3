"""Compatibility audits: can a jax load, compile and run an archive, with the same numbers?

No SQL here: the registry (``Registry.audit``) chooses what to audit and stores the findings.
The checks, diffs and golden examples are imported when first used (they import jax and
numpy), so that a re-audit whose findings are all stored does not pay for jax.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from jaxport.audit._changes import Change
    from jaxport.audit._checks import audit_archive
    from jaxport.audit._diff import diff_archives, diff_variant_sets
    from jaxport.audit._examples import Example, decode_examples, encode_examples

#: Names imported on first use, and their modules.
_LAZY = {
    "audit_archive": "_checks",
    "Change": "_changes",
    "diff_archives": "_diff",
    "diff_variant_sets": "_diff",
    "Example": "_examples",
    "decode_examples": "_examples",
    "encode_examples": "_examples",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxport.audit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"jaxport.audit.{module}"), name)
    globals()[name] = value
    return value
