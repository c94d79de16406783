"""sessions get a random uid (the root of their operation ids); operations count interruptions

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:10:00.000000

Existing sessions get a random uid too; tasks and operations already created keep their ids.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("session", schema=None) as batch_op:
        batch_op.add_column(sa.Column("uid", sa.String(32), nullable=True))
    session = sa.table("session", sa.column("id", sa.String), sa.column("uid", sa.String))
    conn = op.get_bind()
    ids = [row.id for row in conn.execute(sa.select(session.c.id))]
    for session_id in ids:
        conn.execute(
            session.update().where(session.c.id == session_id).values(uid=uuid.uuid4().hex)
        )
    with op.batch_alter_table("session", schema=None) as batch_op:
        batch_op.alter_column("uid", existing_type=sa.String(32), nullable=False)
        batch_op.create_unique_constraint("uq_session_uid", ["uid"])
    with op.batch_alter_table("operation", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("interruptions", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("operation", schema=None) as batch_op:
        batch_op.drop_column("interruptions")
    with op.batch_alter_table("session", schema=None) as batch_op:
        batch_op.drop_constraint("uq_session_uid", type_="unique")
        batch_op.drop_column("uid")
