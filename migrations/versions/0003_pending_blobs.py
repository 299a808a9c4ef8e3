"""pending blobs: the digests a push in flight needs, which gc must keep

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_blobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("token", sa.String(length=32), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_blobs")),
    )
    with op.batch_alter_table("pending_blobs", schema=None) as batch_op:
        batch_op.create_index("ix_pending_blobs_digest", ["digest"], unique=False)
        batch_op.create_index("ix_pending_blobs_token", ["token"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("pending_blobs", schema=None) as batch_op:
        batch_op.drop_index("ix_pending_blobs_token")
        batch_op.drop_index("ix_pending_blobs_digest")
    op.drop_table("pending_blobs")
