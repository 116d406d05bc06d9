"""The store's repositories (store.exits, store.sweeps, store.sampling) answer through its
door: a failure of the database is one line naming the store, not a driver traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from vmtax.errors import VmtaxError
from vmtax.hostprof.store import exit_profiles
from vmtax.sampling.outcome import lines, outcomes
from vmtax.store import Store

pytestmark = pytest.mark.fast


def test_repositories_read_an_empty_store(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s.db")) as store:
        assert outcomes(store, [1]).empty
        assert lines(store, 1) == []
        assert store.sweeps.committed_steps(1) == set()
        assert store.sweeps.latest() is None
        assert exit_profiles(store, 1).empty
        assert store.sampling.resume_point(1) == (None, None)
        assert store.noise.rows() == []


@pytest.mark.parametrize(
    ("table", "read"),
    [
        ("sampling_outcomes", lambda s: outcomes(s, [1])),
        ("sampling_looks", lambda s: s.sampling.resume_point(1)),
        ("sweep_steps", lambda s: s.sweeps.committed_steps(1)),
        ("exit_counts", lambda s: exit_profiles(s, 1)),
        ("noise_profiles", lambda s: s.noise.rows()),
    ],
)
def test_a_broken_table_is_one_line(tmp_path: Path, table: str, read: object) -> None:
    path = tmp_path / "s.db"
    Store.open(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute(f"DROP TABLE {table}")
    with Store.open(str(path), read_only=True) as store, pytest.raises(VmtaxError) as caught:
        read(store)  # type: ignore[operator]
    message = caught.value.message
    assert message.startswith("database ") and str(path) in message and "no such table" in message
    assert "\n" not in message
