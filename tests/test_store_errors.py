"""Bad databases: each gets one clear line (no traceback, no password) and a non-zero exit.

Read-only and full filesystems are real: a small tmpfs mounted for the test (needs root, as
scripts/test runs; the test fails rather than skips when it cannot mount).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_store_api import add, new_experiment
from vmtax.errors import UsageError, VmtaxError
from vmtax.store import Store, migrate

CLI = [sys.executable, "-c", "from vmtax.entry import main; main()"]


def vmtax_cli(*args: str) -> subprocess.CompletedProcess:
    """The real ``vmtax`` entry point in a child process (what a user runs)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("vmtax: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def tmpfs(tmp_path: Path):
    """Mount a tmpfs of the given size (KiB) on a fresh directory; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size_k: int) -> Path:
        if os.geteuid() != 0:
            pytest.fail("this test mounts a tmpfs and needs root (scripts/test runs as root)",
                        pytrace=False)  # fmt: skip
        where = tmp_path / f"mnt{len(mounted)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_k}k,mode=0755", "tmpfs",
                        str(where)], check=True)  # fmt: skip
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)


@pytest.mark.fast
def test_bad_input_unreachable_database():
    proc = vmtax_cli("db", "info", "--db", "postgresql://nobody@127.0.0.1:1/x")
    line = one_line_error(proc)
    assert "postgresql://nobody@127.0.0.1:1/x" in line
    assert "connection refused" in line


@pytest.mark.fast
def test_bad_input_unreachable_database_never_shows_the_password(cli):
    proc = cli("db", "upgrade", "--db", "postgresql://nobody:hunter2@127.0.0.1:1/x")
    line = one_line_error(proc)
    assert "hunter2" not in proc.stderr + proc.stdout
    assert "nobody:***@127.0.0.1" in line


@pytest.mark.slow
def test_bad_input_wrong_password_on_a_real_server(postgres_server, cli):
    s = postgres_server
    url = f"postgresql://{s['user']}:wrong-{s['password']}@{s['host']}:{s['port']}/postgres"
    line = one_line_error(cli("db", "info", "--db", url))
    assert "password authentication failed" in line
    assert s["password"] not in line and "***" in line


@pytest.mark.slow
def test_db_info_redacts_the_password(postgres_url, cli):
    password = postgres_url.split(":")[2].split("@")[0]
    proc = cli("db", "upgrade", "--db", postgres_url)
    assert proc.returncode == 0, proc.stderr
    proc = cli("db", "info", "--db", postgres_url)
    assert proc.returncode == 0, proc.stderr
    assert password not in proc.stdout + proc.stderr
    assert "vmtax:***@127.0.0.1" in proc.stdout
    assert migrate.head() in proc.stdout
    with Store.open(postgres_url) as store:
        assert password not in store.url_display and password not in str(store.info())
    # a failure after connecting (missing database) carries no password either
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_db"
    line = one_line_error(cli("db", "info", "--db", missing))
    assert "no_such_db" in line and password not in line


@pytest.mark.fast
def test_db_info_on_sqlite(sqlite_url, cli):
    assert cli("db", "upgrade", "--db", sqlite_url).returncode == 0
    proc = cli("db", "info", "--db", sqlite_url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert f'"schema_version": "{migrate.head()}"' in proc.stdout
    assert '"experiments": 0' in proc.stdout


@pytest.mark.fast
@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@host:notaport/db",
        "mysql://u:p@localhost/db",
        "sqlite://",
        "postgresql://u@localhost",
        "://nothing",
    ],
)
def test_bad_input_malformed_database_url(url, cli):
    with pytest.raises(UsageError) as err:
        Store.open(url)
    assert "\n" not in str(err.value)
    assert ":p@" not in str(err.value)
    proc = cli("db", "info", "--db", url)
    line = one_line_error(proc)
    assert proc.returncode == 2  # usage error
    assert "database URL" in line


@pytest.mark.fast
@pytest.mark.parametrize("command", [("db", "upgrade"), ("db", "info"), ("results", "list")])
def test_an_empty_db_is_refused_and_creates_no_default_store(command, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # where the default store would go
    proc = cli(*command, "--db", "")
    assert proc.returncode == 2 and "--db is empty" in one_line_error(proc)
    assert not any(tmp_path.rglob("*.db"))


@pytest.mark.fast
def test_bad_input_read_only_database_file(tmpfs, cli):
    where = tmpfs(4096)
    url = f"sqlite:///{where / 'vmtax.db'}"
    with Store.open(url) as s:
        exp = new_experiment(s)
    remount_read_only(where)
    with pytest.raises(VmtaxError) as err:
        Store.open(url)
    assert "read-only" in str(err.value) and "\n" not in str(err.value)
    line = one_line_error(cli("db", "upgrade", "--db", url))
    assert "read-only" in line
    # reading is still fine
    with Store.open(url, read_only=True) as s:
        assert s.experiment(exp)["status"] == "running"
    assert cli("db", "info", "--db", url).returncode == 0


@pytest.mark.fast
def test_bad_input_read_only_directory(tmpfs, cli):
    where = tmpfs(1024)
    remount_read_only(where)
    url = f"sqlite:///{where / 'vmtax.db'}"
    with pytest.raises(VmtaxError) as err:
        Store.open(url)
    assert "cannot open the database file" in str(err.value)
    line = one_line_error(cli("db", "upgrade", "--db", url))
    assert str(where) in line
    missing_parent = f"sqlite:///{where / 'sub' / 'vmtax.db'}"
    line = one_line_error(cli("db", "upgrade", "--db", missing_parent))
    assert "does not exist" in line


@pytest.mark.fast
def test_bad_input_locked_database(sqlite_url, cli):
    with Store.open(sqlite_url, busy_timeout=0.2) as store:
        exp = new_experiment(store)
        cfg = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                                  target="local", provenance={})  # fmt: skip
        other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process writing and not letting go
        try:
            with pytest.raises(VmtaxError) as err:
                add(store, exp, cfg, 0, 0, np.arange(5.0))
            assert "database is locked" in str(err.value)
            assert "\n" not in str(err.value)
            with pytest.raises(VmtaxError, match="database is locked"):
                Store.open(sqlite_url, busy_timeout=0.2)
            line = one_line_error(cli("db", "upgrade", "--db", sqlite_url))
            assert "database is locked" in line
        finally:
            other.execute("ROLLBACK")
            other.close()
        # once the lock is gone, writing works again
        add(store, exp, cfg, 0, 0, np.arange(5.0))


@pytest.mark.fast
def test_bad_input_full_disk(tmpfs):
    where = tmpfs(1024)
    url = f"sqlite:///{where / 'vmtax.db'}"
    rng = np.random.default_rng(1)
    stored: dict[int, np.ndarray] = {}
    with Store.open(url) as store:
        exp = new_experiment(store)
        cfg = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                                  target="local", provenance={})  # fmt: skip
        with pytest.raises(VmtaxError) as err:
            for i in range(100):  # random bits do not compress: 16 KiB per run
                values = rng.random(2000)
                stored[add(store, exp, cfg, i, 0, values)] = values
        msg = str(err.value)
        assert "disk is full" in msg and "\n" not in msg
        assert 0 < len(stored) < 100
        # every run committed before the disk filled up is intact
        got = store.samples(stored)
        assert all(np.array_equal(got[k], v) for k, v in stored.items())
        assert len(store.runs()) == len(stored)


@pytest.mark.fast
def test_db_commands_have_help_with_an_example(cli):
    for args in (["db", "info"], ["db", "upgrade"], ["db"]):
        proc = cli(*args, "--help")
        assert proc.returncode == 0
        assert "Example: vmtax db" in proc.stdout
