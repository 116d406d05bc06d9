"""Exit-reason names, study E's groups, the profile tables and the Table 2 shape."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import inspect

from vmtax.errors import UsageError
from vmtax.hostprof.groups import GROUPS, group_of
from vmtax.hostprof.reasons import SVM_EXIT_REASONS, VMX_EXIT_REASONS, reason_code, reason_name
from vmtax.hostprof.store import COLUMNS, exit_profiles, save_profile
from vmtax.hostprof.table import table2


@pytest.mark.fast
def test_reason_names_follow_the_manuals():
    assert reason_name("svm", 0x72) == "cpuid"
    assert reason_name("svm", 0x7B) == "io"
    assert reason_name("svm", 0x400) == "npf"
    assert reason_name("svm", 0x4E) == "PF excp"
    assert reason_name("svm", 0x10) == "write_cr0"
    assert reason_name("vmx", 10) == "CPUID"
    assert reason_name("vmx", 48) == "EPT_VIOLATION"
    assert reason_name("vmx", 0x8000_0021) == "INVALID_STATE"  # failed entry: bit 31 set
    assert reason_name("svm", 0x1234) == "unknown 4660"
    assert reason_name("vmx", 71) == "unknown 71"
    assert reason_name("arm", 1) == "unknown 1"
    assert reason_code("svm", "cpuid") == 0x72
    assert reason_code("vmx", "unknown 71") == 71


@pytest.mark.fast
def test_every_known_reason_has_a_group_of_study_e():
    for table in (SVM_EXIT_REASONS, VMX_EXIT_REASONS):
        for name in table.values():
            assert group_of(name) in GROUPS
    assert group_of("cpuid") == group_of("CPUID") == "Instruction emulation"
    assert group_of("hlt") == group_of("HLT") == "Halt"
    assert group_of("io") == group_of("IO_INSTRUCTION") == "I/O"
    assert group_of("npf") == group_of("EPT_VIOLATION") == "MMIO"
    assert group_of("read_cr3") == group_of("CR_ACCESS") == "CR access"
    assert group_of("PF excp") == "Page fault"
    assert group_of("invlpg") == "MMU"
    assert group_of("interrupt") == group_of("EXTERNAL_INTERRUPT") == "Interrupt"
    assert group_of("unknown 9") == "Other"


def _run(store, config_id, exp, index, n=1000, warm=200):
    return store.add_run(
        experiment_id=exp, configuration_id=config_id, probe="cpuid", plan_index=index,
        run_index=index, header=None, summary={"n": n}, values=np.ones(n),
        warmup_values=np.ones(warm), status="ok",
    )  # fmt: skip


def _experiment(store):
    exp = store.create_experiment(
        command=["vmtax"], suite="t", seed=1, plan={}, vmtax_version="0", agent_version="0"
    )
    cfgs = {
        lvl: store.configuration(
            experiment_id=exp,
            level=lvl,
            labels={"accel": "kvm"},
            fingerprint={},
            target=f"qemu-{lvl}",
            provenance={},
        )  # fmt: skip
        for lvl in ("L2", "L3")
    }
    return exp, cfgs


def _profile(cpuid, io, *, dropped=0, extra=()):
    return {
        "type": "exits", "isa": "svm", "hits": cpuid + io, "dropped": dropped,
        "complete": dropped == 0, "problems": [],
        "reasons": [
            {"code": 0x72, "count": cpuid, "time_ns": cpuid * 1000, "timed": cpuid},
            {"code": 0x7B, "count": io, "time_ns": io * 5000, "timed": io},
            *extra,
        ],
    }  # fmt: skip


@pytest.mark.fast
def test_profiles_are_stored_per_run_and_read_as_one_frame(store):
    exp, cfgs = _experiment(store)
    r1, r2 = _run(store, cfgs["L2"], exp, 0), _run(store, cfgs["L3"], exp, 1)
    save_profile(store, r1, "L1", _profile(1200, 10))
    save_profile(store, r2, "L1", _profile(9600, 80))
    save_profile(store, r2, "L2", _profile(1200, 10, dropped=4))
    df = exit_profiles(store, exp)
    assert list(df.columns) == COLUMNS
    assert len(df) == 6
    one = df[(df.run_id == r1) & (df.reason == "cpuid")].iloc[0]
    assert (one["count"], one["time_ns"], one["iterations"]) == (1200, 1_200_000, 1200)
    assert one["group"] == "Instruction emulation" and one["complete"]
    assert one["level"] == "L2" and one["recorded_at"] == "L1" and one["code"] == 0x72
    lossy = df[(df.run_id == r2) & (df.recorded_at == "L2")]
    assert not lossy["complete"].any() and (lossy["dropped"] == 4).all()
    assert lossy["problems"].iloc[0] == ["4 events were dropped"]
    # Deleting the experiment removes its profiles (ON DELETE CASCADE).
    store.delete_experiment(exp)
    assert exit_profiles(store, exp).empty


@pytest.mark.fast
def test_an_unknown_code_is_kept_and_marks_the_profile_incomplete(store):
    exp, cfgs = _experiment(store)
    run = _run(store, cfgs["L2"], exp, 0)
    save_profile(store, run, "L1", _profile(5, 1, extra=[{"code": 0x5555, "count": 3}]))
    df = exit_profiles(store, exp)
    odd = df[df.code == 0x5555].iloc[0]
    assert odd["reason"] == "unknown 21845" and odd["count"] == 3 and odd["group"] == "Other"
    assert not df["complete"].any()
    assert "unknown exit codes 21845" in df["problems"].iloc[0][0]


@pytest.mark.fast
def test_a_failed_recording_is_one_row_with_its_reason(store):
    exp, cfgs = _experiment(store)
    run = _run(store, cfgs["L2"], exp, 0)
    save_profile(store, run, "L1", {"complete": False, "problems": ["start: no process 7"]})
    df = exit_profiles(store, exp)
    assert len(df) == 1 and df["reason"].iloc[0] is None and df["count"].iloc[0] == 0
    assert df["problems"].iloc[0] == ["start: no process 7"]


@pytest.mark.fast
def test_table2_normalises_to_the_baseline_and_counts_exits_per_iteration(store):
    exp, cfgs = _experiment(store)
    for i in range(2):
        save_profile(store, _run(store, cfgs["L2"], exp, i), "L1", _profile(1200, 10))
        save_profile(store, _run(store, cfgs["L3"], exp, 10 + i), "L1", _profile(9600, 80))
    t = table2(exit_profiles(store, exp))
    tot = t[t.row == "total"].set_index("column")
    l2, l3 = tot.loc["L2 accel=kvm"], tot.loc["L3 accel=kvm"]
    assert l2["share"] == pytest.approx(1.0) and l3["share"] == pytest.approx(8.0)
    assert l2["count"] == 1210 and l2["runs"] == 2 and l2["iterations"] == 2400
    cpuid = t[(t.row == "cpuid")].set_index("column")
    assert cpuid.loc["L2 accel=kvm", "per_iteration"] == pytest.approx(1.0)
    assert cpuid.loc["L3 accel=kvm", "per_iteration"] == pytest.approx(8.0)
    assert cpuid.loc["L2 accel=kvm", "share"] == pytest.approx(1_200_000 / 1_250_000)
    flipped = table2(exit_profiles(store, exp), baseline="level=L3", by="group")
    tot = flipped[flipped.row == "total"].set_index("column")
    assert tot.loc["L3 accel=kvm", "share"] == pytest.approx(1.0)
    assert tot.loc["L2 accel=kvm", "share"] == pytest.approx(0.125)
    assert set(flipped["row"]) == {"Instruction emulation", "I/O", "total"}
    with pytest.raises(UsageError, match="matches no profiled configuration"):
        table2(exit_profiles(store, exp), baseline="level=L1")
    with pytest.raises(UsageError, match="KEY=VAL"):
        table2(exit_profiles(store, exp), baseline="L2")


@pytest.mark.fast
def test_a_level_recorded_twice_gets_a_column_per_recording_level(store):
    exp, cfgs = _experiment(store)
    run = _run(store, cfgs["L3"], exp, 0)
    save_profile(store, run, "L1", _profile(9600, 80))
    save_profile(store, run, "L2", _profile(1200, 10))
    t = table2(exit_profiles(store, exp), baseline="recorded_at=L2")
    tot = t[t.row == "total"].set_index("column")["share"]
    assert tot.to_dict() == pytest.approx({"L3 accel=kvm @ L1": 8.0, "L3 accel=kvm @ L2": 1.0})


@pytest.mark.fast
def test_the_migration_goes_down_and_up(sqlite_url):
    from alembic import command

    from vmtax.store import Store, migrate

    engine = Store.open(sqlite_url).engine
    with engine.begin() as connection:
        cfg = migrate._config(connection)
        command.downgrade(cfg, "0001")
    assert "exit_profiles" not in inspect(engine).get_table_names()
    with engine.begin() as connection:
        command.upgrade(migrate._config(connection), "head")
    assert {"exit_profiles", "exit_counts"} <= set(inspect(engine).get_table_names())


@pytest.mark.fast
def test_exits_cli_prints_the_published_table_and_its_totals(cli):
    res = cli("exits", "--dataset", "virtage_table2")
    assert res.returncode == 0, res.stderr
    assert "76.6% less" in res.stdout and "1.000" in res.stdout and "0.234" in res.stdout
    js = cli("exits", "--dataset", "virtage_table2", "--format", "json")
    rows = json.loads(js.stdout)
    totals = {r["config"]: r["share"] for r in rows if r["reason"] == "total"}
    assert sorted(totals.values()) == pytest.approx([0.234, 1.0])
    md = cli("exits", "--dataset", "virtage_table2", "--format", "markdown")
    assert "| PF_REASON_SPT_UPDATE | Page Fault | 0.482 | 0.000 |" in md.stdout


@pytest.mark.fast
def test_exits_cli_on_stored_profiles_and_its_errors(cli, tmp_path):
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path / 'p.db'}"
    with Store.open(url) as s:
        exp, cfgs = _experiment(s)
        save_profile(s, _run(s, cfgs["L2"], exp, 0), "L1", _profile(1200, 10))
        save_profile(s, _run(s, cfgs["L3"], exp, 1), "L1", _profile(9600, 80))
    res = cli("exits", "exp=latest", "--db", url, "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    want = {"config", "reason", "group", "count", "time_ns", "share"}
    assert all(want <= set(r) for r in rows)
    cpuid = {r["config"]: r for r in rows if r["reason"] == "cpuid"}
    assert cpuid["L3 accel=kvm"]["count"] == 9600 and cpuid["L2 accel=kvm"]["group"] == (
        "Instruction emulation"
    )
    table = cli("exits", "latest", "--db", url, "--by", "group")
    assert table.returncode == 0 and "Instruction emulation" in table.stdout
    csv = cli("exits", str(exp), "--db", url, "--format", "csv")
    assert csv.stdout.splitlines()[0].startswith("probe,config,recorded_at")
    bad = cli("exits", "latest", "--db", url, "--by", "cpu")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--by" in bad.stderr
    empty = f"sqlite:///{tmp_path / 'e.db'}"
    with Store.open(empty) as s:
        _experiment(s)
    none = cli("exits", "latest", "--db", empty)
    assert none.returncode == 1 and "has no exit profiles" in none.stderr
    assert none.stderr.count("\n") == 1


@pytest.mark.slow
def test_reports_get_an_exit_profile_section_when_profiles_exist(cli, tmp_path):
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Store.open(url) as s:
        exp, cfgs = _experiment(s)
        for i in range(2):
            save_profile(s, _run(s, cfgs["L2"], exp, i), "L1", _profile(1200, 10))
            save_profile(s, _run(s, cfgs["L3"], exp, 10 + i), "L1", _profile(9600, 80))
    html = tmp_path / "r.html"
    res = cli("report", "exp=latest", "--db", url, "-o", str(html), "--resamples", "200")
    assert res.returncode == 0, res.stderr
    page = html.read_text()
    assert 'id="fig-exits-cpuid"' in page and "cpuid: VM exits by reason" in page
    assert "Instruction emulation" in page and 'id="fig-ref-exits"' in page
    md = tmp_path / "r.md"
    res = cli("report", "exp=latest", "--db", url, "-o", str(md), "--format", "markdown",
              "--resamples", "200")  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    assert "### cpuid: VM exits by reason" in text
    assert "| cpuid | Instruction emulation | L3 accel=kvm | 9,600 |" in text
    assert "exits-cpuid" in text  # the figure's PNG


@pytest.mark.fast
def test_reports_without_profiles_have_no_exit_section(cli, tmp_path):
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path / 'n.db'}"
    with Store.open(url) as s:
        exp, cfgs = _experiment(s)
        _run(s, cfgs["L2"], exp, 0)
        _run(s, cfgs["L3"], exp, 1)
    html = tmp_path / "n.html"
    res = cli("report", "exp=latest", "--db", url, "-o", str(html), "--resamples", "200")
    assert res.returncode == 0, res.stderr
    assert "VM exits by reason" not in html.read_text()


@pytest.mark.fast
def test_the_agents_start_up_is_taken_off_exits_per_iteration(store):
    exp, cfgs = _experiment(store)
    for i in range(2):
        # 1,000 measured + 200 warm-up CPUIDs, and 3,010 more from the agent's start-up.
        prof = {**_profile(4210, 10), "startup": {0x72: 3010}}
        save_profile(store, _run(store, cfgs["L2"], exp, i), "L1", prof)
    df = exit_profiles(store, exp)
    assert set(df.loc[df.reason == "cpuid", "startup"]) == {3010}
    assert set(df.loc[df.reason == "io", "startup"]) == {0}
    t = table2(df).set_index("row")
    assert t.loc["cpuid", "per_iteration"] == pytest.approx(1.0)
    assert t.loc["cpuid", "per_iteration_raw"] == pytest.approx(4210 / 1200)
    assert t.loc["cpuid", "startup"] == 3010


@pytest.mark.fast
def test_a_run_whose_recording_was_lost_counts_as_no_data_not_as_zero_exits(store):
    # Seen at L3 in CI: one run's `exits stop` found no recording. Its profile is kept (one
    # row, with the reason); the column's means come from the run that was recorded, and
    # the column says it is incomplete.
    exp, cfgs = _experiment(store)
    save_profile(store, _run(store, cfgs["L2"], exp, 0), "L1", _profile(1200, 10))
    lost = {"complete": False, "problems": ["stop: exits: no recording in progress"]}
    save_profile(store, _run(store, cfgs["L2"], exp, 1), "L1", lost)
    t = table2(exit_profiles(store, exp))
    cpuid = t[t.row == "cpuid"].iloc[0]
    total = t[t.row == "total"].iloc[0]
    assert cpuid["per_iteration"] == pytest.approx(1.0) and cpuid["count"] == 1200
    assert total["runs"] == 1 and total["iterations"] == 1200 and not total["complete"]
    # With no complete profile at all, the column is shown from what there is, marked so.
    exp2, cfgs2 = _experiment(store)
    save_profile(store, _run(store, cfgs2["L2"], exp2, 0), "L1", lost)
    only = table2(exit_profiles(store, exp2))
    assert only["count"].sum() == 0 and not only["complete"].any()
