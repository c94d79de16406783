"""schedules: a tenant's cron or interval schedules, each tick submitted once
(``schedule``)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 06:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent", sa.String(128), nullable=True),
        sa.Column("kind", sa.String(128), nullable=True),
        sa.Column("input", sa.JSON(), nullable=True),
        sa.Column("compat", sa.String(64), nullable=False),
        sa.Column("cron", sa.String(256), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=True),
        sa.Column("every", sa.Integer(), nullable=True),
        sa.Column("missed", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_tick_at", sa.Float(), nullable=False),
        sa.Column("last_tick_at", sa.Float(), nullable=True),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "id", name=op.f("pk_schedule")),
    )
    op.create_index("ix_schedule_state_next_tick_at", "schedule", ["state", "next_tick_at"])


def downgrade() -> None:
    op.drop_index("ix_schedule_state_next_tick_at", table_name="schedule")
    op.drop_table("schedule")
