"""durable waits for signals (and the approvals built on them): what a task waits for and
what it received, each request's signal name, which tools need approval, and the root task
that answers a submission (its own, or the agent loop a follow-up joined)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 12:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("wait_signal", sa.String(128), nullable=True))
        batch_op.add_column(
            sa.Column("wait_exclusive", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("signal", sa.JSON(), nullable=True))
    with op.batch_alter_table("inbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("name", sa.String(128), nullable=True))
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.add_column(sa.Column("task_id", sa.String(64), nullable=True))
    with op.batch_alter_table("tool_declaration", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("approval", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("tool_declaration", schema=None) as batch_op:
        batch_op.drop_column("approval")
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.drop_column("task_id")
    with op.batch_alter_table("inbox", schema=None) as batch_op:
        batch_op.drop_column("name")
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.drop_column("signal")
        batch_op.drop_column("wait_exclusive")
        batch_op.drop_column("wait_signal")
