"""Schema versions: Alembic revisions, upgrades, and refusing what must not be touched."""

from __future__ import annotations

import sqlite3

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from vmtax.errors import VmtaxError
from vmtax.store import Store, migrate
from vmtax.store.models import Base

pytestmark = pytest.mark.fast


def alembic_versions(url: str) -> list[str]:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as c:
        rows = [r[0] for r in c.execute(text("SELECT version_num FROM alembic_version"))]
    engine.dispose()
    return rows


def test_new_store_is_created_at_the_head_revision(any_url):
    with Store.open(any_url) as s:
        assert s.info()["schema_version"] == migrate.head()
    assert alembic_versions(any_url) == [migrate.head()]


def test_reopening_is_a_no_op(sqlite_url):
    path = sqlite_url.removeprefix("sqlite:///")
    Store.open(sqlite_url).close()
    with sqlite3.connect(path) as c:
        before = c.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
        c.execute("CREATE TABLE canary (x)")  # a rebuild would drop it
    with Store.open(sqlite_url) as s:
        assert s.info()["schema_version"] == migrate.head()
    with sqlite3.connect(path) as c:
        after = c.execute("SELECT sql FROM sqlite_master WHERE name != 'canary' ORDER BY name")
        assert after.fetchall() == before
        assert c.execute("SELECT count(*) FROM sqlite_master WHERE name='canary'").fetchone()
    assert alembic_versions(sqlite_url) == [migrate.head()]


def test_older_schema_is_upgraded(sqlite_url):
    # An empty database sits at the oldest point of the chain (no revision); open migrates it.
    engine = create_engine(sqlite_url)
    with engine.begin() as c:
        assert migrate.current(c) is None
    with Store.open(sqlite_url, upgrade=False, read_only=True, check_schema=False) as s:
        assert s.info()["schema_version"] is None
    with pytest.raises(VmtaxError, match="vmtax db upgrade"):
        Store.open(sqlite_url, read_only=True)
    with Store.open(sqlite_url) as s:
        assert s.info()["schema_version"] == migrate.head()
    assert set(inspect(engine).get_table_names()) >= {
        "experiments", "configurations", "runs", "samples", "alembic_version",
    }  # fmt: skip


def test_models_and_migrations_agree(any_url):
    # The ORM models and the shipped revisions must describe the same schema.
    Store.open(any_url).close()
    engine = create_engine(any_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), Base.metadata)
    engine.dispose()
    assert diff == []


def test_bad_input_store_from_a_newer_vmtax(sqlite_url):
    Store.open(sqlite_url).close()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as c:
        c.execute("UPDATE alembic_version SET version_num = '0099_future'")
    with pytest.raises(VmtaxError) as err:
        Store.open(sqlite_url)
    msg = str(err.value)
    assert "0099_future" in msg and "newer" in msg and "\n" not in msg
    # and it was not touched
    assert alembic_versions(sqlite_url) == ["0099_future"]


def test_bad_input_database_that_is_not_a_vmtax_store(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(VmtaxError, match="not a vmtax store"):
        Store.open(str(path))
    with sqlite3.connect(path) as c:
        names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert names == ["invoices"]


def test_bad_input_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are not the tables you are looking for\n" * 100)
    with pytest.raises(VmtaxError) as err:
        Store.open(str(path))
    assert "not a SQLite database" in str(err.value)
    assert "\n" not in str(err.value)
