"""an operation counts the claims made on it since what its holders did was last written
down (``unsettled_claims``): a Hands learns from its own claim whether an earlier holder may
have started the call with no mark, so a holder that died before the tool began spends no
interruption

Rows written before this revision have none (NULL): their next claim takes every earlier
claim as one that may have started the call, as before.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 23:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operation", sa.Column("unsettled_claims", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("operation", "unsettled_claims")
