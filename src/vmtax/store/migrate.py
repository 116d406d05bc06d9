"""Schema versions: Alembic, driven from Python with the migrations shipped in the package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect

from vmtax.errors import VmtaxError

_HERE = Path(__file__).resolve().parent / "migrations"


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest schema revision this vmtax knows."""
    rev = ScriptDirectory.from_config(_config()).get_current_head()
    if rev is None:  # the package was installed without its migrations
        raise VmtaxError("vmtax is installed without its store migrations")
    return rev


def current(connection: Connection) -> str | None:
    """The schema revision recorded in the database (None for an empty database)."""
    return MigrationContext.configure(connection).get_current_revision()


def known(revision: str) -> bool:
    """Whether this vmtax's migrations contain ``revision``."""
    script = ScriptDirectory.from_config(_config())
    return any(s.revision == revision for s in script.walk_revisions())


def check(connection: Connection, where: str) -> str | None:
    """The database's revision, after refusing what this vmtax must not touch.

    A revision newer than this vmtax knows means the store was written by a newer release;
    tables without any revision mean a database that is not a vmtax store. Neither is ever
    rebuilt.
    """
    rev = current(connection)
    if rev is None:
        foreign = [t for t in inspect(connection).get_table_names() if t != "alembic_version"]
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
    target = head()
    with engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            # The driver begins a transaction only before a write, so the check and the
            # CREATE TABLEs would each commit alone, and a second controller opening the new
            # file could see tables without a version. Taking the write lock first makes the
            # whole upgrade one transaction: the other waits (busy timeout), then finds it done.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        rev = check(connection, where)
        if rev != target:
            command.upgrade(_config(connection), "head")
    return target
