"""operations whose arguments are too large to go inline reference them in a blob

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 11:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("arguments_blob_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operation", schema=None) as batch_op:
        batch_op.drop_column("arguments_blob_id")
