"""Exit profiles on the nested-KVM testbed: a TCG L1 runs L2 under its real KVM (on the SVM
that TCG emulates); the L1 agent on the host-side port records L2's exits with tracefs
histograms around every run. Real QEMU, real KVM inside it, the real agent on both sides.

The L2, mechanism and explain tests read one L1+L2 run (kvm_l1_l2_store in conftest.py: cpuid,
timer, wakeup, io, mmio and portio, L2 with two vCPUs; minutes on a loaded 2-core machine,
shared with test_levels_kvm), and L3's exit multiplication reads one L3 run. All are in the
default run.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

slow = pytest.mark.slow  # minutes: L3 or several stacks; runs in CI like every test


def _profiles(db: str):
    from vmtax.hostprof.store import exit_profiles
    from vmtax.store import Store

    with Store.open(db) as s:
        runs = s.runs(["exp=latest"])
        return runs, exit_profiles(s, int(runs["experiment_id"].iloc[0]))


def test_l2_cpuid_exits_recorded_by_l1_match_the_cpuids_the_probe_executed(cli, kvm_l1_l2_store):
    db, said = kvm_l1_l2_store  # said: the recorder's notes
    runs, prof = _profiles(db)
    assert (runs["status"] == "ok").all(), list(runs["status"])
    at_l2 = runs[runs["level"] == "L2"]
    assert set(prof["recorded_at"]) == {"L1"}, said
    # Every L2 run has its profile, and only L2 runs (L1 runs under TCG: no KVM records it).
    assert set(prof["run_id"]) == set(at_l2["run_id"]), said
    prof = _recorded(prof, said)
    cpuid = prof[(prof["reason"] == "cpuid") & (prof["probe"] == "cpuid")]
    planned = (at_l2["probe"] == "cpuid").sum()
    assert planned == 3 and len(cpuid) >= planned - LOST_AT_MOST, cpuid
    for row in cpuid.itertuples():
        # The window is the whole agent invocation: its start-up (the CPUID leaves its header
        # reads; given the target's env it times no 3,000 CPUIDs) plus the loop.
        executed = row.iterations
        assert 0 < row.startup < 1000
        assert abs(row.count - row.startup - executed) <= 0.02 * executed, (
            row.count, row.startup, executed,
        )  # fmt: skip
        # L1 handles a CPUID exit of L2 in tens of microseconds of emulated time: every
        # one timed, none below zero (the recorder's clock is one for all of L1's CPUs).
        assert row.timed >= 0.99 * row.count and 1e3 < row.time_ns / row.timed < 1e7, row
    _the_vcpu_split_adds_up(db, prof)
    res = cli("exits", "exp=latest", "--db", db, "--format", "json")
    rows = json.loads(res.stdout)
    per = {r["reason"]: r for r in rows if r["probe"] == "cpuid"}
    assert per["cpuid"]["per_iteration"] == pytest.approx(1.0, abs=0.02)
    assert per["cpuid"]["group"] == "Instruction emulation"
    assert per["total"]["share"] == pytest.approx(1.0)


def test_l2_cpuid_exits_counted_by_kvm_itself_are_one_per_cpuid_and_a_few_more(kvm_l1_l2_store):
    """KVM's own counters of L2's vCPU, read through L2's QEMU (QMP query-stats, what
    `--exits` records) before each traced run's `exits start` and after its `exits stop`:
    every exit the histograms saw, CPUIDs among the exits no category counts, and per
    iteration one of them plus the time-driven ones of the longer window."""
    from vmtax.hostprof.store import kvm_counters
    from vmtax.store import Store

    db, said = kvm_l1_l2_store
    runs, prof = _profiles(db)
    with Store.open(db) as s:
        counters = kvm_counters(s, int(runs["experiment_id"].iloc[0]))
    prof = _recorded(prof, said)
    cpuid_runs = set(counters.loc[counters["probe"] == "cpuid", "run_id"])
    # The counters are read around every recording that ended: each cpuid run's but a lost one.
    assert cpuid_runs == set(prof.loc[prof["probe"] == "cpuid", "run_id"]), (counters, said)
    assert len(cpuid_runs) >= 3 - LOST_AT_MOST, (counters, said)
    for run_id in cpuid_runs:
        kvm = dict(
            counters.loc[counters["run_id"] == run_id, ["counter", "count"]].itertuples(index=False)
        )
        mine = prof[prof["run_id"] == run_id]
        traced = int(mine["count"].sum())
        cpuid = mine[mine["reason"] == "cpuid"].iloc[0]
        iterations = int(cpuid["iterations"])
        # The readings enclose the histograms' window: they see every exit it saw, and more
        # only while the recorder's requests ran (time-driven exits of an idle L2; 215 on
        # 881 traced, under load); a CPUID counted twice would double them.
        assert traced <= kvm["exits"] < 2 * traced, (kvm, traced)
        hlt = int(mine.loc[mine["reason"] == "hlt", "count"].sum())
        assert kvm.get("halt_exits", 0) >= hlt
        # KVM counts a CPUID nowhere but in exits: they are among other_exits.
        assert kvm["other_exits"] >= int(cpuid["count"])
        per_iteration = (kvm["other_exits"] - int(cpuid["startup"])) / iterations
        assert 0.98 <= per_iteration < 2.0, (kvm, int(cpuid["startup"]), iterations)


#: Runs of the shared L1+L2 run whose recording may be lost: one CI run had one L2 run's
#: `exits stop` find no recording in progress (as one L3 run did on both sides,
#: tests/test_levels_kvm.py), the cause not known. That run is stored incomplete with the
#: reason and the tables leave it out; a second loss in 18 runs fails.
LOST_AT_MOST = 1


def _recorded(prof, said):
    """The complete profiles, once every incomplete one has said why and no more than
    LOST_AT_MOST runs are incomplete."""
    lost = prof[~prof["complete"].astype(bool)]
    whys = sorted({str(p) for p in lost["problems"]})
    assert lost["run_id"].nunique() <= LOST_AT_MOST, (whys, said)
    assert lost["problems"].map(bool).all(), (whys, said)
    return prof[prof["complete"].astype(bool)]


def _per_iteration(cli, db: str, probe: str) -> dict[str, float]:
    res = cli("exits", "exp=latest", "--db", db, "--format", "json")
    return {r["reason"]: r["per_iteration"] for r in json.loads(res.stdout) if r["probe"] == probe}


@pytest.mark.parametrize(
    ("probe", "least"),
    [
        # TSC-deadline writes, and the sleep's halt. The timer fires while the vCPU halts
        # (outside the guest), so its interrupt is injected at the next entry, with no exit.
        # 2.2-2.5 MSR and 1.1 HLT exits per sleep on this testbed, quiet and loaded.
        ("timer", {"msr": 0.5, "hlt": 0.5}),
        # Up to two x2APIC ICR writes (an IPI each way) per round trip, beside TSC-deadline
        # writes as a vCPU stops and restarts its tick. A wake-up sends an IPI when its
        # target has halted; a target still entering idle has its polling flag set and is
        # woken without an IPI (sched_wake_idle_without_ipi) and without a halt. On this
        # testbed: 1.4-6.6 MSR and 1.3-2.3 HLT exits per round trip, quiet and loaded.
        # It needs L2's second vCPU (kvm-testbed-smp): on one, the threads share a CPU (0.03
        # exits per trip).
        ("wakeup", {"msr": 0.75, "hlt": 0.5}),
        # O_DIRECT reads of 4 KiB from virtio-blk. A read's request is a kick (an MMIO write:
        # npf) unless the virtqueue has its notifications suppressed while QEMU polls it:
        # 0.84 kicks per read in one CI run, 0.35 in another, a race of its own, so the
        # bound only asks that kicks are seen. Its completion IRQ has an exit of its own
        # only when it finds the vCPU in L2: halted for the read (hlt: the IRQ ends the
        # halt) or running (interrupt, or vintr at an interrupt window). When it finds the
        # vCPU outside L2, in L1's KVM still handling the kick (slow under TCG), it is
        # injected at the next entry with no exit.
        # A race too: the completion had its own exit on 0.52, 0.625 and 0.19 of the reads
        # in three runs (all halts, no interrupt or vintr), and a read can show neither (0.78
        # to 1.36 exits of the two kinds per read). So the bounds ask that both kinds are
        # seen: losing either one fails its own bound.
        ("io", {"npf": 0.1, "interrupt+vintr+hlt": 0.1, "npf+interrupt+vintr+hlt": 0.5}),
        # The exit-group probes with a device or a port of their own: one read of the PCI
        # test device's register is one npf (an MMIO exit QEMU emulates), one outb to port
        # 0xed one io exit. Timer ticks add a few other exits per run, none of these kinds.
        ("mmio", {"npf": 0.9}),
        ("portio", {"io": 0.9}),
    ],
)
def test_probes_show_the_exits_their_mechanism_implies(cli, kvm_l1_l2_store, probe, least):
    """Per iteration, net of the start-up's exits: one start-up of a probe is measured
    once, and beside a CPU load it held more time-driven exits than a run's share (CI: the
    timer's TSC-deadline writes came out at 0.34 per sleep from runs of 62 sleeps). The
    shared run gives every run up to 1 s (--duration), some 200-270 iterations, so that
    error is divided among four times as many."""
    db, _ = kvm_l1_l2_store
    per = _per_iteration(cli, db, probe)
    for reasons, at_least in least.items():
        seen = sum(per.get(reason, 0) for reason in reasons.split("+"))
        assert seen > at_least, f"{reasons}: {seen:.3f} per iteration, all: {per}"


@slow
def test_l3_cpuid_is_multiplied_on_l1s_kvm(cli, kvm_l3_store):
    db, _ = kvm_l3_store  # the L3 stack's one boot, shared with test_levels_kvm
    _, prof = _profiles(db)
    assert {"L1", "L2"} <= set(prof["recorded_at"])
    res = cli("exits", "exp=latest", "--db", db, "--format", "json")
    rows = json.loads(res.stdout)
    total = {r["config"]: r["count"] for r in rows if r["reason"] == "total"}
    cpuid = {r["config"]: r["per_iteration"] for r in rows if r["reason"] == "cpuid"}
    seen_at_l1 = next(v for k, v in total.items() if k.endswith("@ L1"))
    seen_at_l2 = next(v for k, v in total.items() if k.endswith("@ L2"))
    cpuid_at_l2 = next(v for k, v in cpuid.items() if k.endswith("@ L2"))
    # L2's KVM sees each L3 CPUID once (its CPUID exits; its total also holds the timer and
    # interrupt exits of a longer run, 4.7 per iteration on a loaded machine); L1's KVM sees
    # each of them and the exits of L2's handling: 8 times L2's exits in a quiet run. The
    # exits of a run as recorded are compared, not those per iteration net of the start-up:
    # beside stress-ng in CI, a start-up recorded with more background exits than a run's
    # took L1's net total down to 1.04 per iteration, reason by reason.
    assert cpuid_at_l2 == pytest.approx(1.0, abs=0.1)
    assert seen_at_l1 > 3 * seen_at_l2, (seen_at_l1, seen_at_l2)


def test_explain_splits_l2s_timer_overhead_by_exit_group(cli, kvm_l1_l2_store):
    """`vmtax explain` end to end: the shared run's probes at L1 (TCG) and L2 (KVM inside it),
    L2's exits recorded by L1's KVM; the timer's mechanism is checked on the same boot
    (test_probes_show_the_exits_their_mechanism_implies)."""
    db, _ = kvm_l1_l2_store
    got = cli("explain", "exp=latest", "--db", db, "--format", "json")
    assert got.returncode == 0, got.stderr
    rows = json.loads(got.stdout)
    by = {(r["probe"], r["group"]): r for r in rows}
    assert {r["config"].split()[0] for r in rows} == {"L2"}
    assert {r["baseline"].split()[0] for r in rows} == {"L1"}
    # An exit's round trip on this testbed: microseconds of emulated time, positive.
    trip = rows[0]["round_trip_ns"]
    assert 100 < trip < 1e7, trip
    assert by[("cpuid", "residual")]["explained"] == 1.0
    timer = {g: r for (p, g), r in by.items() if p == "timer"}
    assert timer["Instruction emulation"]["top_reason"] == "msr"
    assert timer["Halt"]["exits_per_op"] > 0.5
    # A halt costs a round trip only: its recorded time is the sleep.
    assert timer["Halt"]["cost_ns"] == pytest.approx(trip)
    residual = timer["residual"]
    if residual["explained"] is not None:  # the overhead was detected
        shares = [r["share"] for r in timer.values()]
        assert sum(shares) == pytest.approx(1.0)
        assert residual["explained_low"] < residual["explained"] < residual["explained_high"]
    text = cli("explain", "exp=latest", "--db", db).stdout
    assert "timer at L2" in text and ("exits explain" in text or "not detected (p = " in text)


def _the_vcpu_split_adds_up(db: str, prof) -> None:
    """Every traced profile says which vCPU made each exit (L2 has two here: 0 and 1, the
    second idle but for its own timer), and its vCPUs' counts and handling times add up
    to its reasons'."""
    from vmtax.hostprof.store import vcpu_counts
    from vmtax.store import Store

    with Store.open(db) as s:
        split = vcpu_counts(s, int(prof["experiment_id"].iloc[0]))
    assert set(split["run_id"]) == set(prof["run_id"]) and set(split["vcpu"]) == {0, 1}
    whole = prof.groupby(["run_id", "code"])[["count", "time_ns"]].sum()
    parts = split.groupby(["run_id", "code"])[["count", "time_ns"]].sum()
    assert parts.equals(whole.loc[parts.index]) and len(parts) == len(whole)
