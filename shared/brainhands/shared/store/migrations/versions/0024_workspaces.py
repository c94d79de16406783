"""workspaces: a session's versioned file trees and their content-addressed objects
(``workspace_version``, ``workspace_object``)

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 12:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workspace_version",
        sa.Column("session_id", sa.String(160), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("root", sa.String(64), nullable=False),
        sa.Column("operation_id", sa.String(64), nullable=True),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "name", "version", name=op.f("pk_workspace_version")),
    )
    op.create_table(
        "workspace_object",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.Column("location", sa.String(200), nullable=True),
        sa.Column("touched_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "hash", name=op.f("pk_workspace_object")),
    )


def downgrade() -> None:
    op.drop_table("workspace_object")
    op.drop_table("workspace_version")
