"""a partial index on queued submissions: the sweeper's look for them reads those few, not
every submission ever answered

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain CREATE INDEX (migrations run in a transaction): it holds off writes to the
    # submission table while it reads the table once (0.08 s for a million submissions,
    # cached, in bench.history).
    op.create_index(
        "ix_submission_queued",
        "submission",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("status = 'queued'"),
        sqlite_where=sa.text("status = 'queued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_submission_queued", table_name="submission")
