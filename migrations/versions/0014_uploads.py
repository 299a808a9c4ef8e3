"""uploads: the parts each token uploaded to the registry server lately, so that a commit by a
prefix-limited token names only parts it uploaded or parts of versions it can read
(``registry/_reach.py``; knowing a digest is not enough).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("token", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("token", "digest", name=op.f("pk_uploads")),
    )
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.create_index("ix_uploads_created_at", ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.drop_index("ix_uploads_created_at")
    op.drop_table("uploads")
