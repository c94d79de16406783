"""a durable per-session inbox of requests (cancel, later signals) that a Brain applies

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("body", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("applied_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["session.id"], name=op.f("fk_inbox_session_id_session")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox")),
        sa.UniqueConstraint("session_id", "kind", "key", name=op.f("uq_inbox_session_id_kind_key")),
    )
    op.create_index(
        "ix_inbox_unapplied",
        "inbox",
        ["session_id"],
        unique=False,
        postgresql_where=sa.text("applied_at IS NULL"),
        sqlite_where=sa.text("applied_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_inbox_unapplied", table_name="inbox")
    op.drop_table("inbox")
