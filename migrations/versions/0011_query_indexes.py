"""query_indexes: an index on ``variants.fun_name``, so that ``search(fun_name=...)`` reads
the variants of that function only (and none when it matches nothing)

On PostgreSQL a hash index: ``fun_name`` is unbounded text, and a B-tree entry must fit in a
third of a page (a longer name would make its push fail); equality is all ``search`` asks of
it. On SQLite a B-tree (no such limit), whose entries are in rowid order: a page of a
``fun_name`` search is read in ``variant_id`` order, without a sort.

The other query paths of ``registry/_queries.py`` are served by indexes that revision 0001
made (``models.name``, ``versions (model_id, version)``, ``aliases``, ``variants.version_id``,
``variant_platforms (platform, variant_id)``); see that module's docstring.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_variants_fun_name", "variants", ["fun_name"], postgresql_using="hash")


def downgrade() -> None:
    op.drop_index("ix_variants_fun_name", table_name="variants")
