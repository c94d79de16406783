"""documents as a baseline and increments: every write appends its JSON Patch to
``document_increment`` (the document's history); the ``document`` row keeps the baseline
(its value at version ``baseline``) and the version of its kind the value was written at

A document written before this revision is its own baseline (``baseline = version``); its
history starts with its next write. Downgraded, each document's row gets its latest value
back (its increments folded in) and the history is dropped.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 09:00:00.000000
"""

from __future__ import annotations

import jsonpatch
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "document", sa.Column("baseline", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.add_column("document", sa.Column("kind_version", sa.Integer(), nullable=True))
    op.execute("UPDATE document SET baseline = version")
    op.create_table(
        "document_increment",
        sa.Column("session_id", sa.String(160), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("patch", sa.JSON(), nullable=False),
        sa.Column("kind_version", sa.Integer(), nullable=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["session.id"], name=op.f("fk_document_increment_session_id_session")
        ),
        sa.PrimaryKeyConstraint(
            "session_id", "name", "version", name=op.f("pk_document_increment")
        ),
    )


def downgrade() -> None:
    bind = op.get_bind()
    doc = sa.table(
        "document",
        sa.column("session_id", sa.String),
        sa.column("name", sa.String),
        sa.column("body", sa.JSON),
        sa.column("baseline", sa.BigInteger),
        sa.column("version", sa.BigInteger),
    )
    inc = sa.table(
        "document_increment",
        sa.column("session_id", sa.String),
        sa.column("name", sa.String),
        sa.column("version", sa.BigInteger),
        sa.column("patch", sa.JSON),
    )
    ahead = bind.execute(sa.select(doc).where(doc.c.version > doc.c.baseline)).all()
    for row in ahead:
        body = row.body
        patch: list[dict[str, object]]
        for patch in bind.execute(
            sa.select(inc.c.patch)
            .where(
                inc.c.session_id == row.session_id,
                inc.c.name == row.name,
                inc.c.version > row.baseline,
            )
            .order_by(inc.c.version)
        ).scalars():
            body = jsonpatch.apply_patch(body, patch)
        bind.execute(
            sa.update(doc)
            .where(doc.c.session_id == row.session_id, doc.c.name == row.name)
            .values(body=body)
        )
    op.drop_table("document_increment")
    op.drop_column("document", "kind_version")
    op.drop_column("document", "baseline")
