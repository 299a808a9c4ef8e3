"""queue: the finding each key of the audit queue recorded, once

A row says that the audit queue recorded the finding ``audit_id`` for the key digest x jax x
jaxlib x platform x nr_devices (its primary key), by the procrastinate job ``job_id``. The
queue's own tables (procrastinate's) are installed by ``jaxport db upgrade`` on PostgreSQL,
not here (``registry/_queue_schema.py``).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queued_audits",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("jax_version", sa.String(length=40), nullable=False),
        sa.Column("jaxlib_version", sa.String(length=40), nullable=False),
        sa.Column("platform", sa.String(length=40), nullable=False),
        sa.Column("nr_devices", sa.Integer(), nullable=False),
        sa.Column("audit_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["audit_id"],
            ["audits.id"],
            name=op.f("fk_queued_audits_audit_id_audits"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "digest",
            "jax_version",
            "jaxlib_version",
            "platform",
            "nr_devices",
            name=op.f("pk_queued_audits"),
        ),
    )


def downgrade() -> None:
    op.drop_table("queued_audits")
