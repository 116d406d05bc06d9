"""Alembic environment: vmtax always hands over an open connection (see store/migrate.py)."""

from __future__ import annotations

from alembic import context

from vmtax.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("vmtax migrations run through vmtax.store.migrate, not the alembic CLI")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
