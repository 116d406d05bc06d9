"""The results store: SQLite by default, PostgreSQL by URL, schema migrated with Alembic.

Example::

    from vmtax.store import Store
    store = Store.open()                 # $VMTAX_DB or vmtax.db in the user data directory
    runs = store.runs(["exp=latest"])
    samples = store.samples(runs["run_id"])
"""

from vmtax.store.store import RUN_COLUMNS, Store, config_key, hypervisor_of

__all__ = ["RUN_COLUMNS", "Store", "config_key", "hypervisor_of"]
