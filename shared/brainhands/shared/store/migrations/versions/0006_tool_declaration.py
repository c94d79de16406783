"""tools declared by the Hands that serve them: name, pool, policy, description, schema

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 10:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_declaration",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("policy", sa.String(16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("args_schema", sa.JSON(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("declared_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tool_declaration")),
    )


def downgrade() -> None:
    op.drop_table("tool_declaration")
