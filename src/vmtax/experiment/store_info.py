"""The `vmtax db` use cases: what a store holds and which schema it has, and bringing its
schema up to this vmtax's version."""

from __future__ import annotations

from typing import Any

from vmtax.store import Store, migrate


def info(db: str | None) -> dict[str, Any]:
    """The store's URL (password hidden), backend, schema version, this vmtax's schema head,
    whether this vmtax knows the store's schema, and row counts; nothing is created or
    upgraded, so an empty or outdated store can be looked at."""
    with Store.open(db, upgrade=False, read_only=True, check_schema=False) as store:
        data = store.info()
    version = data["schema_version"]
    return {**data, "schema_known": bool(version) and migrate.known(version)}


def upgrade(db: str | None) -> tuple[str, str]:
    """Create the store or migrate its schema; its URL (password hidden) and schema version."""
    with Store.open(db) as store:
        return store.url_display, migrate.head()
