"""erasure: a record of each session erased, by a request or at the end of its retention,
with the Redis keys left to delete (``erasure``)

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "erasure",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.String(160), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(160), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("rows", sa.JSON(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=True),
        sa.Column("erased_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_erasure")),
    )
    op.create_index(op.f("ix_erasure_session_id"), "erasure", ["session_id"])
    op.create_index(
        "ix_erasure_resources",
        "erasure",
        ["id"],
        postgresql_where=sa.text("resources IS NOT NULL"),
        sqlite_where=sa.text("resources IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_erasure_resources", table_name="erasure")
    op.drop_index(op.f("ix_erasure_session_id"), table_name="erasure")
    op.drop_table("erasure")
