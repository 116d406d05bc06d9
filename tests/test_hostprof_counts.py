"""Exit counts from KVM's own per-vCPU counters (`vmtax run --exits`, the default mode): the
agent's QMP reading (`vmtax-probe exits stats`) against a real QEMU, the difference of two
readings, how it is stored and shown, the modes `--exits` takes and refuses, and doctor's
rows. The counts a real nested KVM gives are checked in test_hostprof_testbed.py."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from vmtax.cli.run_cmd import exits_alone_is_counts
from vmtax.errors import UsageError
from vmtax.hostprof import kvmstats, modes
from vmtax.hostprof.store import exit_profiles, kvm_counters, save_profile
from vmtax.hostprof.table import table2
from vmtax.report.exits import section
from vmtax.store import Store
from vmtax.targets.base import find_agent

AGENT = str(find_agent())
FIXTURES = Path(__file__).parent / "fixtures" / "hostprof"


def _reading(path: str, qemu: int, t: int, **counters: int) -> dict:
    return {"type": "kvm_stats", "isa": "svm", "qemu": qemu, "time_ns": t,
            "vcpus": [{"path": path, "stats": counters}]}  # fmt: skip


@pytest.mark.fast
def test_a_window_is_the_difference_by_category_and_the_rest_is_other_exits():
    before = _reading("/cpu0", 7, 1_000, exits=100, halt_exits=10, io_exits=5, signal_exits=3)
    after = _reading("/cpu0", 7, 4_000, exits=1_150, halt_exits=12, io_exits=9, signal_exits=9)
    prof = kvmstats.profile(before, after)
    counts = {r["name"]: r["count"] for r in prof["reasons"]}
    # signal_exits are returns to QEMU, not exits from the guest: no part of the partition.
    assert counts == {"halt_exits": 2, "io_exits": 4, "other_exits": 1_044}
    assert prof["hits"] == sum(counts.values()) == 1_050
    assert prof["complete"] and prof["window_ns"] == 3_000
    assert prof["vcpus"] == {"/cpu0": {"exits": 1_050, "halt_exits": 2, "io_exits": 4,
                                       "signal_exits": 6}}  # fmt: skip
    codes = [r["code"] for r in prof["reasons"]]
    assert len(set(codes)) == len(codes) and min(codes) >= kvmstats.CODE_BASE


@pytest.mark.fast
def test_readings_of_two_processes_or_a_counter_that_fell_are_not_a_window():
    before = _reading("/cpu0", 7, 0, exits=100)
    assert not kvmstats.profile(before, _reading("/cpu0", 8, 1, exits=200))["complete"]
    fell = kvmstats.profile(before, _reading("/cpu0", 7, 1, exits=40))
    assert not fell["complete"] and "went down" in fell["problems"][0]


@pytest.mark.fast
def test_a_real_pair_of_readings_from_the_testbed():
    """Two readings of L2's QEMU inside the testbed's L1 around one cpuid run of 3,000
    iterations, 200 warm-up ones and the agent's start-up, which times 3,000 CPUIDs more
    (bench/exits_overhead.py --readings): the categories sum to KVM's exits, and the rest
    (other_exits, where KVM counts a CPUID) is each of those 6,200 CPUIDs plus the
    time-driven exits of the 7.7 s window (its irq_exits were 434)."""
    before, after = (
        json.loads((FIXTURES / f"kvm_stats_{n}.json").read_text()) for n in ("before", "after")
    )
    prof = kvmstats.profile(before, after)
    assert prof["complete"], prof["problems"]
    counts = {r["name"]: r["count"] for r in prof["reasons"]}
    assert sum(counts.values()) == prof["hits"]
    window_s = prof["window_ns"] / 1e9
    assert 6_200 <= counts["other_exits"] <= 6_200 + 200 * window_s, (counts, window_s)
    assert counts["irq_exits"] < 100 * window_s
    assert set(prof["vcpus"]) == {v["path"] for v in after["vcpus"]}


def _store_with_counts(tmp_path: Path, windows: list[tuple[dict, dict]]) -> tuple[str, int]:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with Store.open(db) as store:
        exp = store.create_experiment(command=["vmtax"], suite="t", seed=1, plan={},
                                      vmtax_version="0", agent_version="0")  # fmt: skip
        cfg = store.configuration(experiment_id=exp, level="L2", labels={"accel": "kvm"},
                                  fingerprint={}, target="qemu-L2", provenance={})  # fmt: skip
        for i, (before, after) in enumerate(windows):
            run = store.add_run(
                experiment_id=exp, configuration_id=cfg, probe="cpuid", plan_index=i,
                run_index=i, header=None, summary={"n": 800}, values=np.ones(800),
                warmup_values=np.ones(200), status="ok",
            )  # fmt: skip
            save_profile(store, run, "L1", kvmstats.profile(before, after), "kvm-stats")
    return db, exp


@pytest.mark.fast
def test_counts_are_stored_with_the_run_and_shown_by_category_without_a_time(cli, tmp_path):
    windows = [
        (_reading("/cpu0", 7, 0, exits=0, halt_exits=0),
         _reading("/cpu0", 7, 9, exits=1_000 + k, halt_exits=k))
        for k in (2, 4)
    ]  # fmt: skip
    db, exp = _store_with_counts(tmp_path, windows)
    with Store.open(db) as store:
        prof = exit_profiles(store, exp)
        counters = kvm_counters(store, exp)
    assert set(prof["recorder"]) == {"kvm-stats"} and prof["complete"].all()
    assert set(prof["group"]) == {"Halt", "Other"}
    assert sorted(counters[counters["counter"] == "exits"]["count"]) == [1_002, 1_004]
    frame = table2(prof)
    total = frame[frame["row"] == "total"].iloc[0]
    assert total["count"] == 1_003 and np.isnan(total["time_ns"])  # no time, not zero
    halt = frame[frame["row"] == "halt_exits"].iloc[0]
    assert halt["per_iteration"] == pytest.approx(3 / 1_000)
    res = cli("exits", "exp=latest", "--db", db, "--by", "group")
    assert res.returncode == 0, res.stderr
    assert "Halt" in res.stdout and "no handling time" in res.stdout
    figs, tables = section(prof)  # the report's exit section says what the shares are of
    assert "recorded with KVM's own exit counters" in figs[0].caption
    assert "total exits" in tables[0].note and tables[0].rows[0][4] == "–"
    rows = json.loads(cli("exits", "exp=latest", "--db", db, "--format", "json").stdout)
    assert {r["reason"] for r in rows} == {"halt_exits", "other_exits", "total"}
    assert all(r["time_ns"] is None for r in rows)


@pytest.mark.fast
def test_exits_alone_means_counts_and_a_value_is_kept():
    assert exits_alone_is_counts(["run", "--exits"]) == ["run", "--exits=counts"]
    assert exits_alone_is_counts(["run", "--exits", "--db", "x"]) == [
        "run", "--exits=counts", "--db", "x",
    ]  # fmt: skip
    assert exits_alone_is_counts(["run", "--exits", "trace"]) == ["run", "--exits", "trace"]
    assert exits_alone_is_counts(["exits", "--exits"]) == ["exits", "--exits"]  # run only
    assert modes.parse_mode(True) == modes.parse_mode("counts") == "counts"
    assert modes.parse_mode(False) == modes.parse_mode(None) == ""
    with pytest.raises(UsageError):
        modes.parse_mode("bogus")


@pytest.mark.fast
@pytest.mark.parametrize("value", ["--exits=bogus", "--exits=Trace2", "--exits="])
def test_a_mode_that_does_not_exist_is_one_line_and_exit_2(cli, tmp_path, value):
    db = f"sqlite:///{tmp_path / 'x.db'}"
    res = cli("run", "--probe", "cpuid", "--runs", "2", value, "--db", db, agent_path=AGENT)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"vmtax: error: --exits must be counts or trace (alone: counts), got "
        f"{value.partition('=')[2]!r}"
    ]
    assert not (tmp_path / "x.db").exists()  # refused before the store was opened


@pytest.mark.fast
def test_a_mode_this_machine_lacks_is_one_line_and_exit_2(cli, tmp_path, monkeypatch):
    """No QEMU on the PATH: no query-stats, so no counts. No guest kernel, and this machine's
    kernel shows no synthetic events: no trace."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("VMTAX_KERNEL", str(tmp_path / "no-vmlinuz"))
    db = f"sqlite:///{tmp_path / 'x.db'}"
    res = cli("run", "--probe", "cpuid", "--runs", "2", "--exits", "--db", db, agent_path=AGENT)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "vmtax: error: --exits=counts is not available here: no qemu-system-x86_64 (its QMP "
        "query-stats reads KVM's counters)"
    ]
    if not Path("/sys/kernel/tracing/synthetic_events").exists():
        res = cli("run", "--probe", "cpuid", "--exits=trace", "--db", db, agent_path=AGENT)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
        assert "--exits=trace is not available here: no kernel here has" in res.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.fast
def test_an_old_qemu_or_kernel_is_named_in_one_line(monkeypatch):
    monkeypatch.setattr(modes, "qemu_version", lambda: (6, 2))
    assert modes.availability("counts") == (
        False, "QEMU 6.2 has no QMP query-stats (7.1 or later has it)",
    )  # fmt: skip
    monkeypatch.setattr(modes, "qemu_version", lambda: (7, 2))
    monkeypatch.setattr(modes, "kernels", lambda: {"this machine": "5.10.0-28-amd64"})
    ok, why = modes.availability("counts")
    assert not ok and why == (
        "Linux 5.10.0-28-amd64 (this machine) has no KVM binary statistics (KVM_GET_STATS_FD, "
        "5.14 or later)"
    )
    monkeypatch.setattr(modes, "kernels", lambda: {"this machine": "5.14.0"})
    assert modes.availability("counts")[0]


@pytest.mark.fast
def test_doctor_has_a_row_for_each_mode(cli):
    data = json.loads(cli("doctor", "--format", "json").stdout)
    rows = {r["capability"]: r for r in data["capabilities"]}
    for mode in modes.MODES:
        assert rows[f"exits {mode}"]["detail"] == modes.availability(mode)[1]
        assert rows[f"exits {mode}"]["ok"] == modes.availability(mode)[0]


def _qemu(tmp_path: Path, *extra: str) -> subprocess.Popen:
    sock = tmp_path / "qmp.sock"
    proc = subprocess.Popen(
        ["qemu-system-x86_64", "-nodefaults", "-display", "none", "-machine", "none", "-S",
         *extra, "-qmp", f"unix:{sock},server=on,wait=off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _stats(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([AGENT, "exits", "stats", *args], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


@pytest.mark.slow
def test_the_agent_asks_qemu_over_qmp_and_says_in_one_line_what_is_missing(tmp_path):
    """A real QEMU under TCG answers query-stats with no KVM statistics (there is no KVM):
    the agent found its QMP socket on its command line, spoke QMP, and says so in one line.
    A process without -qmp, and one that is not there, are named too."""
    proc = _qemu(tmp_path, "-accel", "tcg")
    try:
        res = _stats("--qemu", str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "vmtax-probe: error: exits stats: KVM gives no per-vCPU statistics here "
        "(KVM_GET_STATS_FD needs Linux 5.14 or later)"
    ]
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        res = _stats("--qemu", str(sleeper.pid))
        assert res.stderr.strip().splitlines() == [
            f"vmtax-probe: error: exits stats: QEMU (pid {sleeper.pid}) has no QMP socket: "
            "start it with -qmp unix:PATH,server=on,wait=off"
        ]
        res = _stats("--qemu", str(sleeper.pid), "--qmp", str(tmp_path / "none.sock"))
        assert res.returncode == 1 and "QMP socket" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    finally:
        sleeper.kill()
        sleeper.wait()
    res = _stats("--qemu", "first")
    assert res.returncode == 1 and "--qemu takes auto or a PID" in res.stderr


@pytest.mark.fast
def test_explain_costs_counted_exits_as_whole_round_trips_and_says_so(
    cli, store, sqlite_url, monkeypatch
):
    """Profiles of KVM's counters have no handling time: explain still splits an overhead by
    group, every exit costing one round trip of cpuid's (calibrated on cpuid's whole exit),
    says so in each group's cost basis and in one line on stderr."""
    import test_explain

    real = test_explain.hp.save_profile

    def counts_only(store, run, level, profile, recorder="tracefs"):  # noqa: ARG001
        reasons = [{**r, "time_ns": None, "timed": None} for r in profile["reasons"]]
        return real(store, run, level, {**profile, "reasons": reasons}, "kvm-stats")

    monkeypatch.setattr(test_explain.hp, "save_profile", counts_only)
    test_explain._populate(store, np.random.default_rng(3))
    res = cli("explain", "exp=latest", "--db", sqlite_url, "--format", "json")
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("\n") == 1 and "counts (--exits), with no handling time" in res.stderr
    groups = [r for r in json.loads(res.stdout) if r["group"] != "residual"]
    worked = [r for r in groups if r["group"] != "Halt"]  # a halt costs a round trip anyway
    assert worked and all("counts: no handling time" in r["cost_basis"] for r in worked)
    for r in groups:
        assert r["handling_ns"] == 0 and r["cost_ns"] == pytest.approx(r["round_trip_ns"])
    cpuid = [r for r in groups if r["probe"] == "cpuid"]
    assert cpuid and sum(r["share"] for r in cpuid) == pytest.approx(1.0)
