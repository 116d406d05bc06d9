"""Adaptive sampling against the fixed design, for the same time budget.

One trial runs the default suite twice on this machine, back to back:
1. fixed: `vmtax run --runs 7` (the quick suite's former design: 7 runs per probe);
2. adaptive: `vmtax run` with `--budget` set to the time the fixed run spent measuring
   (from its experiment's start to its last stored run), so both had the same time.

For every probe it prints the runs each got and the 95% CI half-width of the mean over runs
(the interval `vmtax results show` reports, from describe's mean_interval), as a share of
the mean, and how many probes each design brought within the target. The load average and
the noise the adaptive run sampled are printed too: figures taken on a shared machine are
only comparable within one trial, which is why the two designs run in the same trial.

Example:
    python bench/adaptive_vs_fixed.py --trials 1 --precision 3%
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from sqlalchemy import func, select

from vmtax.sampling.outcome import lines as precision_lines
from vmtax.stats.describe import mean_interval
from vmtax.store import Store
from vmtax.store.models import Run


def vmtax(*args: str) -> tuple[float, str]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", "from vmtax.cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"vmtax {' '.join(args)} failed: {proc.stderr.strip()}")
    return time.monotonic() - start, proc.stdout


def half_widths(store: Store, exp: int) -> pd.DataFrame:
    runs = store.runs([f"exp={exp}"])
    ok = runs[runs["status"] == "ok"]
    rows = []
    for probe, group in ok.groupby("probe"):
        mean, _, _, _, high = mean_interval(group["mean"])
        rows.append({"probe": probe, "n": len(group), "hw": 100.0 * (high - mean) / abs(mean)})
    return pd.DataFrame(rows).set_index("probe")


def measuring_seconds(store: Store, exp: int) -> float:
    """From the experiment's start to its last stored run."""
    info = store.experiment(exp)
    t = Run.__table__
    with store.engine.connect() as c:
        last = c.execute(select(func.max(t.c.created_at)).where(t.c.experiment_id == exp)).scalar()
    start = pd.Timestamp(info["started_at"]).tz_localize(None)
    return (pd.Timestamp(last).tz_localize(None) - start).total_seconds()


def trial(db: str, precision: str, seed: int) -> None:
    load = os.getloadavg()
    wall_f, _ = vmtax("run", "--runs", "7", "--db", db, "--seed", str(seed))
    with Store.open(db) as store:
        fixed_exp = int(store.latest_experiment_id())
        budget = measuring_seconds(store, fixed_exp)
        fixed = half_widths(store, fixed_exp)
    wall_a, _ = vmtax(
        "run", "--db", db, "--seed", str(seed),
        "--precision", precision, "--budget", f"{budget:.1f}s",
    )  # fmt: skip
    with Store.open(db) as store:
        adaptive_exp = int(store.latest_experiment_id())
        adaptive = half_widths(store, adaptive_exp)
        notes = precision_lines(store, adaptive_exp)
    target = float(precision.rstrip("%"))
    both = fixed.add_suffix("_fixed").join(adaptive.add_suffix("_adaptive"), how="outer")
    print(f"load average before the trial: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"fixed 7 runs: {wall_f:.1f} s wall, {budget:.1f} s measuring; "
          f"adaptive: budget {budget:.1f} s, {wall_a:.1f} s wall")  # fmt: skip
    print(f"{'probe':<10} {'fixed n':>7} {'fixed ±%':>9} {'adapt n':>7} {'adapt ±%':>9}")
    for probe, r in both.iterrows():
        print(f"{probe:<10} {r.n_fixed:7.0f} {r.hw_fixed:9.2f} {r.n_adaptive:7.0f} "
              f"{r.hw_adaptive:9.2f}")  # fmt: skip
    met_f = int((both["hw_fixed"] <= target).sum())
    met_a = int((both["hw_adaptive"] <= target).sum())
    print(f"within ±{precision}: fixed {met_f} of {len(both)}, adaptive {met_a} of {len(both)}; "
          f"median half-width fixed {both['hw_fixed'].median():.2f}%, "
          f"adaptive {both['hw_adaptive'].median():.2f}%")  # fmt: skip
    for line in notes:
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--precision", default="3%")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{Path(tmp) / 'bench.db'}"
        for i in range(a.trials):
            trial(db, a.precision, a.seed + i)
    return 0


if __name__ == "__main__":
    sys.exit(main())
