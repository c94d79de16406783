"""brainhands_refuse(code, message): a function that raises, so that a commit written as one
statement (``shared/store/chained.py``) can fail as a whole when one of its checks does

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 18:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # PostgreSQL only: SQLite writes a commit as a transaction of several statements, and a
    # failed check raises in Python there.
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE OR REPLACE FUNCTION brainhands_refuse(code text, message text) RETURNS integer
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
        END
        $$
        """
    )


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS brainhands_refuse(text, text)")
