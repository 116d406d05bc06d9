"""Bootstrap confidence intervals for an overhead: the ratio of two means.

Overhead is direction-aware: ``mean(config) / mean(baseline)`` for lower-is-better metrics and
``mean(baseline) / mean(config)`` for higher-is-better ones, so above 1 always means slower.
Each side's statistic is the mean of its run values: every run weighs the same, because runs
(not iterations) are the independent unit.

Two resampling schemes:

- :func:`run_bootstrap`, when only one value per run is known: ``scipy.stats.bootstrap``
  resampling the runs of each side independently (two-sample, unpaired).
- :func:`hierarchical_bootstrap`, when the raw iterations are stored: first resample runs with
  replacement, then iterations within each chosen run. Resampling 10^7 iterations 10^4 times
  directly would be 10^11 draws, so the inner stage uses per-run summaries. The mean of
  ``n_i`` iterations drawn with replacement from run ``i`` has expectation ``m_i`` (the run
  mean) and variance ``v_i / n_i`` (``v_i`` the run's variance with ddof=0), and by the
  central limit theorem it is normal to a very good approximation once ``n_i`` is moderate.
  So each resampled run contributes ``m_i + sqrt(v_i / n_i) * Z`` with ``Z ~ N(0, 1)``: one
  normal draw per (resample, run) instead of ``n_i`` index draws. The cost is
  O(iterations) once for the summaries plus O(resamples x runs). When the exact inner
  resampling is cheap (few iterations in total, or runs shorter than ``EXACT_BELOW``
  iterations, where the normal approximation is weakest) it is done exactly instead.

Both return the percentile interval and keep the bootstrap distribution, so a geometric mean
across probes can combine the distributions of independent probes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

EXACT_BUDGET = 2_000_000  # total inner index draws allowed for the exact inner resample
EXACT_BELOW = 30  # runs shorter than this are always resampled exactly


@dataclass
class BootResult:
    estimate: float
    low: float
    high: float
    distribution: np.ndarray  # the bootstrap replicates of the overhead


def overhead(cfg_mean: float, base_mean: float, better: str) -> float:
    """Direction-aware ratio: >1 means the configuration is slower than the baseline."""
    num, den = (base_mean, cfg_mean) if better == "higher" else (cfg_mean, base_mean)
    return float(num / den) if den != 0 else math.nan


def _ratio(better: str):  # noqa: ANN202 - a statistic for scipy, vectorised over ``axis``
    def statistic(cfg: np.ndarray, base: np.ndarray, axis: int = -1) -> np.ndarray:
        c = np.mean(cfg, axis=axis)
        b = np.mean(base, axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            return b / c if better == "higher" else c / b

    return statistic


def _empty(estimate: float) -> BootResult:
    return BootResult(estimate, math.nan, math.nan, np.empty(0))


def run_bootstrap(
    cfg_runs: np.ndarray,
    base_runs: np.ndarray,
    better: str,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootResult:
    """Percentile CI of the overhead from run-level values, via ``scipy.stats.bootstrap``."""
    cfg_runs = np.asarray(cfg_runs, dtype=np.float64)
    base_runs = np.asarray(base_runs, dtype=np.float64)
    est = (
        overhead(cfg_runs.mean(), base_runs.mean(), better)
        if cfg_runs.size and base_runs.size
        else math.nan
    )
    if cfg_runs.size < 2 or base_runs.size < 2:
        return _empty(est)
    res = stats.bootstrap(
        (cfg_runs, base_runs),
        _ratio(better),
        n_resamples=resamples,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return BootResult(est, float(ci.low), float(ci.high), np.asarray(res.bootstrap_distribution))


def _side_means(runs: Sequence[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Resampled grand means (runs, then iterations within runs) for one side, shape (B,)."""
    n = np.array([r.size for r in runs], dtype=np.int64)
    m = np.array([r.mean() for r in runs])
    v = np.array([r.var() for r in runs])
    k = n.size
    pick = rng.integers(0, k, size=(resamples, k))
    exact = (n < EXACT_BELOW).any() or resamples * int(n.sum()) <= EXACT_BUDGET
    if exact and resamples * int(n.max()) * k <= 50 * EXACT_BUDGET:
        run_means = np.empty((resamples, k))
        for i in range(k):  # column i: resample i's i-th chosen run, its iterations resampled
            for j in np.unique(pick[:, i]):
                rows = np.flatnonzero(pick[:, i] == j)
                draws = rng.integers(0, n[j], size=(rows.size, n[j]))
                run_means[rows, i] = runs[j][draws].mean(axis=1)
    else:
        run_means = m[pick] + np.sqrt(v[pick] / n[pick]) * rng.standard_normal((resamples, k))
    return run_means.mean(axis=1)


def hierarchical_bootstrap(
    cfg: Sequence[np.ndarray],
    base: Sequence[np.ndarray],
    better: str,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootResult:
    """Percentile CI of the overhead resampling runs, then iterations within runs."""
    cfg = [np.asarray(r, dtype=np.float64) for r in cfg if np.size(r)]
    base = [np.asarray(r, dtype=np.float64) for r in base if np.size(r)]
    if not cfg or not base:
        return _empty(math.nan)
    est = overhead(np.mean([r.mean() for r in cfg]), np.mean([r.mean() for r in base]), better)
    if len(cfg) < 2 or len(base) < 2:
        return _empty(est)
    rng = np.random.default_rng(seed)
    c = _side_means(cfg, resamples, rng)
    b = _side_means(base, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        dist = b / c if better == "higher" else c / b
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(dist, [100 * alpha, 100 * (1 - alpha)])
    return BootResult(est, float(low), float(high), dist)


def geomean_interval(
    distributions: Sequence[np.ndarray],
    estimates: Sequence[float],
    confidence: float = 0.95,
    seed: int = 0,
) -> BootResult:
    """Geometric mean of overheads across independent probes, with a percentile CI.

    Probes are measured independently, so pairing their replicates gives draws from the joint
    bootstrap distribution; the geometric mean of each draw is a replicate of the geometric
    mean. Each probe's replicates are shuffled first: they were drawn with the same seed, and
    pairing them by index would pair the same resampled run positions.
    """
    est_arr = np.asarray(estimates, dtype=np.float64)
    est = (
        float(np.exp(np.mean(np.log(est_arr))))
        if est_arr.size and (est_arr > 0).all()
        else math.nan
    )
    usable = [d for d in distributions if d.size]
    if len(usable) != len(distributions) or not usable:
        return _empty(est)
    size = min(d.size for d in usable)
    rng = np.random.default_rng(seed)
    stack = np.vstack([rng.permutation(d)[:size] for d in usable])
    with np.errstate(divide="ignore", invalid="ignore"):
        dist = np.exp(np.mean(np.log(stack), axis=0))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.nanpercentile(dist, [100 * alpha, 100 * (1 - alpha)])
    return BootResult(est, float(low), float(high), dist)
