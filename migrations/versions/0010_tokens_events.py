"""tokens and events: the registry server's bearer tokens and the append-only event log

``tokens``: one row per bearer token of the registry server (``jaxport token create``): its
``name`` (unique, shown in the event log), the sha256 of its secret (the secret itself is never
stored), its scopes (``read``, ``write``, ``admin``, space-separated), the name prefixes it is
limited to (space-separated; empty: every name), and when it was made, expires and was revoked
(unix seconds; null: never).

``events``: one row per write (push, alias move, delete, gc, token change), never updated or
deleted: who (``actor``: the token's name, or ``local:USER`` for a direct client), what
(``kind``), which name and version, and a JSON ``detail``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.String(length=100), nullable=False),
        sa.Column("prefixes", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_tokens_name")),
        sa.UniqueConstraint("secret_sha256", name=op.f("uq_tokens_secret_sha256")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index("ix_events_name_id", "events", ["name", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_name_id", table_name="events")
    op.drop_table("events")
    op.drop_table("tokens")
