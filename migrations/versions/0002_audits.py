"""audit results and golden examples

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("jax_version", sa.String(length=40), nullable=False),
        sa.Column("jaxlib_version", sa.String(length=40), nullable=False),
        sa.Column("platform", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details_json", sa.Text(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audits")),
    )
    with op.batch_alter_table("audits", schema=None) as batch_op:
        batch_op.create_index(
            "ix_audits_digest", ["digest", "jax_version", "platform"], unique=False
        )

    op.create_table(
        "examples",
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["digest"], ["blobs.digest"], name=op.f("fk_examples_digest_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["versions.id"],
            name=op.f("fk_examples_version_id_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("version_id", name=op.f("pk_examples")),
    )


def downgrade() -> None:
    op.drop_table("examples")
    with op.batch_alter_table("audits", schema=None) as batch_op:
        batch_op.drop_index("ix_audits_digest")
    op.drop_table("audits")
