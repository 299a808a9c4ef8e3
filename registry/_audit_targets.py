"""What an audit measures, in two queries: every (variant, platform) a reference names, with its
version's golden examples, and the stored findings an incremental audit may reuse.

A finding is reused when digest x golden examples x level x jax x jaxlib x platform x devices
all match; a finding whose ``devices`` is unknown (None) is never reused, nor a ``crash``
(a worker killed by a time limit or a signal: the next audit tries again).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select

from jaxport import NotFoundError
from jaxport.registry import _db
from jaxport.registry._models import AuditRow, ExamplesRow, NameRow, VariantRow, VersionRow
from jaxport.registry._names import parse_reference
from jaxport.registry._queries import Queries, model_id_of
from jaxport.registry._selects import live
from jaxport.registry._types import VariantInfo

if TYPE_CHECKING:
    from jaxport.audit import Facts, Finding

__all__ = ["Target", "audit_targets", "stored_findings"]


class Target:
    """One variant on one platform to audit; ``examples``: its version's golden examples blob
    digest, if any; ``row``: its ``variants`` row (``variant`` is made from it when asked:
    a re-audit of 10,000 stored findings makes none)."""

    __slots__ = ("__dict__", "examples", "measure", "name", "platform", "row", "version")

    def __init__(self, name: str, version: int, row: Any, platform: str, examples: str | None):
        self.name, self.version, self.row = name, version, row
        self.platform, self.examples = platform, examples
        #: What one measurement covers: versions sharing an archive and examples share it.
        self.measure: tuple[str, str, str | None] = (row.digest, platform, examples)

    @functools.cached_property
    def variant(self) -> VariantInfo:
        return VariantInfo.from_row(self.name, self.version, self.row)

    def facts(self) -> Facts:
        """What a static audit reads, as the row recorded it at push."""
        from jaxport.audit import Facts

        row = self.row
        return Facts(
            format_version=row.format_version,
            calling_convention_version=row.calling_convention_version,
            platforms=_platforms(row.platforms),
            custom_call_targets=_targets(row.custom_call_targets),
            kind=row.kind,
            jax_version=row.jax_version,
            sharded=bool(row.sharded),
            nr_devices=row.nr_devices,
            stablehlo_version=row.stablehlo_version,
        )


def audit_targets(
    engine: Engine, queries: Queries, reference: str | None, platform: str | None
) -> list[Target]:
    """The (variant, platform) pairs ``reference`` names, in (name, version, variant) order.

    Raises:
        NotFoundError: no such name, version or alias; nothing to audit for ``platform``.
    """
    q = (
        select(
            VariantRow.__table__,
            VersionRow.version.label("v_number"),
            NameRow.name.label("m_name"),
            ExamplesRow.digest.label("examples_digest"),
        )
        .join(VersionRow, VariantRow.version_id == VersionRow.id)
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .outerjoin(ExamplesRow, ExamplesRow.version_id == VersionRow.id)
        .where(live())
        .order_by(NameRow.name, VersionRow.version, VariantRow.id)
    )
    if reference is not None:
        ref = parse_reference(reference)
        if ref.name is not None and ref.version is None and ref.alias is None:
            with _db.translating_db_errors(), engine.connect() as conn:
                model_id_of(conn, ref.name)  # NotFoundError for an unknown name
            q = q.where(NameRow.name == ref.name)
        else:
            chosen = queries.get(reference)
            q = q.where(NameRow.name == chosen.name, VersionRow.version == chosen.version)
    with _db.translating_db_errors(), engine.connect() as conn:
        rows = conn.execute(q).all()
    targets = [
        Target(r.m_name, r.v_number, r, p, r.examples_digest)
        for r in rows
        for p in _platforms(r.platforms)
        if platform is None or p == platform
    ]
    if not targets and platform is not None and rows:
        have = sorted({p for r in rows for p in _platforms(r.platforms)})
        raise NotFoundError(
            f"nothing to audit for {platform}: the variants are for {', '.join(have)}"
        )
    return targets


def stored_findings(
    engine: Engine,
    *,
    level: str,
    jax_version: str,
    jaxlib_version: str,
    devices: dict[str, int | None],
    digests: set[str],
) -> dict[tuple[str, str, str | None], Any]:
    """The newest stored finding per ``Target.measure`` (digest, platform, examples) with this
    key, as rows of ``audits``."""
    q = (
        select(AuditRow.__table__)
        .where(
            AuditRow.level == level,
            AuditRow.jax_version == jax_version,
            AuditRow.jaxlib_version == jaxlib_version[:40],
            AuditRow.status != "crash",
        )
        .order_by(AuditRow.id.desc())
    )
    if len(digests) <= 500:
        q = q.where(AuditRow.digest.in_(sorted(digests)))
    found: dict[tuple[str, str, str | None], Any] = {}
    with _db.translating_db_errors(), engine.connect() as conn:
        for row in conn.execute(q):
            known = devices.get(row.platform)
            if row.digest in digests and known is not None and row.devices == known:
                found.setdefault((row.digest, row.platform, row.examples_digest), row)
    return found


def finding_of(target: Target, row: Any) -> Finding:
    """A stored ``audits`` row as the finding of ``target`` (marked reused)."""
    return _finding_class()(
        target.name, target.version, row.digest, row.jax_version, row.jaxlib_version,
        row.platform, row.status, row.reason, dict(_details(row.details_json)), row.seconds,
        row.created_at, level=row.level, devices=row.devices, reused=True,
    )  # fmt: skip


@functools.cache
def _finding_class() -> type[Finding]:
    from jaxport.audit import Finding  # imports jax: not before an audit needs it

    return Finding


@functools.lru_cache(maxsize=4096)
def _details(text: str) -> dict[str, str]:
    """A finding's checks (findings of similar variants share the text: parsed once; callers
    copy)."""
    found = json.loads(text)
    return found if isinstance(found, dict) else {}


@functools.lru_cache(maxsize=4096)
def _platforms(text: str) -> tuple[str, ...]:
    return tuple(text.split(",")) if text else ()


@functools.lru_cache(maxsize=4096)
def _targets(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))
