"""One audit job of the queue, as ``jaxport audit-worker`` runs it: one ``Registry.audit`` of
one variant for one platform (the audit worker process and its sandbox, unchanged), then its
finding recorded once.

Findings of the queue are recorded once per archive digest x jax x jaxlib x platform x
devices (``queued_audits``, whose primary key that is), in one transaction with the finding:
a job run again after its worker was killed between the commit and procrastinate's "done", or
enqueued twice, writes nothing more. One exception: a ``not-run`` finding (nothing measured,
e.g. too few devices on that host) is replaced by a measured one for the same key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from jaxport import NotFoundError
from jaxport.registry import _db
from jaxport.registry._findings import _audit_row
from jaxport.registry._models import AuditRow, QueuedAuditRow

if TYPE_CHECKING:
    from jaxport.audit import Finding
    from jaxport.registry._registry import Registry

__all__ = ["audit_one", "record_once"]


def audit_one(
    registry: Registry,
    engine: Engine,
    *,
    digest: str,
    platform: str,
    nr_devices: int,
    timeout: float,
    job_id: int | None,
    jax: str | None = None,
) -> tuple[Finding, bool] | None:
    """Audits the archive ``digest`` for ``platform`` here and records the finding once.

    Args:
        digest: the variant's archive sha256 (64 hex digits).
        platform: ``cpu``, ``cuda``, ``rocm`` or ``tpu``.
        nr_devices: the devices the variant needs (part of the finding's key).
        timeout: seconds the audit may take before its worker is killed (``crash``).
        job_id: the queue's job, kept beside the finding.
        jax: audit in the environment of this jax release (``audit(jax=...)``: made once
            under ``$JAXPORT_HOME/envs``), None: this process's jax.

    Returns:
        ``(finding, recorded)``: recorded False when the key already had one; None when no
        variant has that archive any more (deleted since it was enqueued).

    Raises:
        AuditError: the audit worker could not start, or the release's environment could
            not be made (the job is retried).
        RegistryError: the database failed (the job is retried).
    """
    try:
        findings = registry.audit(
            f"sha256:{digest}", platform=platform, store=False, timeout=timeout, jax=jax
        )
    except NotFoundError:
        return None
    mine = [f for f in findings if f.digest == digest]
    if not mine:
        return None
    return mine[0], record_once(engine, mine[0], nr_devices, job_id)


def record_once(engine: Engine, finding: Finding, nr_devices: int, job_id: int | None) -> bool:
    """Stores ``finding`` unless its key (digest x jax x jaxlib x platform x ``nr_devices``)
    has one already (a ``not-run`` one is replaced by a measured finding).

    Returns:
        Whether it was stored.

    Raises:
        RegistryError: the database failed.
    """
    key = {
        "digest": finding.digest,
        "jax_version": finding.jax_version,
        "jaxlib_version": finding.jaxlib_version,
        "platform": finding.platform,
        "nr_devices": nr_devices,
    }
    with _db.translating_db_errors():
        try:
            return _write(engine, finding, key, job_id)
        except IntegrityError:  # a job for the same key committed first
            return False


def _write(engine: Engine, finding: Finding, key: dict[str, Any], job_id: int | None) -> bool:
    where = [getattr(QueuedAuditRow, column) == value for column, value in key.items()]
    with _db.write_transaction(engine) as conn:
        held = conn.execute(
            select(QueuedAuditRow.audit_id, AuditRow.status)
            .join(AuditRow, AuditRow.id == QueuedAuditRow.audit_id)
            .where(*where)
            .with_for_update(of=QueuedAuditRow)
        ).first()
        if held is not None and (held.status != "not-run" or finding.status == "not-run"):
            return False
        audit_id = conn.execute(
            insert(AuditRow).values(_audit_row(finding)).returning(AuditRow.id)
        ).scalar_one()
        if held is None:
            conn.execute(insert(QueuedAuditRow).values(**key, audit_id=audit_id, job_id=job_id))
        else:  # a measured finding replaces the not-run one
            conn.execute(
                update(QueuedAuditRow).where(*where).values(audit_id=audit_id, job_id=job_id)
            )
            conn.execute(delete(AuditRow).where(AuditRow.id == held.audit_id))
    return True
