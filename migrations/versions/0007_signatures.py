"""signatures: Sigstore bundles (``model-signing``) over archive digests, like OCI referrers

A row says that the bundle blob ``bundle_digest`` signs the archive ``digest`` (a variant's),
by the signer ``signer`` (the sha256 of its public key's DER SubjectPublicKeyInfo).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signatures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("bundle_digest", sa.String(length=64), nullable=False),
        sa.Column("signer", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["bundle_digest"], ["blobs.digest"], name=op.f("fk_signatures_bundle_digest_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["digest"], ["blobs.digest"], name=op.f("fk_signatures_digest_blobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signatures")),
        sa.UniqueConstraint("digest", "signer", name=op.f("uq_signatures_digest")),
    )
    with op.batch_alter_table("signatures", schema=None) as batch_op:
        batch_op.create_index("ix_signatures_bundle_digest", ["bundle_digest"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("signatures", schema=None) as batch_op:
        batch_op.drop_index("ix_signatures_bundle_digest")
    op.drop_table("signatures")
