"""`vmtax explain` on synthetic stores whose costs are known: every exit's handling time,
the round trip, and an overhead no exit carries. The runs and profiles go through the store's
own writers (the exit-profile recorder's JSON shape is built here; the recorder itself needs
the nested testbed, where tests/test_hostprof_testbed.py runs explain end to end)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import vmtax.hostprof.store as hp

ROUND_TRIP = 4_000.0  # ns: one exit's world switch out and back in at L2
ITERATIONS = 1_000
# SVM exit codes: cpuid, msr, hlt, npf, interrupt, io
CODE = {"cpuid": 0x72, "msr": 0x7C, "hlt": 0x78, "npf": 0x400, "interrupt": 0x60, "io": 0x7B}
# Per probe: its baseline ns/op, its exits per op and handling ns per exit by reason (None:
# never timed), and the overhead no exit explains (ns/op).
TRUTH = {
    "cpuid": (200.0, {"cpuid": (1, 30_000.0)}, 0.0),
    # The halt's recorded time (the vCPU slept 0.9 ms) is waiting, not handling.
    "timer": (50_000.0, {"msr": (1, 6_000.0), "hlt": (1, 900_000.0)}, 5_000.0),
    "http": (
        100_000.0, {"npf": (3, 8_000.0), "interrupt": (2, 2_000.0), "io": (1, None)}, 20_000.0,
    ),
}  # fmt: skip
STARTUP = 40  # cpuid exits of the agent's own start-up, per profiled run
# Run-to-run noise (lognormal sigma) of a run's time per op and of its handling times. The
# round trip is a difference of two large numbers (34 µs − 30 µs), so with 6 runs its
# standard error is about 1.2%: the tolerances below are about 4 of them.
TIME_NOISE, HANDLING_NOISE = 0.003, 0.002


def _cost(reasons: dict) -> dict[str, float]:
    """Each reason's true cost per exit: handling (a halt none; untimed: the mean of the timed
    ones) plus the round trip."""
    timed = {r: v for r, v in reasons.items() if v[1] is not None and r != "hlt"}
    mean = sum(n * h for n, h in timed.values()) / max(sum(n for n, _ in timed.values()), 1)
    return {
        r: ROUND_TRIP + (0.0 if r == "hlt" else mean if h is None else h)
        for r, (n, h) in reasons.items()
    }


def _l2_time(probe: str) -> float:
    base, reasons, residual = TRUTH[probe]
    cost = _cost(reasons)
    return base + sum(n * cost[r] for r, (n, _) in reasons.items()) + residual


def _populate(store, rng, *, runs: int = 6, flat: tuple[str, ...] = ()) -> int:
    exp = store.create_experiment(
        command=["vmtax", "run"], suite="t", seed=0, plan={}, vmtax_version="t", agent_version="t",
    )  # fmt: skip
    plan = 0
    for level in ("L0", "L1", "L2"):
        cfg = store.configuration(
            experiment_id=exp, level=level, labels={"accel": "kvm" if level == "L2" else "tcg"},
            fingerprint={"cpu": {"tsc_hz": 2e9}}, target="synthetic", provenance={},
        )  # fmt: skip
        for probe in (*TRUTH, *flat):
            # cpuid in cycles at 2 GHz (put on the ns scale with the TSC rate)
            scale = 2.0 if probe == "cpuid" else 1.0
            if probe in flat:
                true = 30_000.0
            elif level == "L2":
                true = _l2_time(probe)
            else:
                true = TRUTH[probe][0] * (0.5 if level == "L0" else 1.0)
            # A flat probe draws the same run means at every level (p = 1, nothing to find).
            draw = np.random.default_rng(99) if probe in flat else rng
            for i in range(runs):
                mean = true * draw.lognormal(0.0, TIME_NOISE) * scale
                unit = "tsc_cycles" if probe == "cpuid" else "ns"
                run = store.add_run(
                    experiment_id=exp, configuration_id=cfg, probe=probe, plan_index=plan,
                    run_index=i, header={"unit": unit, "better": "lower"},
                    summary={"n": ITERATIONS, "mean": mean},
                    values=np.full(ITERATIONS, mean), warmup_values=np.zeros(0), status="ok",
                )  # fmt: skip
                if level == "L2":
                    _profile(store, run, probe, rng)
            plan += 1
    store.finish_experiment(exp, "ok")
    return exp


def _profile(store, run: int, probe: str, rng) -> None:
    reasons = TRUTH[probe][1] if probe in TRUTH else {"cpuid": (0.001, 30_000.0)}
    rows, startup = [], {}
    for reason, (per_op, handling) in reasons.items():
        count = int(round(per_op * ITERATIONS))
        if reason == "cpuid":
            count += STARTUP
            startup[str(CODE["cpuid"])] = STARTUP
        timed = 0 if handling is None else count
        time_ns = (
            0 if handling is None else int(count * handling * rng.lognormal(0.0, HANDLING_NOISE))
        )
        rows.append({"code": CODE[reason], "count": count, "time_ns": time_ns, "timed": timed})
    hp.save_profile(
        store, int(run), "L1",
        {"isa": "svm", "complete": True, "dropped": 0, "reasons": rows, "startup": startup},
    )  # fmt: skip


def _rows(cli, db: str, *extra: str) -> list[dict]:
    res = cli("explain", "exp=latest", "--db", db, "--format", "json", *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.fast
def test_known_costs_and_residuals_are_recovered(cli, store, sqlite_url):
    _populate(store, np.random.default_rng(3))
    rows = _rows(cli, sqlite_url)
    for row in rows:
        assert list(row)[:7] == [
            "config", "baseline", "probe", "group", "exits_per_op", "cost_ns", "share",
        ]  # fmt: skip
        assert row["config"].startswith("L2") and row["baseline"].startswith("L1")
    by = {(r["probe"], r["group"]): r for r in rows}
    # The round trip, calibrated on cpuid (its start-up exits taken off), within 5%.
    assert rows[0]["round_trip_ns"] == pytest.approx(ROUND_TRIP, rel=0.05)
    groups = {"msr": "Instruction emulation", "hlt": "Halt", "npf": "MMIO",
              "interrupt": "Interrupt", "io": "I/O"}  # fmt: skip
    for probe in ("timer", "http"):
        _, reasons, residual = TRUTH[probe]
        cost = _cost(reasons)
        overhead = _l2_time(probe) - TRUTH[probe][0]
        for reason, (n, _) in reasons.items():
            row = by[(probe, groups[reason])]
            assert row["exits_per_op"] == pytest.approx(n, rel=1e-9)
            # Each group's cost per exit within 5% (the round trip's error carries over).
            assert row["cost_ns"] == pytest.approx(cost[reason], rel=0.05), (probe, reason)
            assert row["share"] == pytest.approx(n * cost[reason] / overhead, rel=0.05)
            assert row["top_reason"] == reason
        res = by[(probe, "residual")]
        assert res["cost_ns"] == pytest.approx(residual, abs=0.02 * overhead)
        truth = 1 - residual / overhead
        assert res["explained"] == pytest.approx(truth, abs=0.02)
        assert res["explained_low"] < truth < res["explained_high"]
        assert res["explained_high"] - res["explained_low"] < 0.1
        assert sum(r["share"] for r in rows if r["probe"] == probe) == pytest.approx(1.0)
    assert "waiting" in by[("timer", "Halt")]["cost_basis"]
    assert "mean timed handling" in by[("http", "I/O")]["cost_basis"]
    # cpuid calibrates the round trip: explained 1 by construction, no residual.
    assert by[("cpuid", "residual")]["explained"] == 1.0
    assert by[("cpuid", "residual")]["cost_ns"] == pytest.approx(0.0, abs=1.0)


@pytest.mark.fast
def test_the_table_names_the_fraction_and_the_top_reasons(cli, store, sqlite_url):
    _populate(store, np.random.default_rng(4), flat=("syscall",))
    res = cli("explain", "--db", sqlite_url)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "exits explain" in text and "95% CI" in text
    assert "top: MMIO" in text and "(npf)" in text
    # The same time at both levels: no overhead to split, worded as absence of evidence.
    line = next(x for x in text.splitlines() if x.startswith("syscall at"))
    assert "overhead not detected (p = " in line, line
    md = cli("explain", "--db", sqlite_url, "--format", "markdown", "--probe", "http")
    assert md.returncode == 0 and "| MMIO |" in md.stdout and "syscall" not in md.stdout


def _usage_error(res, *words: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.fast
def test_bad_input_is_one_line_and_exit_2(cli, store, sqlite_url):
    _populate(store, np.random.default_rng(5), runs=3)
    db = ("--db", sqlite_url)
    # A configuration without an exit profile is the store's lack, exit 1 as in vmtax exits.
    unprofiled = cli("explain", *db, "--config", "level=L1")
    assert unprofiled.returncode == 1 and "no exit profile" in unprofiled.stderr
    _usage_error(cli("explain", *db, "--baseline", "level=L0"), "not one level below L2")
    _usage_error(cli("explain", *db, "--probe", "nosuch"), "'nosuch'", "mechanism is unknown")
    _usage_error(cli("explain", *db, "--round-trip-probe", "timer"), "not the null exit")
    _usage_error(cli("explain", *db, "--format", "yaml"), "--format")
    # As everywhere, a selector that matches nothing stored is a run-time failure (exit 1).
    missing = cli("explain", "exp=999", *db)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "999" in missing.stderr


@pytest.mark.slow
def test_the_report_draws_one_stacked_bar_per_workload(cli, store, sqlite_url, tmp_path):
    _populate(store, np.random.default_rng(6), runs=3, flat=("syscall",))
    md = tmp_path / "r.md"
    res = cli("report", "exp=latest", "--db", sqlite_url, "-o", str(md), "--format", "markdown",
              "--resamples", "200")  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    assert "What exits explain of L2 accel=kvm's overhead over L1 accel=tcg" in text
    # The figure's data: the shares explain computes, undetected overheads left out.
    from vmtax.report.exits import explain_figures, explained
    from vmtax.report.gather import load
    from vmtax.store import Store

    with Store.open(sqlite_url) as s:
        data = load(s, ["exp=latest"])
        rows = explained(data.runs, data.exit_profiles, data.tsc_hz)
    (spec,) = explain_figures(rows)
    bars = spec.draw.args[0]
    assert set(bars["config"]) == {"cpuid", "http", "timer"}
    for probe, sub in bars.groupby("config"):
        assert sub["value"].sum() == pytest.approx(1.0, abs=0.01), probe
