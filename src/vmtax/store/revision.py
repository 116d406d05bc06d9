"""The newest schema revision, known without SQLAlchemy or Alembic (``store.migrate`` and
the read-only door ``store.reader`` compare a store's version row with it)."""

from __future__ import annotations

#: The newest revision under migrations/versions (tests check it against Alembic's head: a
#: new revision must move it).
HEAD = "0007"
#: Alembic's version table (the default name; migrations/env.py does not change it).
VERSION_TABLE = "alembic_version"
