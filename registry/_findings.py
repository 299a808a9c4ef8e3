"""Audits as the registry runs and keeps them: which variants to audit, the findings stored per
digest x jax x platform, upgrade reports and diffs between versions.

A model variant is audited from its archive put together from its parts (every tensor read and
checked in the worker). Diffs of models compare methods and parameters (``jaxport.audit`` diff
rules).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, insert, select

from jaxport._errors import NotFoundError
from jaxport.registry import _db
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._model_parts import MODEL, header_info, parts_of
from jaxport.registry._models import Audit, Model, Variant, Version
from jaxport.registry._names import check_name, check_text, parse_reference
from jaxport.registry._pulls import Pulls
from jaxport.registry._queries import Queries, check_limit, model_id_of
from jaxport.registry._types import Ref, VariantInfo

if TYPE_CHECKING:
    from jaxport.audit import Change, Finding, UpgradeRow
    from jaxport.export import ArchiveInfo

__all__ = ["Findings", "is_release"]

#: What ``upgrade_report`` reads as a jax release rather than an interpreter: "0.7.0", "0.10".
_RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?")


def is_release(target: str) -> bool:
    """Whether ``upgrade_report`` reads ``target`` as a jax release (``"0.7.0"``, ``"0.10"``)
    rather than an interpreter."""
    return _RELEASE.fullmatch(target) is not None


class Findings:
    """Audits and their stored results on one registry."""

    def __init__(self, engine: Engine, blobs: BlobStore, queries: Queries, pulls: Pulls):
        self._engine = engine
        self._blobs = blobs
        self._queries = queries
        self._pulls = pulls

    def audit(
        self,
        reference: str | None,
        *,
        platform: str | None,
        store: bool,
        python: str | os.PathLike[str] | None,
        timeout: float,
    ) -> list[Finding]:
        """See ``Registry.audit``."""
        from jaxport.audit import AuditJob, Finding, run_audits

        refs = self._targets(reference)
        targets = []
        for ref in refs:
            golden = self._queries.examples_digest(ref.name, ref.version)
            for v in ref.variants:
                for p in v.platforms if platform is None else (platform,):
                    if p in v.platforms:
                        targets.append((ref, v, p, golden))
        if not targets:
            if platform is not None and any(r.variants for r in refs):
                have = sorted({p for r in refs for v in r.variants for p in v.platforms})
                raise NotFoundError(
                    f"nothing to audit for {platform}: the variants are for {', '.join(have)}"
                )
            return []
        jobs = [
            AuditJob(
                self._archive_reader(v),
                p,
                None if g is None else functools.partial(read_verified, self._blobs, g),
            )
            for _, v, p, g in targets
        ]
        env, results = run_audits(jobs, python=python, timeout=timeout)
        now = time.time()
        findings = [
            Finding(
                name=ref.name,
                version=ref.version,
                digest=v.digest,
                jax_version=env.jax_version,
                jaxlib_version=env.jaxlib_version,
                platform=p,
                status=r.status,
                reason=r.reason,
                checks=r.checks,
                seconds=r.seconds,
                created_at=now,
            )
            for (ref, v, p, _), r in zip(targets, results, strict=True)
        ]
        if store:
            with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
                conn.execute(insert(Audit), [_audit_row(f) for f in findings])
        return findings

    def _archive_reader(self, variant: VariantInfo) -> Callable[[], bytes]:
        """Reads a variant's archive when the worker needs it (a model's from its parts)."""
        where = f"{variant.name}:{variant.version}"
        return functools.partial(self._pulls.archive_bytes, where, variant)

    def _targets(self, reference: str | None) -> list[Ref]:
        if reference is None:
            return [r for n in self._queries.names() for r in self._all(n)]
        ref = parse_reference(reference)
        if ref.name is not None and ref.version is None and ref.alias is None:
            return self._all(ref.name)
        return [self._queries.get(reference)]

    def _all(self, name: str) -> list[Ref]:
        return self._queries.page(name, limit=1_000_000, after=None)

    def results(
        self,
        *,
        name: str | None,
        jax_version: str | None,
        platform: str | None,
        limit: int,
    ) -> list[Finding]:
        """See ``Registry.audit_results``."""
        limit = check_limit(limit)
        if jax_version is not None:
            check_text(jax_version, "jax_version")
        q = (
            select(Audit.__table__, Model.name.label("m_name"), Version.version.label("v_number"))
            .join(Variant, Variant.digest == Audit.digest)
            .join(Version, Variant.version_id == Version.id)
            .join(Model, Model.id == Version.model_id)
            .order_by(Audit.id.desc())
            .limit(limit)
        )
        for column, value in (
            (Model.name, name),
            (Audit.jax_version, jax_version),
            (Audit.platform, platform),
        ):
            if value is not None:
                q = q.where(column == value)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            if name is not None:
                model_id_of(conn, check_name(name))
            return [_finding(r) for r in conn.execute(q)]

    def upgrade_report(
        self,
        target: str,
        reference: str | None,
        *,
        platform: str | None,
        store: bool,
        timeout: float,
    ) -> list[UpgradeRow]:
        """See ``Registry.upgrade_report``."""
        from jaxport.audit import compare_findings
        from jaxport.export._compat import jax_versions

        name, version = None, None
        if reference is not None:
            ref = parse_reference(reference)
            name = ref.name
            if ref.name is None or ref.version is not None or ref.alias is not None:
                one = self._queries.get(reference)
                name, version = one.name, one.version
        fresh: list[Finding] = []
        if not is_release(target):  # an interpreter: a path, or a name on PATH
            python = shutil.which(target) or target
            if not os.path.isfile(python):
                raise NotFoundError(f"no Python interpreter at {target}")
            kwargs: dict[str, Any] = {"platform": platform, "store": store, "timeout": timeout}
            fresh = self.audit(reference, python=python, **kwargs)
            fresh += self.audit(reference, python=None, **kwargs)
            target = fresh[0].jax_version if fresh else target
        stored = self.results(name=name, jax_version=None, platform=platform, limit=1_000_000)
        findings = sorted(fresh, key=lambda f: -f.created_at) + stored
        if version is not None:
            findings = [f for f in findings if f.version == version]
        return compare_findings(findings, jax_versions()[0], target)

    def diff(self, a: str, b: str) -> list[Change]:
        """See ``Registry.diff``."""
        from jaxport.audit import diff_variant_sets
        from jaxport.export import inspect

        pairs = []
        for reference in (a, b):
            ref = self._queries.get(reference)
            pairs.append([(v, self._info(v, inspect)) for v in ref.variants])
        return diff_variant_sets(pairs[0], pairs[1])

    def _info(self, variant: VariantInfo, inspect: Callable[[bytes], ArchiveInfo]) -> ArchiveInfo:
        """The header of a variant's archive (a model's from its skeleton's header)."""
        if variant.kind != MODEL:
            return inspect(read_verified(self._blobs, variant.digest))
        with _db.translating_db_errors(), self._engine.connect() as conn:
            parts = parts_of(conn, variant.variant_id)
        if not parts:
            raise NotFoundError(f"{variant.name}:{variant.version} was deleted meanwhile")
        return header_info(self._blobs, parts[0].digest, variant.size_bytes)


def _audit_row(f: Finding) -> dict[str, Any]:
    return {
        "digest": f.digest,
        "jax_version": f.jax_version,
        "jaxlib_version": f.jaxlib_version,
        "platform": f.platform,
        "status": f.status,
        "reason": f.reason,
        "details_json": json.dumps(f.checks, sort_keys=True),
        "seconds": f.seconds,
        "created_at": f.created_at,
    }


def _finding(row: Any) -> Finding:
    from jaxport.audit import Finding

    return Finding(
        row.m_name, row.v_number, row.digest, row.jax_version, row.jaxlib_version,
        row.platform, row.status, row.reason, json.loads(row.details_json),
        row.seconds, row.created_at,
    )  # fmt: skip
