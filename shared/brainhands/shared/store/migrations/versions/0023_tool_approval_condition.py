"""a tool's declaration may hold a condition on a call's arguments under which the call
waits for approval (``@tool(approval=arg("amount") > 100)``); rows declared before it have
none, and keep meaning what their ``approval`` column says

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 06:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tool_declaration", sa.Column("approval_when", sa.JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("tool_declaration", "approval_when")
