"""signal namespaces: an inbox key holds a signal's id in the namespace of its kind
(``vocabulary.signal_key``: ``approval:<id>`` for a decision signal, ``brainhands.budget:<id>``
for a budget raise, ``brainhands.compensation:<id>`` for an act on a failed undo), so a
prefix and a 128-character id must fit

Keys written before keep their form; only new runtime signals are namespaced.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":  # SQLite does not enforce a string's length
        op.alter_column("inbox", "key", type_=sa.String(192), existing_type=sa.String(128))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("inbox", "key", type_=sa.String(128), existing_type=sa.String(192))
