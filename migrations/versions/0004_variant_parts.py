"""model archives stored in parts: a variant's kind, and the blobs of a model variant

A model archive is stored as a skeleton blob (preamble, header, modules) and one blob per
tensor; ``variant_parts`` lists them so that pull, gc, verify and dedup know them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "variants",
        sa.Column("kind", sa.String(length=20), server_default="function", nullable=False),
    )
    op.create_table(
        "variant_parts",
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["digest"], ["blobs.digest"], name=op.f("fk_variant_parts_digest_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["variant_id"],
            ["variants.id"],
            name=op.f("fk_variant_parts_variant_id_variants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("variant_id", "position", name=op.f("pk_variant_parts")),
    )
    with op.batch_alter_table("variant_parts", schema=None) as batch_op:
        batch_op.create_index("ix_variant_parts_digest", ["digest"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("variant_parts", schema=None) as batch_op:
        batch_op.drop_index("ix_variant_parts_digest")
    op.drop_table("variant_parts")
    with op.batch_alter_table("variants", schema=None) as batch_op:
        batch_op.drop_column("kind")
