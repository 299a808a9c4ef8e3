"""Issue 27: ``compiled`` and ``compiled_files``: signed sets of compiled executables (the files
jax's persistent compilation cache writes) of an archive's methods, per host kind.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_KEY = (
    "digest", "method", "platform", "device_kind", "jax_version", "jaxlib_version",
    "options_digest",
)  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "compiled",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("method", sa.String(length=200), nullable=False),
        sa.Column("platform", sa.String(length=20), nullable=False),
        sa.Column("device_kind", sa.String(length=200), nullable=False),
        sa.Column("jax_version", sa.String(length=40), nullable=False),
        sa.Column("jaxlib_version", sa.String(length=40), nullable=False),
        sa.Column("nr_devices", sa.Integer(), nullable=False),
        sa.Column("options_digest", sa.String(length=64), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("manifest_digest", sa.String(length=64), nullable=False),
        sa.Column("bundle_digest", sa.String(length=64), nullable=False),
        sa.Column("signer", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["digest"], ["blobs.digest"], name=op.f("fk_compiled_digest_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["manifest_digest"], ["blobs.digest"], name=op.f("fk_compiled_manifest_digest_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["bundle_digest"], ["blobs.digest"], name=op.f("fk_compiled_bundle_digest_blobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_compiled")),
        sa.UniqueConstraint(*_KEY, name=op.f("uq_compiled_digest")),
    )
    op.create_index("ix_compiled_bundle_digest", "compiled", ["bundle_digest"])
    op.create_table(
        "compiled_files",
        sa.Column("compiled_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["compiled_id"],
            ["compiled.id"],
            name=op.f("fk_compiled_files_compiled_id_compiled"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["digest"], ["blobs.digest"], name=op.f("fk_compiled_files_digest_blobs")
        ),
        sa.PrimaryKeyConstraint("compiled_id", "name", name=op.f("pk_compiled_files")),
    )
    op.create_index("ix_compiled_files_digest", "compiled_files", ["digest"])


def downgrade() -> None:
    op.drop_index("ix_compiled_files_digest", table_name="compiled_files")
    op.drop_table("compiled_files")
    op.drop_index("ix_compiled_bundle_digest", table_name="compiled")
    op.drop_table("compiled")
