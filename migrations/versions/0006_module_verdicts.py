"""module verdicts: what the module sandbox said of each module, by digest and jaxlib

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "module_verdicts",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("jaxlib_version", sa.String(length=40), nullable=False),
        sa.Column("facts_version", sa.Integer(), nullable=False),
        sa.Column("verdict_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "digest", "jaxlib_version", "facts_version", name=op.f("pk_module_verdicts")
        ),
    )


def downgrade() -> None:
    op.drop_table("module_verdicts")
