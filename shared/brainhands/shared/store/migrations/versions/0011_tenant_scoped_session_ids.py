"""tenant-scoped session ids: every session has a tenant, and a tenant's sessions are keyed
``<tenant>/<id>`` (the default tenant's keep their id), so two tenants never share an id

Sessions made without a tenant (by the CLI, the Python client, or the API with
authentication off) become the default tenant's, their ids unchanged. Sessions a tenant's
API key made before are re-keyed ``<tenant>/<id>`` in every table that names them, unsent
outbox messages included. Run it with the workers stopped: a message already in the broker
that names an old key finds no session and is parked, and the sweeper re-sends what still
matters from the store.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 18:30:00.000000
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

DEFAULT_TENANT = "default"
# Where a session's key is written besides its own row.
NAMED_IN = ("entry", "document", "task", "submission", "outbox", "operation", "inbox")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":  # SQLite does not enforce a string's length
        for table in ("session", *NAMED_IN):
            column = "id" if table == "session" else "session_id"
            op.alter_column(table, column, type_=sa.String(160), existing_type=sa.String(64))
    op.execute(
        sa.text("UPDATE session SET tenant = :default WHERE tenant IS NULL").bindparams(
            default=DEFAULT_TENANT
        )
    )
    legacy = bind.execute(
        sa.text(
            "SELECT id, uid, tenant FROM session WHERE tenant <> :default AND id NOT LIKE '%/%'"
        ).bindparams(default=DEFAULT_TENANT)
    ).all()
    columns = [c["name"] for c in sa.inspect(bind).get_columns("session")]
    for old, uid, tenant in legacy:
        _rekey(bind, columns, str(old), f"{tenant}/{old}", str(uid))
    if bind.dialect.name == "postgresql":
        # SQLite alters a column only by copying its table, which the tables that refer to
        # the session's forbid; there every writer names the tenant all the same.
        op.alter_column(
            "session",
            "tenant",
            existing_type=sa.String(64),
            nullable=False,
            server_default=DEFAULT_TENANT,
        )
    with op.batch_alter_table("submission") as batch_op:
        batch_op.add_column(sa.Column("principal", sa.String(160), nullable=True))


def _rekey(bind: sa.Connection, columns: list[str], old: str, new: str, uid: str) -> None:
    """Give session ``old`` the key ``new``: a copy of its row under the new key (its uid,
    unique, parked on a value no uid has while both rows exist), its rows moved over, the
    old row dropped."""
    bind.execute(sa.text("UPDATE session SET uid = :parked WHERE id = :old"), {
        "parked": "~" + uid[1:], "old": old,
    })  # fmt: skip
    others = ", ".join(c for c in columns if c not in ("id", "uid"))
    bind.execute(
        sa.text(
            f"INSERT INTO session (id, uid, {others}) "
            f"SELECT :new, :uid, {others} FROM session WHERE id = :old"
        ),
        {"new": new, "uid": uid, "old": old},
    )
    for table in NAMED_IN:
        bind.execute(
            sa.text(f"UPDATE {table} SET session_id = :new WHERE session_id = :old"),
            {"new": new, "old": old},
        )
    unsent = bind.execute(
        sa.text("SELECT id, body FROM outbox WHERE session_id = :new AND sent_at IS NULL"),
        {"new": new},
    ).all()
    for row_id, body in unsent:
        message = json.loads(bytes(body))  # type: ignore[call-overload]
        if message.get("session_id") == old:
            message["session_id"] = new
            bind.execute(
                sa.text("UPDATE outbox SET body = :body WHERE id = :id"),
                {"body": json.dumps(message, separators=(",", ":")).encode(), "id": row_id},
            )
    bind.execute(sa.text("DELETE FROM session WHERE id = :old"), {"old": old})


def downgrade() -> None:
    with op.batch_alter_table("submission") as batch_op:
        batch_op.drop_column("principal")
    # Keys stay as they are: a tenant's ``<tenant>/<id>`` session keeps its key (an id with
    # '/' was never made before this revision, and nothing needs it shorter).
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "session", "tenant", existing_type=sa.String(64), nullable=True, server_default=None
        )
