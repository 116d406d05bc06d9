"""Schema versions: Alembic, driven from Python with the migrations shipped in the package.

Opening a store already at the newest revision (every open but the first after an upgrade)
reads its version row with SQLAlchemy alone and compares it with :data:`HEAD`: Alembic, and
the revision scripts it imports to find its head, cost a third of a second of CPU that a
`vmtax compare` or `vmtax report` of a current store does not need. Alembic loads only to
create, upgrade or refuse a store, and for `vmtax db info`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from vmtax.errors import VmtaxError
from vmtax.store import revision

if TYPE_CHECKING:
    from alembic.config import Config

_HERE = Path(__file__).resolve().parent / "migrations"

#: The newest revision under migrations/versions, known without Alembic (tests check it
#: against Alembic's head: a new revision must move it, in ``store.revision``).
HEAD = revision.HEAD
#: Alembic's version table (the default name; migrations/env.py does not change it).
_VERSION_TABLE = revision.VERSION_TABLE


def _config(connection: Connection | None = None) -> Config:
    # heavy: Alembic, only to create, upgrade or inspect a store's revisions
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest schema revision this vmtax knows."""
    # heavy: Alembic, only to create, upgrade or inspect a store's revisions
    from alembic.script import ScriptDirectory

    rev = ScriptDirectory.from_config(_config()).get_current_head()
    if rev is None:  # the package was installed without its migrations
        raise VmtaxError("vmtax is installed without its store migrations")
    return rev


def current(connection: Connection) -> str | None:
    """The schema revision recorded in the database (None for an empty database)."""
    # heavy: Alembic, only to create, upgrade or inspect a store's revisions
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def recorded(connection: Connection) -> list[str] | None:
    """The revisions in the database's version table, read without Alembic; None when it has
    no version table."""
    if not inspect(connection).has_table(_VERSION_TABLE):
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}"))
    return [str(row[0]) for row in rows]


def known(revision: str) -> bool:
    """Whether this vmtax's migrations contain ``revision``."""
    # heavy: Alembic, only to create, upgrade or inspect a store's revisions
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config())
    return any(s.revision == revision for s in script.walk_revisions())


def check(connection: Connection, where: str) -> str | None:
    """The database's revision, after refusing what this vmtax must not touch.

    A revision newer than this vmtax knows means the store was written by a newer release;
    tables without any revision mean a database that is not a vmtax store. Neither is ever
    rebuilt. A store at :data:`HEAD` is known at once, without Alembic.
    """
    if recorded(connection) == [HEAD]:
        return HEAD
    rev = current(connection)
    if rev is None:
        foreign = [t for t in inspect(connection).get_table_names() if t != _VERSION_TABLE]
        if foreign:
            raise VmtaxError(
                f"{where} is not a vmtax store: it has tables ({', '.join(sorted(foreign)[:5])}) "
                "but no vmtax schema version; use another database"
            )
        return None
    if not known(rev):
        raise VmtaxError(
            f"{where} has schema version {rev}, newer than this vmtax understands "
            f"(it knows up to {head()}): upgrade vmtax to read it"
        )
    return rev


def upgrade(engine: Engine, where: str) -> str:
    """Bring the schema to the newest revision in one transaction; returns that revision."""
    with engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            # The driver begins a transaction only before a write, so the check and the
            # CREATE TABLEs would each commit alone, and a second controller opening the new
            # file could see tables without a version. Taking the write lock first makes the
            # whole upgrade one transaction: the other waits (busy timeout), then finds it done.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        rev = check(connection, where)
        if rev == HEAD:
            return HEAD
        target = head()
        if rev != target:
            # heavy: Alembic, only to create or upgrade a store
            from alembic import command

            command.upgrade(_config(connection), "head")
    return target
