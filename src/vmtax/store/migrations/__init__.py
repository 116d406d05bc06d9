"""Alembic migrations of the store schema, shipped inside the package."""
