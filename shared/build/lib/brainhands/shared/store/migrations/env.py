"""Alembic environment: always driven from ``shared.store.migrate`` with a live connection."""

from __future__ import annotations

from alembic import context

from brainhands.shared.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
context.run_migrations()
