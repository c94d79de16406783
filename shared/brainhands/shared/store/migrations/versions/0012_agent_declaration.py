"""agent declarations and callbacks: the agents each Brain compatibility key serves, as
its Brains say; and a submission's webhook, with how its delivery stands

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
    with op.batch_alter_table("submission") as batch_op:
        batch_op.add_column(sa.Column("callback_url", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("callback_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("callback_next_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("callback_done_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("callback_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("submission") as batch_op:
        for column in ("callback_error", "callback_done_at", "callback_next_at"):
            batch_op.drop_column(column)
        batch_op.drop_column("callback_attempts")
        batch_op.drop_column("callback_url")
    op.drop_table("agent_declaration")
