"""agent declarations: the agents each Brain compatibility key serves, as its Brains say

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 19:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_declaration",
        sa.Column("compat", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("declared_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("compat", "name", name=op.f("pk_agent_declaration")),
    )


def downgrade() -> None:
    op.drop_table("agent_declaration")
