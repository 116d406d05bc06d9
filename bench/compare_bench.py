"""Benchmark: `compare` of 3 configurations x 2 probes x 20 runs, 10^4 permutation resamples.

The comparison reads run-level values only (runs are the unit; the 10^7 raw samples the runs
were made from are not needed): the interval is Welch's t on the log ratio, the p-value a
permutation test with 10^4 resamples, Holm across the family. Target: <= 10 s on 2 cores.

Peers measured in the same process, to report ratios rather than machine-dependent times:
- "one pass": numpy's per-run mean and variance over the 10^7 samples behind the runs;
- "scipy run-level": scipy.stats.bootstrap + permutation_test on the run means alone for the
  same comparisons.

Run: python bench/compare_bench.py
"""

from __future__ import annotations

import time

import numpy as np
from scipy import stats

from vmtax.stats.compare import compare
from vmtax.testing.runs import Config, runs_frame


def main() -> None:
    configs = [
        Config("L0"),
        Config("L1", {"accel": "kvm"}, 1.05),
        Config("L2", {"accel": "kvm"}, 1.20),
    ]
    runs, samples = runs_frame(
        configs, probes=("syscall", "cpuid"), runs=20, iterations=83_334, seed=1
    )
    total = sum(v.size for v in samples.values())

    t0 = time.perf_counter()
    comp = compare(runs, "level=L0", resamples=10_000, seed=0)
    t_compare = time.perf_counter() - t0

    t0 = time.perf_counter()
    for v in samples.values():
        v.mean()
        v.var()
    t_pass = time.perf_counter() - t0

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for probe in ("syscall", "cpuid"):
        base = runs[(runs.probe == probe) & (runs.level == "L0")]["mean"].to_numpy()
        for level in ("L1", "L2"):
            cfg = runs[(runs.probe == probe) & (runs.level == level)]["mean"].to_numpy()
            stats.bootstrap(
                (cfg, base),
                lambda c, b, axis: c.mean(axis) / b.mean(axis),
                n_resamples=10_000,
                vectorized=True,
                method="percentile",
                rng=rng,
            )
            stats.permutation_test(
                (cfg, base),
                lambda c, b, axis: c.mean(axis) - b.mean(axis),
                n_resamples=10_000,
                vectorized=True,
                rng=rng,
            )
    t_scipy = time.perf_counter() - t0

    tested = comp.rows[comp.rows.verdict != "baseline"]
    print(f"samples: {total:,}  resamples: 10,000  rows: {len(comp.rows)}")
    print(f"compare: {t_compare:.2f} s (target <= 10 s)")
    print(f"peer one pass over the samples: {t_pass:.2f} s  ratio {t_compare / t_pass:.1f}x")
    print(
        f"peer scipy run-level bootstrap+permutation: {t_scipy:.2f} s  "
        f"ratio {t_compare / t_scipy:.1f}x"
    )
    print(
        tested[
            ["probe", "config", "overhead", "ci_low", "ci_high", "p_adjusted", "verdict"]
        ].to_string(index=False)
    )


if __name__ == "__main__":
    main()
