"""an operation keeps the handle a tool noted for its call (``handle``): the id an external
system gave the work the call started (an MCP server's task id), committed before the tool
waits for it, so a Hands that takes the call over after a death asks about that work
instead of starting it again

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 03:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operation", sa.Column("handle", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("operation", "handle")
