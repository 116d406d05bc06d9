"""Study A's description of a set of runs: per configuration and probe, the mean throughput
and the mean response time, each with the standard error of the mean over runs, that error
as a percentage of the mean and the 95% Student t interval of the mean (n_runs - 1 degrees of
freedom; NaN with fewer than 2 runs), plus the mean of the runs' p95.

Runs are the independent unit, so every statistic is taken over run-level values (each run's
mean, throughput and p95), never over the pooled iterations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vmtax.stats import dist
from vmtax.stats.compare import level_number

CONFIDENCE = 0.95

COLUMNS = [
    "config",
    "level",
    "probe",
    "unit",
    "throughput_unit",
    "n_runs",
    "throughput_mean",
    "throughput_stderr",
    "throughput_stderr_pct",
    "throughput_ci_low",
    "throughput_ci_high",
    "resp_mean",
    "resp_stderr",
    "resp_stderr_pct",
    "resp_ci_low",
    "resp_ci_high",
    "p95",
]


def describe(runs_df: pd.DataFrame) -> pd.DataFrame:
    """One row per (config, probe) over the ``status == "ok"`` runs."""
    if runs_df.empty:
        return pd.DataFrame(columns=COLUMNS)
    ok = runs_df[runs_df["status"] == "ok"]
    rows = []
    for (config, probe), group in ok.groupby(["config", "probe"], sort=False):
        t_mean, t_err, t_pct, t_low, t_high = mean_interval(group["throughput"])
        r_mean, r_err, r_pct, r_low, r_high = mean_interval(group["mean"])
        rows.append(
            {
                "config": config,
                "level": group["level"].iloc[0],
                "probe": probe,
                "unit": group["unit"].iloc[0],
                "throughput_unit": _first(group["throughput_unit"]),
                "n_runs": len(group),
                "throughput_mean": t_mean,
                "throughput_stderr": t_err,
                "throughput_stderr_pct": t_pct,
                "throughput_ci_low": t_low,
                "throughput_ci_high": t_high,
                "resp_mean": r_mean,
                "resp_stderr": r_err,
                "resp_stderr_pct": r_pct,
                "resp_ci_low": r_low,
                "resp_ci_high": r_high,
                "p95": float(pd.to_numeric(group["p95"], errors="coerce").mean()),
            }
        )
    out = pd.DataFrame(rows, columns=COLUMNS)
    # Configurations by level (L0, L1, ..., L10: natural order; others last), then in the order
    # they ran; probes alphabetically within each.
    first = {c: i for i, c in enumerate(dict.fromkeys(out["config"]))}
    levels = out["level"].map(level_number).fillna(np.inf)
    out["_l"], out["_c"] = levels, out["config"].map(first)
    out = out.sort_values(["_l", "_c", "probe"], kind="stable")
    return out.drop(columns=["_l", "_c"]).reset_index(drop=True)


def mean_interval(values: pd.Series) -> tuple[float, float, float, float, float]:
    """Mean, standard error, error as % of the mean, and the t interval's two ends."""
    x = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=np.float64)
    if x.size == 0:
        return (np.nan,) * 5
    mean = float(x.mean())
    if x.size < 2:
        return (mean, np.nan, np.nan, np.nan, np.nan)
    sem = dist.sem(x)
    pct = 100.0 * sem / abs(mean) if mean != 0 else np.nan
    if sem > 0:
        low, high = dist.t_interval(CONFIDENCE, x.size - 1, loc=mean, scale=sem)
    else:  # identical runs: scipy would return NaN for a zero scale
        low = high = mean
    return (mean, sem, pct, float(low), float(high))


def _first(values: pd.Series) -> str | None:
    present = values.dropna()
    return str(present.iloc[0]) if len(present) else None
