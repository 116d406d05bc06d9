"""Confidence intervals of overheads (ratios of run means), calibrated at the run counts vmtax
uses, and always positive.

Runs are the unit. An overhead is a ratio of two means, so it is handled on the log scale:
``log(m_c / m_b)`` has, by the delta method, the variance ``s_c²/(n_c m_c²) + s_b²/(n_b m_b²)``,
and the interval is Welch's t on that scale (Welch–Satterthwaite degrees of freedom), mapped
back with ``exp``. Both ends of a ratio's interval are then positive by construction.

Why not the percentile bootstrap vmtax used before: with 5 runs a side it covered 0.87–0.88
instead of 0.95 (7 runs: 0.90–0.92), because resampling a handful of runs underestimates the
spread and has no small-sample correction; BCa does not fix that either. The t interval
covers 0.95–0.97 at n = 3..20 for normal, lognormal and heavy-tailed run means
(``tests/test_interval_coverage.py`` shows it, with the old method failing the same test).

A geometric mean across independent probes is the mean of their log-ratios: its variance is
the sum of theirs over K², with Welch–Satterthwaite degrees of freedom over every side's
variance component. The same holds for a chain of levels (ΔL): a ratio of neighbours is a
ratio of means like any other.

scipy has Welch's t test but not the delta-method interval of a ratio of means, so the few
lines that build the standard error are written here; the t quantiles are scipy's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class LogVariance:
    """One side's share of a log-ratio's variance: ``s²/(n m²)`` and its degrees of freedom."""

    var: float
    dof: int


@dataclass(frozen=True)
class RatioInterval:
    """A positive ratio with its interval; ``parts`` carry what a geomean needs."""

    estimate: float
    low: float
    high: float
    parts: tuple[LogVariance, ...] = ()

    @property
    def log_estimate(self) -> float:
        return math.log(self.estimate) if self.estimate > 0 else math.nan


NO_INTERVAL = (math.nan, math.nan)


def log_variance(runs: np.ndarray) -> LogVariance | None:
    """Variance of log(mean) of ``runs`` by the delta method; None when it cannot be had
    (fewer than 2 runs, or a mean that is not positive)."""
    runs = np.asarray(runs, dtype=np.float64)
    if runs.size < 2:
        return None
    m = float(runs.mean())
    if not (m > 0 and math.isfinite(m)):
        return None
    return LogVariance(float(runs.var(ddof=1)) / (runs.size * m * m), int(runs.size - 1))


def t_interval(
    log_estimate: float, parts: Sequence[LogVariance], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """exp(log_estimate ± t·se), se² = Σvar, Welch–Satterthwaite degrees of freedom."""
    if not parts or not math.isfinite(log_estimate):
        return NO_INTERVAL
    v = np.array([p.var for p in parts])
    dof = np.array([p.dof for p in parts], dtype=np.float64)
    total = float(v.sum())
    if total == 0:
        return math.exp(log_estimate), math.exp(log_estimate)
    df = total * total / float(np.sum(v * v / dof))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(total)
    return math.exp(log_estimate - half), math.exp(log_estimate + half)


def ratio_interval(
    cfg_runs: np.ndarray, base_runs: np.ndarray, better: str, confidence: float = CONFIDENCE
) -> RatioInterval:
    """The overhead ``mean(cfg)/mean(base)`` (``base/cfg`` when higher is better: above 1
    always means slower) and its interval; NaN ends when either side has under 2 runs or a
    mean that is not positive (a ratio's interval cannot be had then)."""
    cfg_runs = np.asarray(cfg_runs, dtype=np.float64)
    base_runs = np.asarray(base_runs, dtype=np.float64)
    if not (cfg_runs.size and base_runs.size):
        return RatioInterval(math.nan, math.nan, math.nan)
    mc, mb = float(cfg_runs.mean()), float(base_runs.mean())
    num, den = (mb, mc) if better == "higher" else (mc, mb)
    est = num / den if den != 0 else math.nan
    vc, vb = log_variance(cfg_runs), log_variance(base_runs)
    if vc is None or vb is None or not est > 0:
        return RatioInterval(est, math.nan, math.nan)
    low, high = t_interval(math.log(est), (vc, vb), confidence=confidence)
    return RatioInterval(est, low, high, (vc, vb))


def ratio_intervals(
    cfg_runs: np.ndarray, base_runs: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`ratio_interval` (lower is better) for many comparisons at once: the runs are
    on the last axis, every other axis is a separate comparison. The same arithmetic,
    vectorised for simulations (one t quantile per comparison, computed by scipy at once)."""
    c = np.asarray(cfg_runs, dtype=np.float64)
    b = np.asarray(base_runs, dtype=np.float64)
    nc, nb = c.shape[-1], b.shape[-1]
    mc, mb = c.mean(axis=-1), b.mean(axis=-1)
    vc = c.var(axis=-1, ddof=1) / (nc * mc * mc)
    vb = b.var(axis=-1, ddof=1) / (nb * mb * mb)
    total = vc + vb
    df = total * total / (vc * vc / (nc - 1) + vb * vb / (nb - 1))
    half = stats.t.ppf(0.5 + confidence / 2, df) * np.sqrt(total)
    log_est = np.log(mc / mb)
    return np.exp(log_est), np.exp(log_est - half), np.exp(log_est + half)


def geomean_interval(
    ratios: Sequence[RatioInterval], confidence: float = CONFIDENCE
) -> RatioInterval:
    """The geometric mean of independent ratios, and its interval (NaN ends when any ratio
    lacks its variance parts)."""
    logs = [r.log_estimate for r in ratios]
    if not ratios or not all(math.isfinite(x) for x in logs):
        return RatioInterval(math.nan, math.nan, math.nan)
    est = math.exp(sum(logs) / len(logs))
    if not all(r.parts for r in ratios):
        return RatioInterval(est, math.nan, math.nan)
    k2 = len(ratios) ** 2
    parts = tuple(LogVariance(p.var / k2, p.dof) for r in ratios for p in r.parts)
    low, high = t_interval(math.log(est), parts, confidence=confidence)
    return RatioInterval(est, low, high, parts)
