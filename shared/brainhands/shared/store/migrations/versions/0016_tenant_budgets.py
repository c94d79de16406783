"""tenant budgets: an operator's limits on what a tenant's sessions spend
(``tenant_budget``), and what they have spent, in shards by session (``tenant_usage``),
added to in the commit that records each model answer and tool dispatch

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_budget",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("set_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_budget")),
    )
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("cost", sa.Float(), nullable=False, server_default="0"),
        sa.Column("tool_calls", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("tenant", "shard", name=op.f("pk_tenant_usage")),
    )


def downgrade() -> None:
    op.drop_table("tenant_usage")
    op.drop_table("tenant_budget")
