"""Compatibility audits: can a jax load, compile and run an archive, with the same numbers?

No SQL here: the registry (``Registry.audit``) chooses what to audit and stores the findings.
The checks, diffs and golden examples are imported when first used (they import jax and
numpy), so that a re-audit whose findings are all stored does not pay for jax. Each public
name is listed once, as an import below (under ``TYPE_CHECKING``: imported on first use);
``__all__`` and the loader are derived from those lines (``jaxport._lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._lazy import attach
from jaxport.audit._matrix import MatrixCell as MatrixCell
from jaxport.audit._matrix import matrix_cells as matrix_cells
from jaxport.audit._matrix import matrix_releases as matrix_releases
from jaxport.audit._report import NOT_AUDITED as NOT_AUDITED
from jaxport.audit._report import NOT_RUN as NOT_RUN
from jaxport.audit._report import STATUSES as STATUSES
from jaxport.audit._report import UNKNOWN as UNKNOWN
from jaxport.audit._report import UNMEASURED as UNMEASURED
from jaxport.audit._report import AuditResult as AuditResult
from jaxport.audit._report import Finding as Finding
from jaxport.audit._report import UpgradeRow as UpgradeRow
from jaxport.audit._report import compare_findings as compare_findings
from jaxport.audit._report import newest_findings as newest_findings
from jaxport.audit._report import short_digest as short_digest
from jaxport.audit._worker import DEFAULT_MEMORY_LIMIT as DEFAULT_MEMORY_LIMIT
from jaxport.audit._worker import AuditJob as AuditJob
from jaxport.audit._worker import Environment as Environment
from jaxport.audit._worker import run_audits as run_audits
from jaxport.audit._worker import worker_capabilities as worker_capabilities

if TYPE_CHECKING:
    from jaxport.audit._changes import Change as Change
    from jaxport.audit._checks import audit_archive as audit_archive
    from jaxport.audit._diff import diff_archives as diff_archives
    from jaxport.audit._diff import diff_variant_sets as diff_variant_sets
    from jaxport.audit._envs import cached_environment as cached_environment
    from jaxport.audit._envs import jax_environment as jax_environment
    from jaxport.audit._examples import Example as Example
    from jaxport.audit._examples import check_tolerance as check_tolerance
    from jaxport.audit._examples import decode_examples as decode_examples
    from jaxport.audit._examples import decode_model_examples as decode_model_examples
    from jaxport.audit._examples import decode_tolerance as decode_tolerance
    from jaxport.audit._examples import encode_examples as encode_examples
    from jaxport.audit._examples import encode_model_examples as encode_model_examples
    from jaxport.audit._probe import environment_key as environment_key
    from jaxport.audit._static import Facts as Facts
    from jaxport.audit._static import capabilities as capabilities
    from jaxport.audit._static import static_verdict as static_verdict

__all__, __getattr__, __dir__ = attach(__name__)
