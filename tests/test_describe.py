"""Study A's description agrees with direct numpy/scipy computations on a small runs frame."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from vmtax.stats.describe import COLUMNS, describe

pytestmark = pytest.mark.fast


def _frame() -> tuple[pd.DataFrame, dict[tuple[str, str], pd.DataFrame]]:
    """Runs of two configurations x two probes, some failed or lost, in the store's layout.

    Returns the frame and, per (config, probe), the rows describe must use (status ok).
    """
    rng = np.random.default_rng(3)
    rows = []
    run_id = 0
    layout = {  # (config, level, probe, throughput unit) -> statuses in run order
        ("L0", "L0", "syscall", None): ["ok", "ok", "failed", "ok", "ok", "lost"],
        ("L0", "L0", "fileio", "MiB/s"): ["ok", "ok", "ok"],
        ("L1 accel=kvm", "L1", "syscall", None): ["ok", "lost", "ok", "ok", "ok", "ok", "ok"],
        ("L1 accel=kvm", "L1", "fileio", "MiB/s"): ["failed", "ok", "lost"],  # one usable run
    }
    for (config, level, probe, tunit), statuses in layout.items():
        for index, status in enumerate(statuses):
            run_id += 1
            # Failed and lost runs get wild values: any leak into the statistics shows.
            bad = status != "ok"
            mean = 1e6 if bad else rng.normal(100 if level == "L0" else 130, 4)
            rows.append(
                {
                    "run_id": run_id,
                    "experiment_id": 1,
                    "config": config,
                    "level": level,
                    "labels": {},
                    "probe": probe,
                    "unit": "ns",
                    "throughput_unit": tunit,
                    "run_index": index,
                    "status": status,
                    "n": 1000,
                    "mean": mean,
                    "median": mean,
                    "p95": 1e6 if bad else mean * 1.2 + rng.normal(0, 1),
                    "throughput": (1e9 if bad else rng.normal(500, 20)) if tunit else None,
                    "error": "agent exited 1" if bad else None,
                }
            )
    frame = pd.DataFrame(rows)
    ok = frame[frame["status"] == "ok"]
    expected = {key: group for key, group in ok.groupby(["config", "probe"])}
    return frame, expected


def _t_interval(x: np.ndarray) -> tuple[float, float]:
    """The 95% Student t interval of the mean, written out: mean -/+ t(0.975, n-1) s/sqrt(n)."""
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return x.mean() - half, x.mean() + half


def test_columns_and_order():
    frame, _ = _frame()
    out = describe(frame)
    assert list(out.columns) == COLUMNS
    assert {"throughput_ci_low", "throughput_ci_high", "resp_ci_low", "resp_ci_high"} <= set(
        out.columns
    )
    # configurations in the order they ran, probes alphabetically within each
    assert list(zip(out["config"], out["probe"], strict=True)) == [
        ("L0", "fileio"),
        ("L0", "syscall"),
        ("L1 accel=kvm", "fileio"),
        ("L1 accel=kvm", "syscall"),
    ]


def test_matches_direct_computation_over_ok_runs():
    frame, expected = _frame()
    out = describe(frame).set_index(["config", "probe"])
    for key, group in expected.items():
        row = out.loc[key]
        resp = group["mean"].to_numpy(dtype=float)
        assert row["n_runs"] == len(group) == resp.size
        assert row["resp_mean"] == pytest.approx(resp.mean(), rel=1e-12)
        assert row["p95"] == pytest.approx(group["p95"].mean(), rel=1e-12)
        if resp.size < 2:
            continue
        sem = resp.std(ddof=1) / math.sqrt(resp.size)
        assert row["resp_stderr"] == pytest.approx(sem, rel=1e-12)
        assert row["resp_stderr_pct"] == pytest.approx(100 * sem / resp.mean(), rel=1e-12)
        low, high = _t_interval(resp)
        assert row["resp_ci_low"] == pytest.approx(low, rel=1e-12)
        assert row["resp_ci_high"] == pytest.approx(high, rel=1e-12)
        assert row["resp_ci_low"] < row["resp_mean"] < row["resp_ci_high"]
    fileio = expected[("L0", "fileio")]["throughput"].to_numpy(dtype=float)
    row = out.loc[("L0", "fileio")]
    assert row["throughput_unit"] == "MiB/s"
    assert row["throughput_mean"] == pytest.approx(fileio.mean(), rel=1e-12)
    low, high = _t_interval(fileio)
    assert (row["throughput_ci_low"], row["throughput_ci_high"]) == (
        pytest.approx(low, rel=1e-12),
        pytest.approx(high, rel=1e-12),
    )


def test_failed_and_lost_runs_are_excluded():
    frame, _ = _frame()
    out = describe(frame).set_index(["config", "probe"])
    assert out.loc[("L0", "syscall"), "n_runs"] == 4  # 6 runs, one failed, one lost
    assert out.loc[("L1 accel=kvm", "syscall"), "n_runs"] == 6
    # the wild values given to failed/lost runs would dominate any statistic they entered
    assert (out["resp_ci_high"].dropna() < 1000).all()
    assert (out["p95"] < 1000).all()
    assert (out["throughput_ci_high"].dropna() < 1000).all()
    assert describe(frame[frame["status"] == "ok"]).equals(describe(frame))


def test_fewer_than_two_runs_or_no_values_give_nan_intervals():
    frame, expected = _frame()
    out = describe(frame).set_index(["config", "probe"])
    single = out.loc[("L1 accel=kvm", "fileio")]
    assert single["n_runs"] == 1
    assert single["resp_mean"] == pytest.approx(
        expected[("L1 accel=kvm", "fileio")]["mean"].iloc[0]
    )
    for col in (
        "resp_stderr",
        "resp_ci_low",
        "resp_ci_high",
        "throughput_ci_low",
        "throughput_ci_high",
    ):
        assert math.isnan(single[col]), col
    # probes without a throughput have no throughput interval, whatever the number of runs
    syscall = out.loc[("L0", "syscall")]
    assert pd.isna(syscall["throughput_unit"])
    assert math.isnan(syscall["throughput_mean"]) and math.isnan(syscall["throughput_ci_low"])


def test_identical_runs_give_a_zero_width_interval():
    frame, _ = _frame()
    same = frame[(frame["config"] == "L0") & (frame["probe"] == "syscall")].copy()
    same["mean"] = 42.0
    row = describe(same).iloc[0]
    assert row["resp_stderr"] == 0.0
    assert row["resp_ci_low"] == row["resp_ci_high"] == 42.0


def test_empty_frame_has_the_columns():
    out = describe(pd.DataFrame(columns=["config", "probe", "status"]))
    assert out.empty and list(out.columns) == COLUMNS


def test_the_terminal_table_calls_a_rate_a_mean_not_a_response_time():
    import pandas as pd

    from vmtax.report.terminal import studya_table

    def row(probe: str, unit: str) -> dict[str, object]:
        return {
            "config": "L0",
            "probe": probe,
            "throughput_mean": None,
            "throughput_unit": None,
            "throughput_stderr_pct": None,
            "resp_mean": 10.0,
            "resp_stderr": 1.0,
            "resp_stderr_pct": 10.0,
            "p95": 12.0,
            "unit": unit,
            "n_runs": 3,
        }

    def header(*rows: dict[str, object]) -> list[str]:
        return [str(c.header) for c in studya_table(pd.DataFrame(list(rows))).columns]

    assert "Resp. mean" in header(row("http", "ns"), row("cpuid", "cycles"))
    both = header(row("http", "ns"), row("crypto", "MB/s"))
    assert "Mean" in both and "Resp. mean" not in both
