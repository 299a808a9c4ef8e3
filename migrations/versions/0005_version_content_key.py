"""a version's content key, unique per name: identical content pushed at once is one version

``versions.content_key`` is the sha256 of the version's variant digests (in order) and its
golden examples' digest (``jaxport.registry._internal.content_key``). Existing versions are
backfilled; where an older jaxport made one content twice under one name (concurrent pushes on
PostgreSQL), the newest such version gets the key (the one push returned) and the others keep
NULL, so the unique index can be built and no version is lost.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("versions", sa.Column("content_key", sa.String(length=64), nullable=True))
    _backfill(op.get_bind())
    op.create_index("ix_versions_content_key", "versions", ["content_key", "model_id"], unique=True)


def _backfill(conn: sa.Connection) -> None:
    from jaxport.registry._internal import content_key

    variants: dict[int, list[str]] = defaultdict(list)
    for version_id, digest in conn.execute(
        sa.text("SELECT version_id, digest FROM variants ORDER BY version_id, id")
    ):
        variants[version_id].append(digest)
    examples = {
        version_id: digest
        for version_id, digest in conn.execute(sa.text("SELECT version_id, digest FROM examples"))
    }
    keyed: set[tuple[int, str]] = set()
    rows = conn.execute(
        sa.text("SELECT id, model_id FROM versions ORDER BY model_id, version DESC")
    ).all()
    for version_id, model_id in rows:
        if version_id not in variants:
            continue
        key = content_key(variants[version_id], examples.get(version_id))
        if (model_id, key) in keyed:  # an older copy of the same content: left NULL
            continue
        keyed.add((model_id, key))
        conn.execute(
            sa.text("UPDATE versions SET content_key = :k WHERE id = :i"),
            {"k": key, "i": version_id},
        )


def downgrade() -> None:
    op.drop_index("ix_versions_content_key", table_name="versions")
    # Plain ALTER TABLE (SQLite >= 3.35): a batch copy of ``versions`` would drop the old
    # table, and with foreign keys on that cascades to every variant.
    op.drop_column("versions", "content_key")
