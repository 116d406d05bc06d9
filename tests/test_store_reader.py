"""The store's read-only door (vmtax.store.reader) reads what Store reads: the same frames,
the same store names in messages, the same errors; and Store answers whatever it does not
read itself."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vmtax.errors import VmtaxError
from vmtax.store import Store
from vmtax.store.reader import LEGACY_TSC_UNITS, TSC_UNIT, StoreReader, sqlite_path
from vmtax.store.url import redact, resolve
from vmtax.testing.runs import Config
from vmtax.testing.stored import store_experiment

pytestmark = pytest.mark.fast

SELECTORS = [
    [],
    ["exp=latest"],
    ["exp=1", "exp=3"],
    ["level=L1"],
    ["exp=2,level=L0"],
    ["status=failed"],
    ["probe=cpuid,exp=latest"],
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three experiments; the third has an outcome of adaptive sampling, a failed run, and a
    run stored the old way (no boot id, the TSC unit's old name)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('reader') / 'r.db'}"
    with Store.open(url) as store:
        for seed in (1, 2, 3):
            exp = store_experiment(
                store,
                [Config("L0"), Config("L1", {"accel": "tcg"}, 1.1)],
                probes=("syscall", "cpuid"),
                runs=4,
                boots=2,
                boot_sigma=0.01,
                seed=seed,
            )
        l1 = int(
            store.configurations().query(f"experiment_id == {exp} and level == 'L1'").iloc[0, 0]
        )
        for index, status in ((90, "failed"), (91, "ok")):
            store.add_run(
                experiment_id=exp, configuration_id=l1, probe="cpuid", plan_index=index,
                run_index=0, header={"unit": "cycles"},
                summary={"mean": 5.0, "n": 3} if status == "ok" else None,
                values=np.array([5.0]), warmup_values=np.array([]), status=status,
                error="boom" if status == "failed" else None,
            )  # fmt: skip
        store.sampling.set_outcomes(
            l1,
            [
                {
                    "configuration_id": l1, "experiment_id": exp, "probe": "syscall",
                    "n_runs": 8, "mean": 100.0, "half_width": 0.05, "target": 0.01,
                    "status": "imprecise", "reason": "budget", "duration_s": 1.0,
                    "iterations": 200, "updated_at": datetime.now(UTC),
                }
            ],
        )  # fmt: skip
    return url


def test_the_tsc_unit_names_are_the_contracts():
    from vmtax import contract

    assert (TSC_UNIT, LEGACY_TSC_UNITS) == (contract.TSC_UNIT, contract.LEGACY_TSC_UNITS)


@pytest.mark.parametrize("selectors", SELECTORS)
def test_runs_are_the_stores(db: str, selectors: list[str]):
    with Store.open(db, read_only=True) as store, StoreReader.open(db) as reader:
        assert reader.direct
        want, got = store.runs(selectors), reader.runs(selectors)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert list(got.dtypes) == list(want.dtypes)
        assert reader.latest_experiment_id() == store.latest_experiment_id() == 3


def test_the_old_way_stored_run_reads_as_the_store_reads_it(db: str):
    with StoreReader.open(db) as reader:
        runs = reader.runs(["exp=3,probe=cpuid,level=L1"])
    old = runs[runs["plan_index"] == 91].iloc[0]
    assert old["unit"] == TSC_UNIT and old["boot"].startswith("unrecorded-")
    assert runs.loc[runs["plan_index"] == 90, "mean"].isna().all()


def test_sampling_outcomes_are_the_stores(db: str):
    with Store.open(db, read_only=True) as store, StoreReader.open(db) as reader:
        for ids in ([3], [1, 2, 3], [1], []):
            pd.testing.assert_frame_equal(
                reader.sampling.outcomes(ids), store.sampling.outcomes(ids), check_exact=True
            )


def test_an_unknown_experiment_is_the_same_error(db: str):
    with Store.open(db, read_only=True) as store, StoreReader.open(db) as reader:
        with pytest.raises(VmtaxError) as want:
            store.runs(["exp=99"])
        with pytest.raises(VmtaxError) as got:
            reader.runs(["exp=99"])
    assert str(got.value) == str(want.value) and reader.url_display == store.url_display


def test_the_path_and_name_are_the_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VMTAX_DB", str(tmp_path / "env.db"))
    for url in (
        f"sqlite:///{tmp_path}/a.db",
        "sqlite:///rel.db",
        "rel.db",
        str(tmp_path / "with space.db"),
        "~/x.db",
        None,
    ):
        path = sqlite_path(url)
        assert path is not None and str(path) == resolve(url).database
        assert f"sqlite:///{path}" == redact(resolve(url))
    # what only SQLAlchemy parses is left to Store
    for url in ("sqlite:////tmp/x.db?mode=ro", "sqlite:////tmp/a%20b.db", "postgresql://h/d"):
        assert sqlite_path(url) is None


def test_what_it_does_not_read_itself_store_reads(db: str, tmp_path: Path):
    # a URL only SQLAlchemy parses (it unescapes the name)
    escaped = db.replace("r.db", "r%2Edb")
    with Store.open(db, read_only=True) as store, StoreReader.open(escaped) as reader:
        assert not reader.direct
        pd.testing.assert_frame_equal(reader.runs(["exp=3"]), store.runs(["exp=3"]))
        assert reader.url_display == store.url_display
    # no file, a file that is not a store, a store at another revision: Store's own errors
    other = tmp_path / "old.db"
    other.write_bytes(Path(db.removeprefix("sqlite:///")).read_bytes())
    with sqlite3.connect(other) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0001'")
    not_a_store = tmp_path / "text.db"
    not_a_store.write_text("not a database\n")
    for url in (f"sqlite:///{tmp_path}/none.db", f"sqlite:///{other}", str(not_a_store)):
        with pytest.raises(VmtaxError) as want:
            Store.open(url, read_only=True)
        with pytest.raises(VmtaxError) as got:
            StoreReader.open(url)
        assert str(got.value) == str(want.value)
    assert not os.path.exists(tmp_path / "none.db")
