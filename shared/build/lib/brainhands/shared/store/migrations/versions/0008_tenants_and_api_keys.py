"""tenants and API keys: the tenant a session belongs to, and the API's keys (hashed)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 13:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("session", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(64), nullable=True))
        batch_op.create_index("ix_session_tenant_updated", ["tenant", "updated_at"])
    op.create_table(
        "api_key",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_key")),
    )


def downgrade() -> None:
    op.drop_table("api_key")
    with op.batch_alter_table("session", schema=None) as batch_op:
        batch_op.drop_index("ix_session_tenant_updated")
        batch_op.drop_column("tenant")
