"""a tool's declaration names the tool that compensates it (``@tool(compensate=...)``), so a
Brain that does not import the tool's code can undo its succeeded calls

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 14:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tool_declaration", sa.Column("compensate", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("tool_declaration", "compensate")
