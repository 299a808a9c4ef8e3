"""audit_scale: findings keyed by check level, golden examples and the auditing host's devices

``level`` is ``"full"`` (loaded and compiled in a worker) or ``"static"`` (recorded facts
against the jax's capabilities, nothing parsed); ``devices`` is how many devices of the
finding's platform the auditing host had (NULL: not known, so never reused);
``examples_digest`` the golden examples blob re-run (NULL: none). An audit reuses a finding
with the same digest x examples x level x jax x jaxlib x platform x devices.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audits", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("level", sa.String(length=20), server_default="full", nullable=False)
        )
        batch_op.add_column(sa.Column("devices", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("examples_digest", sa.String(length=64), nullable=True))
        batch_op.create_index(
            "ix_audits_key", ["digest", "level", "jax_version", "platform"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("audits", schema=None) as batch_op:
        batch_op.drop_index("ix_audits_key")
        batch_op.drop_column("examples_digest")
        batch_op.drop_column("devices")
        batch_op.drop_column("level")
