"""a tool's declaration says why it got its replay policy (an MCP tool's annotations, its
server's trust, the configuration), so ``brainhands tools`` can show it

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 23:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tool_declaration", sa.Column("policy_reason", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("tool_declaration", "policy_reason")
