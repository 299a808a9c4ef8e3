"""Issue 24 §3: ``variants.stablehlo_version``, the newest StableHLO version among a variant's
modules (their bytecode's producer string), so that a static audit decides what that version
decides against a jax's jaxlib without reading the archive. NULL for rows pushed before.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN, no batch: rebuilding ``variants`` on SQLite would cost a copy of the
    # table and cascade its drop to the rows that reference it (revision 0015).
    op.add_column("variants", sa.Column("stablehlo_version", sa.String(length=40), nullable=True))


def downgrade() -> None:
    op.drop_column("variants", "stablehlo_version")  # SQLite >= 3.35: a plain DROP COLUMN
