"""Audits as the registry runs and keeps them: which variants to audit, the findings stored per
digest x golden examples x level x jax x jaxlib x platform x devices (and reused: an audit
measures only what is not stored yet, unless forced), upgrade reports and diffs between
versions.

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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, insert, select

from jaxport import NotFoundError
from jaxport.registry import _db
from jaxport.registry._adoption import FINDING_FIELDS, check_findings, held
from jaxport.registry._audit_targets import Target, audit_targets, finding_of, stored_findings
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._model_parts import MODEL, header_info, parts_of
from jaxport.registry._models import AuditRow, NameRow, VariantRow, VersionRow
from jaxport.registry._names import check_name, check_text, parse_reference
from jaxport.registry._pulls import Pulls
from jaxport.registry._queries import Queries, check_limit, model_id_of
from jaxport.registry._selects import live
from jaxport.registry._types import VariantInfo

if TYPE_CHECKING:
    from jaxport.audit import AuditResult, Change, Finding, UpgradeRow
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
        force: bool = False,
        level: str = "full",
        workers: int = 1,
        progress: Callable[[int, int], None] | None = None,
        tolerance: Any = None,
    ) -> list[Finding]:
        """See ``Registry.audit``."""
        from jaxport.audit import check_tolerance, environment_key

        override = check_tolerance(tolerance)
        targets = audit_targets(self._engine, self._queries, reference, platform)
        if not targets:
            return []
        blobs = self._with_tolerance(targets, override) if override is not None else {}
        exe = None if python is None else os.fspath(python)
        key = environment_key(exe)
        stored = {}
        if not force:
            stored = stored_findings(
                self._engine,
                level=level,
                jax_version=key.jax_version,
                jaxlib_version=key.jaxlib_version,
                devices=key.devices,
                digests={t.measure[0] for t in targets},
            )
        todo = list({t.measure: t for t in targets if t.measure not in stored}.values())
        measures = len({t.measure for t in targets})
        done = _Counter(measures - len(todo), measures, progress)
        measured = self._measure(todo, level, exe, timeout, workers, done, key.devices, blobs)
        now = time.time()
        findings: list[Finding] = []
        for t in targets:
            if t.measure in measured:
                jax_v, jaxlib_v, r = measured[t.measure]
                findings.append(_new_finding(t, jax_v, jaxlib_v, r, level, key.devices, now))
            else:
                findings.append(finding_of(t, stored[t.measure]))
        new = {t.measure: f for f, t in zip(findings, targets, strict=True) if not f.reused}
        if store and new:
            rows = [_audit_row(f) | {"examples_digest": m[2]} for m, f in new.items()]
            with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
                conn.execute(insert(AuditRow), rows)
        return findings

    def adopt(self, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Stores findings measured elsewhere (``audits`` rows as ``_audit_row`` makes them,
        with ``examples_digest``) about archives of versions of ``name``, each once checked
        (``registry/_adoption.py``): one with the same key and ``created_at`` as a stored
        one is skipped. Returns how many were stored.

        Raises:
            InvalidNameError: a row that is not a finding, or over ``MAX_FINDINGS`` rows.
            NotFoundError: a finding of an archive that no version of ``name`` has.
        """
        wanted = check_findings(rows)
        if not wanted:
            return 0
        digests = sorted({r["digest"] for r in wanted})
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            held(conn, name, digests)
            stored = conn.execute(
                select(*(getattr(AuditRow, k) for k in FINDING_FIELDS)).where(
                    AuditRow.digest.in_(digests)
                )
            ).all()
            seen = {tuple(r) for r in stored}
            new = []
            for r in wanted:
                key = tuple(r[k] for k in FINDING_FIELDS)
                if key not in seen:
                    seen.add(key)
                    new.append(r)
            if new:
                conn.execute(insert(AuditRow), new)
        return len(new)

    def _measure(
        self,
        todo: list[Target],
        level: str,
        python: str | None,
        timeout: float,
        workers: int,
        done: _Counter,
        devices: dict[str, int | None],
        examples: dict[str, bytes],
    ) -> dict[tuple[str, str, str | None], tuple[str, str, AuditResult]]:
        """Audits each target (one per measure) at ``level``: (jax, jaxlib, result) each;
        ``devices``: how many of each platform the auditing host has (static verdicts say
        ``not-run`` where a full audit would)."""
        if not todo:
            return {}
        if level == "static":
            from jaxport.audit import capabilities, static_verdict, worker_capabilities

            caps = capabilities() if python is None else worker_capabilities(python)
            out = {}
            for t in todo:
                out[t.measure] = (
                    caps.jax_version,
                    caps.jaxlib_version,
                    static_verdict(t.facts(), t.platform, caps, devices.get(t.platform)),
                )
                done.add(1)
            return out
        from jaxport.audit import AuditJob, run_audits

        jobs = [
            AuditJob(
                self._archive_reader(t.variant),
                t.platform,
                None
                if t.examples is None
                else functools.partial(examples.__getitem__, t.examples)
                if t.examples in examples
                else functools.partial(read_verified, self._blobs, t.examples),
            )
            for t in todo
        ]
        env, results = run_audits(
            jobs, python=python, timeout=timeout, workers=workers, progress=lambda i, r: done.add(1)
        )
        return {
            t.measure: (env.jax_version, env.jaxlib_version, r)
            for t, r in zip(todo, results, strict=True)
        }

    def _with_tolerance(self, targets: list[Target], override: Any) -> dict[str, bytes]:
        """Points each target's golden examples at a blob of the same examples with the
        tolerance ``override`` (made here, not stored: the findings name its digest); returns
        those blobs by digest."""
        from jaxport.registry._golden import examples_from_blob, golden_blob

        made: dict[str, tuple[str, bytes]] = {}
        for t in targets:
            if t.examples is None:
                continue
            if t.examples not in made:
                kind = MODEL if t.row.kind == MODEL else "function"
                stored = examples_from_blob(kind, read_verified(self._blobs, t.examples))
                made[t.examples] = golden_blob(kind, stored, lambda: None, override)
            t.examples = made[t.examples][0]
            t.measure = (t.measure[0], t.platform, t.examples)
        return dict(made.values())

    def _archive_reader(self, variant: VariantInfo) -> Callable[[], bytes]:
        """Reads a variant's archive when the worker needs it (a model's from its parts)."""
        where = f"{variant.name}:{variant.version}"
        return functools.partial(self._pulls.archive_bytes, where, variant)

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
            select(
                AuditRow.__table__,
                NameRow.name.label("m_name"),
                VersionRow.version.label("v_number"),
            )
            .join(VariantRow, VariantRow.digest == AuditRow.digest)
            .join(VersionRow, VariantRow.version_id == VersionRow.id)
            .join(NameRow, NameRow.id == VersionRow.model_id)
            .where(live())
            .order_by(AuditRow.id.desc())
            .limit(limit)
        )
        for column, value in (
            (NameRow.name, name),
            (AuditRow.jax_version, jax_version),
            (AuditRow.platform, platform),
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
        from jaxport.export._internal import jax_versions

        name, version = None, None
        if reference is not None:
            ref = parse_reference(reference)
            name = ref.name
            if ref.name is None or ref.version is not None or ref.alias is not None:
                one = self._queries.get(reference)
                name, version = one.name, one.version
        fresh: list[Finding] = []
        python: str | None = None
        if not is_release(target):  # an interpreter: a path, or a name on PATH
            python = shutil.which(target) or target
            if not os.path.isfile(python):
                raise NotFoundError(f"no Python interpreter at {target}")
        elif target != jax_versions()[0]:  # an environment made by audit(jax=target), if any
            from jaxport.audit import cached_environment
            from jaxport.registry._config import default_home

            python = cached_environment(target, default_home())
        if python is not None:  # incremental: only what is not stored yet is measured
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


class _Counter:
    """Progress over ``total`` measurements, ``done`` of them already (stored findings)."""

    def __init__(self, done: int, total: int, progress: Callable[[int, int], None] | None):
        self._done, self._total, self._progress = done, total, progress
        self.add(0)

    def add(self, n: int) -> None:
        self._done += n
        if self._progress is not None:
            self._progress(min(self._done, self._total), self._total)


def _new_finding(
    t: Target,
    jax_version: str,
    jaxlib_version: str,
    r: AuditResult,
    level: str,
    devices: dict[str, int | None],
    now: float,
) -> Finding:
    from jaxport.audit import Finding

    return Finding(
        t.name, t.version, t.measure[0], jax_version, jaxlib_version, t.platform, r.status,
        r.reason, r.checks, r.seconds, now, level=level, devices=devices.get(t.platform),
    )  # fmt: skip


def _audit_row(f: Finding) -> dict[str, Any]:
    return {
        "level": f.level,
        "devices": f.devices,
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
        row.seconds, row.created_at, level=row.level, devices=row.devices,
    )  # fmt: skip
