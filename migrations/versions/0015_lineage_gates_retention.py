"""Issue 26: lineage and provenance columns and soft deletion on ``versions``; ``alias_gates``
(protected aliases), ``retention_policies`` and ``jax_releases`` (the release watcher).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_VERSION_COLUMNS = (
    ("derivation", sa.String(length=40)),
    ("git_commit", sa.String(length=64)),
    ("function_qualname", sa.Text()),
    ("pushed_jax_version", sa.String(length=40)),
    ("pushed_jaxlib_version", sa.String(length=40)),
    ("pushed_host", sa.String(length=255)),
    ("pushed_by", sa.String(length=200)),
    ("deleted_at", sa.Float()),
    ("restorable_until", sa.Float()),
)


def upgrade() -> None:
    # Plain ADD COLUMN, no batch: rebuilding ``versions`` on SQLite would drop it, and the drop
    # cascades to every variant while foreign keys are on.
    op.add_column("versions", sa.Column("derived_from_id", sa.Integer(), nullable=True))
    for name, type_ in _VERSION_COLUMNS:
        op.add_column("versions", sa.Column(name, type_, nullable=True))
    op.create_index(op.f("ix_versions_derived_from_id"), "versions", ["derived_from_id"])
    op.create_table(
        "alias_gates",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=200), nullable=False),
        sa.Column("require_signature", sa.Text(), nullable=True),
        sa.Column("require_audit", sa.String(length=20), nullable=True),
        sa.Column("jax_releases", sa.Text(), nullable=False),
        sa.Column("platforms", sa.Text(), nullable=False),
        sa.Column("require_goldens", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_alias_gates_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("model_id", "alias", name=op.f("pk_alias_gates")),
    )
    op.create_table(
        "retention_policies",
        sa.Column("prefix", sa.String(length=200), nullable=False),
        sa.Column("keep_last", sa.Integer(), nullable=True),
        sa.Column("keep_younger_than", sa.Float(), nullable=True),
        sa.Column("keep_ok_per_target", sa.Boolean(), nullable=False),
        sa.Column("restore_period", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("prefix", name=op.f("pk_retention_policies")),
    )
    op.create_table(
        "jax_releases",
        sa.Column("package", sa.String(length=20), nullable=False),
        sa.Column("version", sa.String(length=40), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.Column("uploaded_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("package", "version", name=op.f("pk_jax_releases")),
    )


def downgrade() -> None:
    op.drop_table("jax_releases")
    op.drop_table("retention_policies")
    op.drop_table("alias_gates")
    op.drop_index(op.f("ix_versions_derived_from_id"), table_name="versions")
    for name, _ in reversed(_VERSION_COLUMNS):
        op.drop_column("versions", name)  # SQLite >= 3.35: a plain DROP COLUMN
    op.drop_column("versions", "derived_from_id")
