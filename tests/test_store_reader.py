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
from vmtax.hostprof.store import exit_profiles, save_profile
from vmtax.model.sources import tsc_rates
from vmtax.report import gather
from vmtax.sampling.outcome import imprecise
from vmtax.store import Store
from vmtax.store import reader as reader_module
from vmtax.store.reader import (
    CONFIGURATIONS,
    EXIT_COUNTS,
    EXPERIMENTS,
    LEGACY_TSC_UNITS,
    TSC_UNIT,
    StoreReader,
    sqlite_path,
)
from vmtax.store.url import redact, resolve
from vmtax.testing.report_store import populate
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


# -- what report reads -----------------------------------------------------------------------


def _exits(cpuid: int, io: int, **extra: object) -> dict[str, object]:
    return {
        "isa": "svm", "hits": cpuid + io, "dropped": 0, "complete": True, "problems": [],
        "reasons": [
            {"code": 0x72, "count": cpuid, "time_ns": cpuid * 900, "timed": cpuid},
            {"code": 0x7B, "count": io, "time_ns": None, "timed": None},
        ],
        **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def report_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Experiment 1: three levels with fingerprints (TSC rate, hypervisor), provenance, labels
    and warm-up samples; exit profiles on its guests' runs: complete, with start-up exits,
    recorded at two levels, with dropped events, a failed recording without counts, and one
    of a run whose samples are gone. Experiment 2: still running, one configuration, no
    runs."""
    path = tmp_path_factory.mktemp("report-reader") / "r.db"
    url = f"sqlite:///{path}"
    with Store.open(url) as store:
        exp = populate(store, levels=("L0", "L1", "L2"), runs=3, iterations=40)
        runs = store.runs([f"exp={exp}"])
        guests = [int(r) for r in runs.loc[runs["level"] != "L0", "run_id"]]
        save_profile(store, guests[0], "L0", _exits(40, 2, startup={"114": 7}))
        save_profile(store, guests[0], "L1", _exits(40, 3, dropped=5))
        save_profile(store, guests[1], "L0", {"complete": False, "problems": ["no process 7"]})
        save_profile(store, guests[2], "L0", _exits(41, 0), "kvm-stats")
        save_profile(store, guests[-1], "L0", _exits(39, 1))
        running = store.create_experiment(
            command=["vmtax", "run"], suite="s", seed=2, plan={"sweep": None, "n": [1.5]},
            vmtax_version="0", agent_version=None,
        )  # fmt: skip
        store.configuration(
            experiment_id=running, level="L0", labels={}, fingerprint={},
            target="local", provenance={"x": None},
        )  # fmt: skip
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM samples WHERE run_id = ?", (guests[-1],))
    return url


def test_the_tables_are_the_models():
    from sqlalchemy import JSON, Boolean, DateTime

    from vmtax.store.models import Configuration, ExitCount, ExitProfile, Experiment

    def kinds(columns, kind):
        return {c.name for c in columns if isinstance(c.type, kind)}

    for table, model in ((EXPERIMENTS, Experiment), (CONFIGURATIONS, Configuration)):
        columns = list(model.__table__.columns)
        assert table.columns == tuple(c.name for c in columns)
        assert (table.json, table.times) == (kinds(columns, JSON), kinds(columns, DateTime))
        assert table.booleans == kinds(columns, Boolean) == set()
    # the exit counts' query: what its profile and count columns decode to
    columns = [
        c
        for c in [*ExitProfile.__table__.columns, *ExitCount.__table__.columns]
        if c.name in EXIT_COUNTS.columns
    ]
    assert EXIT_COUNTS.json == kinds(columns, JSON)
    assert EXIT_COUNTS.booleans == kinds(columns, Boolean)
    assert EXIT_COUNTS.times == kinds(columns, DateTime) == set()


def _same_samples(got: dict[int, np.ndarray], want: dict[int, np.ndarray]) -> None:
    assert list(got) == list(want)
    for run_id, values in want.items():
        assert got[run_id].dtype == values.dtype
        np.testing.assert_array_equal(got[run_id], values)


def test_samples_are_the_stores(report_db: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reader_module, "CHUNK", 4)  # several queries, as Store makes
    with Store.open(report_db, read_only=True) as store, StoreReader.open(report_db) as reader:
        ids = [int(r) for r in store.runs()["run_id"]]
        for wanted in (ids, ids[::-1][:9] + [99_999, ids[0]], [], [99_999]):
            for warmup in (False, True):
                want = store.samples(wanted, warmup=warmup)
                _same_samples(reader.samples(iter(wanted), warmup=warmup), want)
        assert reader.direct
        assert len(want) == 0 and len(store.samples(ids, warmup=True)) == len(ids) - 1
        assert all(len(v) == 5 for v in reader.samples(ids, warmup=True).values())


def _same_experiment(got: dict, want: dict) -> None:
    assert got == want
    assert list(got) == list(want)
    assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
    for a, b in zip(got["configurations"], want["configurations"], strict=True):
        assert list(a.items()) == list(b.items())


def test_experiments_are_the_stores(report_db: str):
    with Store.open(report_db, read_only=True) as store, StoreReader.open(report_db) as reader:
        for exp in (1, 2):
            _same_experiment(reader.experiment(exp), store.experiment(exp))
        finished, running = reader.experiment(1), reader.experiment(2)
        assert reader.direct
        with pytest.raises(VmtaxError) as want:
            store.experiment(3)
        with pytest.raises(VmtaxError) as got:
            reader.experiment(3)
    assert str(got.value) == str(want.value)
    assert finished["ended_at"].tzinfo is UTC and running["ended_at"] is None
    assert finished["run_counts"] == {"ok": 18} and running["run_counts"] == {}
    assert running["plan"] == {"sweep": None, "n": [1.5]}
    assert finished["configurations"][1]["hypervisor"] == "kvm"


def test_configurations_are_the_stores(report_db: str):
    with Store.open(report_db, read_only=True) as store, StoreReader.open(report_db) as reader:
        for ids in (None, [3, 1, 3], [], [99], (i for i in [2])):
            wanted = None if ids is None else list(ids)
            got = reader.configurations(wanted)
            pd.testing.assert_frame_equal(got, store.configurations(wanted), check_exact=True)
        assert reader.direct and len(got) == 1
        runs = reader.runs(["exp=1"])
        assert tsc_rates(reader, runs) == tsc_rates(store, runs) == dict.fromkeys([1, 2, 3], 2.1e9)


def test_exit_counts_are_the_stores(report_db: str):
    with Store.open(report_db, read_only=True) as store, StoreReader.open(report_db) as reader:
        for exp in (1, 2, 3):
            want = store.exits.counts(exp)
            pd.testing.assert_frame_equal(reader.exits.counts(exp), want, check_exact=True)
            pd.testing.assert_frame_equal(exit_profiles(reader, exp), exit_profiles(store, exp))
        assert reader.direct
        counts = reader.exits.counts(1)
    # the rows the fixture made: a profile without counts, one without samples, the dropped
    assert counts["reason"].isna().sum() == 1 and counts["iterations"].isna().sum() == 2
    assert counts["complete"].dtype == bool and not counts["complete"].all()
    assert counts["problems"].map(lambda p: isinstance(p, list)).any()
    assert counts["detail"].map(lambda d: isinstance(d, dict)).any()


def test_what_report_gathers_is_the_same(report_db: str):
    with Store.open(report_db, read_only=True) as store, StoreReader.open(report_db) as reader:
        for baseline in (None, "level=L0"):
            want = gather.load(store, ["exp=1"], baseline)
            got = gather.load(reader, ["exp=1"], baseline)
            pd.testing.assert_frame_equal(got.runs, want.runs, check_exact=True)
            _same_samples(dict(got.samples), dict(want.samples))
            pd.testing.assert_frame_equal(got.configurations, want.configurations)
            assert got.exit_profiles is not None and want.exit_profiles is not None
            pd.testing.assert_frame_equal(got.exit_profiles, want.exit_profiles, check_exact=True)
            for a, b in zip(got.experiments, want.experiments, strict=True):
                _same_experiment(dict(a), dict(b))
            assert got.tsc_hz == want.tsc_hz and got.imprecise == want.imprecise
            assert got.source == want.source
        assert imprecise(reader, got.runs) == imprecise(store, got.runs)
        assert reader.direct and reader._store is None  # nothing went through Store


def _same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)


#: Each of what report reads, and how an answer is held to Store's.
ASKED = [
    (lambda s: s.samples([1, 2, 40], warmup=True), _same_samples),
    (lambda s: s.experiment(1), _same_experiment),
    (lambda s: s.configurations([1, 2]), _same_frame),
    (lambda s: s.exits.counts(1), _same_frame),
]


def test_what_report_reads_falls_back_to_the_store(report_db: str, tmp_path: Path):
    with Store.open(report_db, read_only=True) as store:
        want = [ask(store) for ask, _ in ASKED]
    # a URL only SQLAlchemy parses
    with StoreReader.open(report_db.replace("r.db", "r%2Edb")) as reader:
        assert not reader.direct
        for (ask, same), answer in zip(ASKED, want, strict=True):
            same(ask(reader), answer)
    # the driver fails under each method: Store answers it
    for (ask, same), answer in zip(ASKED, want, strict=True):
        with StoreReader.open(report_db) as reader:
            assert reader._connection is not None
            reader._connection.close()
            same(ask(reader), answer)
            assert not reader.direct and reader._store is not None
    # a value SQLAlchemy did not write: Store's own error
    broken = tmp_path / "broken.db"
    broken.write_bytes(Path(report_db.removeprefix("sqlite:///")).read_bytes())
    with sqlite3.connect(broken) as connection:
        connection.execute("UPDATE experiments SET started_at = 'yesterday' WHERE id = 1")
        connection.execute("UPDATE configurations SET provenance = '{' WHERE id = 2")
    with Store.open(str(broken), read_only=True) as store, StoreReader.open(str(broken)) as reader:
        for ask in (lambda s: s.experiment(1), lambda s: s.configurations([2])):
            with pytest.raises(Exception) as want_error:
                ask(store)
            with pytest.raises(Exception) as got_error:
                ask(reader)
            assert type(got_error.value) is type(want_error.value)
            assert str(got_error.value) == str(want_error.value)
