"""webhook secrets per tenant: which generation of a tenant's webhook secret (derived from
the deployment's key, never stored) signs its posts, and until when the previous one signs
them too (``webhook_secret``); and what a tenant's view says of a failed delivery made
the words it is told now (the transport's error it kept before told what listens where)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 23:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_secret",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("previous_until", sa.Float(), nullable=True),
        sa.Column("rotated_by", sa.String(128), nullable=False),
        sa.Column("rotated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_webhook_secret")),
    )
    op.execute(
        "UPDATE submission SET callback_error = "
        "'delivery failed (HTTP status ' || substr(callback_error, 10) || ')' "
        "WHERE callback_error LIKE 'answered %'"
    )
    op.execute(
        "UPDATE submission SET callback_error = 'delivery failed' "
        "WHERE callback_error IS NOT NULL AND callback_error NOT LIKE 'delivery failed%' "
        "AND callback_error <> 'refused destination'"
    )


def downgrade() -> None:
    op.drop_table("webhook_secret")  # the errors' words stay: no view needs the old ones
