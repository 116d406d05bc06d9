"""The results store: SQLite by default, PostgreSQL by URL, schema migrated with Alembic.

Example::

    from vmtax.store import Store
    store = Store.open()                 # $VMTAX_DB or vmtax.db in the user data directory
    runs = store.runs(["exp=latest"])
    samples = store.samples(runs["run_id"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vmtax.store.store import RUN_COLUMNS, Store, config_key, hypervisor_of

__all__ = ["RUN_COLUMNS", "Store", "config_key", "hypervisor_of"]


def __getattr__(name: str) -> object:
    # The store module loads SQLAlchemy, Alembic and pandas (about a second): only when one of
    # its names is used, so a module that needs only the selector grammar (`store.select`)
    # or a small value of this package does not pay for them.
    if name in __all__:
        from vmtax.store import store  # heavy: SQLAlchemy, Alembic and pandas, when first used

        return getattr(store, name)
    raise AttributeError(f"module 'vmtax.store' has no attribute {name!r}")
