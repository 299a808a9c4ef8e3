"""variant_filter_indexes: an index ``(column, id)`` on each column ``search`` filters by that
had none (``jax_version``, ``calling_convention_version``, ``shape_polymorphic``,
``nr_devices``), so that a search driven by one of them alone reads one range in
``variant_id`` order and a search that matches nothing is answered from an index (before, it
read every variant); on PostgreSQL ``jax_version`` is compared bytewise (collation "C", as on
SQLite), so that the versions starting with ``P.`` are one index range.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_variants_jax_version": "jax_version",
    "ix_variants_calling_convention": "calling_convention_version",
    "ix_variants_shape_polymorphic": "shape_polymorphic",
    "ix_variants_nr_devices": "nr_devices",
}


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "variants",
            "jax_version",
            type_=sa.String(40, collation="C"),
            existing_type=sa.String(40),
            existing_nullable=False,
        )
    for index, column in _INDEXES.items():
        op.create_index(index, "variants", [column, "id"], unique=False)


def downgrade() -> None:
    for index in _INDEXES:
        op.drop_index(index, table_name="variants")
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "variants",
            "jax_version",
            type_=sa.String(40),
            existing_type=sa.String(40, collation="C"),
            existing_nullable=False,
        )
