"""A confidence interval for a smooth function of the means of independent groups of runs
(the delta method), with Welch–Satterthwaite degrees of freedom.

Each group is an array of shape (runs, k): one row per run (the independent unit), k
quantities per run (for example a run's time per operation, its exits per operation and its
handling time per operation, which are measured in the same run and so correlated). The
estimate is ``fn`` of the group means; its variance is the sum over groups of
``g' S g / n`` (g: the gradient of ``fn`` in that group's means, S: the group's sample
covariance); the interval is the estimate ± t(df) times its square root, df from Welch and
Satterthwaite's formula over the groups' contributions, so that two groups of one quantity
give exactly Welch's interval for a difference of means.

Written here because neither scipy nor statsmodels has it: statsmodels' delta method
(``NonlinearDeltaCov``) is private, takes one joint covariance and uses normal quantiles,
which at five runs a side give intervals that cover well under 95%.
tests/test_explain_coverage.py checks the coverage by simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vmtax.stats import dist

CONFIDENCE = 0.95


@dataclass(frozen=True)
class DeltaInterval:
    estimate: float
    low: float
    high: float
    df: float


def delta_interval(
    fn: Callable[[Sequence[np.ndarray]], float],
    groups: Sequence[np.ndarray],
    confidence: float = CONFIDENCE,
    extra: tuple[float, float] | None = None,
) -> DeltaInterval:
    """``fn(means)`` (one mean vector per group) with its interval; low and high are NaN when a
    group has fewer than two runs (its spread is unknown).

    ``extra`` = (variance, degrees of freedom) adds an independent term, e.g. one future
    run's own spread, for a prediction interval."""
    data = [np.atleast_2d(np.asarray(g, dtype=np.float64).T).T for g in groups]
    means = [g.mean(axis=0) for g in data]
    estimate = float(fn(means))
    if any(g.shape[0] < 2 for g in data) or not np.isfinite(estimate):
        return DeltaInterval(estimate, np.nan, np.nan, np.nan)
    parts = []
    for i, g in enumerate(data):
        grad = _gradient(fn, means, i)
        cov = np.atleast_2d(np.cov(g, rowvar=False, ddof=1))
        parts.append((float(grad @ cov @ grad) / g.shape[0], g.shape[0] - 1))
    if extra is not None:
        parts.append((float(extra[0]), float(extra[1])))
    variance = sum(v for v, _ in parts)
    if not np.isfinite(variance):
        return DeltaInterval(estimate, np.nan, np.nan, np.nan)
    if variance <= 0:
        return DeltaInterval(estimate, estimate, estimate, np.inf)
    df = variance**2 / sum(v**2 / dof for v, dof in parts if v > 0)
    half = float(dist.t_ppf(0.5 + confidence / 2, df)) * variance**0.5
    return DeltaInterval(estimate, estimate - half, estimate + half, float(df))


def _gradient(
    fn: Callable[[Sequence[np.ndarray]], float], means: list[np.ndarray], which: int
) -> np.ndarray:
    """Central differences in one group's means, each step relative to that mean's size."""
    base = means[which]
    grad = np.zeros_like(base)
    for j, value in enumerate(base):
        step = 1e-6 * max(abs(float(value)), 1e-12)
        up, down = base.copy(), base.copy()
        up[j] += step
        down[j] -= step
        hi = fn([up if k == which else m for k, m in enumerate(means)])
        lo = fn([down if k == which else m for k, m in enumerate(means)])
        grad[j] = (hi - lo) / (2 * step)
    return grad
