"""a partial index on checkpoint entries: a Brain's claim finds a session's latest
checkpoint (and reads its entries from there on) without reading the entries before it

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain CREATE INDEX (migrations run in a transaction): it holds off writes to the
    # entry table while it reads the table once; the index holds the few checkpoints only.
    op.create_index(
        "ix_entry_checkpoint",
        "entry",
        ["session_id", "seq"],
        unique=False,
        postgresql_where=sa.text("kind = 'checkpoint'"),
        sqlite_where=sa.text("kind = 'checkpoint'"),
    )


def downgrade() -> None:
    op.drop_index("ix_entry_checkpoint", table_name="entry")
