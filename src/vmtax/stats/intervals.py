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

Runs are the unit inside a boot, boots above that: a side measured in two boots or more enters
as its boot means (:func:`vmtax.stats.boots.units`), with the boots' degrees of freedom, so the
interval covers the boot-to-boot spread; a side with one boot keeps its runs, and its interval
holds for that boot only. Boot means against boot means keep Welch–Satterthwaite (0.94–0.98 at
2, 3 and 5 boots a side). Boot means against one boot's runs (a guest level against L0) do
not: with two or three boots, Welch–Satterthwaite's degrees of freedom undercover (0.87–0.93:
a side with 1 or 2 degrees of freedom whose variance happens to come out small also gets many
degrees of freedom), and the smaller side's degrees of freedom overcover (0.999 at 2 boots), so
that interval takes its quantile from the Behrens–Fisher distribution,
``sqrt(w)·T(d_c) + sqrt(1 − w)·T(d_b)`` with ``w`` the configuration's share of the variance:
0.95–0.985 at 2, 3 and 5 boots (the tests show it; it is conservative when L0's runs are
noisier than the guest's boot means, up to 0.99).
scipy has no Behrens–Fisher distribution, so its CDF is integrated here on a grid of T(d_c)
quantiles, and its quantiles are tabulated in ``w`` once per pair of degrees of freedom (their
roots by Brent's method, :mod:`vmtax.stats.brent`, which needs no ``scipy.optimize``).

A geometric mean across probes is the mean of their log-ratios, but the probes are not
independent: the plan measures them in rounds (run r of every probe close together in time),
and a guest's probes share its boots, so a slow round or boot moves every probe at once.
:func:`geomean_clustered` therefore takes the round (or the boot) as the resampled unit: each
unit's linearised contribution to the log geomean, ``(u/m − 1)/(n K)``, is summed per cluster,
and the cluster sums give the variance (the cluster-robust sandwich, with ``C/(C − 1)``) and
C − 1 degrees of freedom per side, combined as above (Behrens–Fisher when one side's clusters
are boots and the other's rounds, Welch–Satterthwaite otherwise). With
one run per probe in each round this is the variance of the per-round geomean ratios over R.
The same holds for a chain of levels (ΔL): a ratio of
neighbours is a ratio of means like any other.

scipy has Welch's t test but not the delta-method interval of a ratio of means, so the few
lines that build the standard error are written here; the t quantiles are scipy's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vmtax.noise.borrow import Borrowed, pool
from vmtax.stats import brent, dist
from vmtax.stats.boots import ExternalBetween, Units

CONFIDENCE = 0.95


@dataclass(frozen=True)
class LogVariance:
    """One side's share of a log-ratio's variance: ``s²/(n m²)`` and its degrees of freedom."""

    var: float
    dof: float


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
    half = float(dist.t_ppf(0.5 + confidence / 2, df)) * math.sqrt(total)
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


_BF_NODES = (np.arange(800) + 0.5) / 800  # midpoints of T(d1)'s quantiles: the integration grid
_BF_WEIGHTS = np.linspace(0.0, 1.0, 41)


@functools.lru_cache(maxsize=64)
def _t_nodes(df: int) -> np.ndarray:
    return dist.t_ppf(_BF_NODES, df)


def behrens_fisher_cdf(x: float, w: float, df1: int, df2: int) -> float:
    """P(sqrt(w)·T1 + sqrt(1 − w)·T2 <= x), T1 ~ t(df1) and T2 ~ t(df2) independent."""
    if w >= 1:
        return float(dist.t_cdf(x, df1))
    if w <= 0:
        return float(dist.t_cdf(x, df2))
    t1 = _t_nodes(int(df1))
    return float(np.mean(dist.t_cdf((x - math.sqrt(w) * t1) / math.sqrt(1 - w), df2)))


#: Gauss–Legendre nodes in each of behrens_fisher_sf's six pieces: 80 agree with
#: scipy.integrate.quad (without its absolute tolerance) to 1e-11 relative wherever the
#: probability is above 1e-15, for x in [0.5, 60], w in [1e-7, 1 − 1e-7] and 1 to 200 degrees
#: of freedom; 16 and 48 miss 1e-9 (tests/test_stats_roots.py).
_BF_TAIL_NODES = 80


@functools.lru_cache(maxsize=4)
def _legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy's Gauss–Legendre nodes and weights, moved from (−1, 1) to (0, 1)."""
    u, weights = np.polynomial.legendre.leggauss(n)
    return (u + 1) / 2, weights / 2


def behrens_fisher_sf(x: float, w: float, df1: int, df2: int) -> float:
    """P(sqrt(w)·T1 + sqrt(1 − w)·T2 > x) by quadrature over one term's density. The grid of
    :func:`behrens_fisher_cdf` leaves out T1's far tails, and one minus it reached exactly 0
    from x ≈ 10, where the probability is about 1e-5: a p-value printed as 0."""
    if w >= 1:
        return float(dist.t_sf(x, df1))
    if w <= 0:
        return float(dist.t_sf(x, df2))
    if x < 0:
        return 1.0 - behrens_fisher_sf(-x, w, df1, df2)
    # The integral of pdf1(t)·sf2((x − a·t)/b) by a fixed Gauss–Legendre rule, written here
    # because scipy.integrate.quad would import scipy.integrate (a few tenths of a second of
    # CPU) on every compare whose p-value reaches the far tail.
    a, b = math.sqrt(w), math.sqrt(1 - w)
    if a > b:  # integrate over the smaller term, so that sf2 varies on a scale b/a >= 1
        a, b, df1, df2 = b, a, df2, df1
    t0, r = x / a, b / a  # sf2 is 1/2 at t0, and changes on a scale r
    span = max(t0, r)
    u, weights = _legendre(_BF_TAIL_NODES)
    nodes, masses = [], []
    # Pieces (start, direction, scale, length) around T1's mode (0) and sf2's step (t0):
    # t = start ± scale·sinh(v) over the length, or ± scale·tan(v) to infinity.
    for start, sign, scale, length in (
        (0.0, -1, 1.0, span),
        (-span, -1, span, math.inf),
        (0.0, 1, 1.0, t0 / 2),
        (t0, -1, r, t0 / 2),
        (t0, 1, r, span),
        (t0 + span, 1, span, math.inf),
    ):
        if length == math.inf:
            v = u * (math.pi / 2)
            nodes.append(start + sign * scale * np.tan(v))
            masses.append(weights * (math.pi / 2) * scale / np.cos(v) ** 2)
        else:
            top = math.asinh(length / scale)
            nodes.append(start + sign * scale * np.sinh(u * top))
            masses.append(weights * top * scale * np.cosh(u * top))
    t = np.concatenate(nodes)
    value = float(
        np.dot(dist.t_pdf(t, df1) * dist.t_sf((x - a * t) / b, df2), np.concatenate(masses))
    )
    return float(min(max(value, 0.0), 1.0))


def behrens_fisher_p(t: float, w: float, df1: int, df2: int) -> float:
    """The two-sided p-value of |statistic| ``t``: from the grid that the intervals' quantiles
    come from (so p < 1 − confidence exactly when the interval excludes the null), and, in
    the far tail where that grid runs out (below 0.01: there it gave half the probability,
    and 0 at the extreme), by quadrature."""
    p = min(1.0, 2.0 * (1.0 - behrens_fisher_cdf(t, w, df1, df2)))
    return p if p >= 0.01 else min(1.0, 2.0 * behrens_fisher_sf(t, w, df1, df2))


def _bf_gap(x: float, w: float, df1: int, df2: int, q: float) -> float:
    return behrens_fisher_cdf(x, w, df1, df2) - q


@functools.lru_cache(maxsize=4096)
def _bf_entry(df1: int, df2: int, confidence: float, i: int) -> float:
    """The table's quantile at weight ``_BF_WEIGHTS[i]``: Student's t at the ends, the root
    of the CDF by scipy's Brent method between them (vmtax.stats.brent: the same roots,
    without importing scipy.optimize)."""
    q = 0.5 + confidence / 2
    w = _BF_WEIGHTS[i]
    if w in (0.0, 1.0):
        return float(dist.t_ppf(q, df1 if w else df2))
    # sqrt(w)·a + sqrt(1 − w)·b <= sqrt(2)·max(a, b): the root lies below this
    hi = 1.5 * float(dist.t_ppf(q, min(df1, df2))) + 1.0
    return brent.brentq(functools.partial(_bf_gap, w=w, df1=df1, df2=df2, q=q), 0.0, hi)


def _bf_table(df1: int, df2: int, confidence: float) -> np.ndarray:
    """The whole table of 41 weights."""
    return np.array([_bf_entry(df1, df2, confidence, i) for i in range(_BF_WEIGHTS.size)])


def _bf_needed(w: np.ndarray) -> set[int]:
    """The table entries ``np.interp`` reads for the weights ``w``: the two ends of each
    one's interval, or the end beyond which it lies (NaN reads none)."""
    w = w[~np.isnan(w)]
    last = _BF_WEIGHTS.size - 1
    inside = (w >= _BF_WEIGHTS[0]) & (w < _BF_WEIGHTS[last])
    left = np.searchsorted(_BF_WEIGHTS, w[inside], side="right") - 1
    needed = {int(j) for j in left} | {int(j) + 1 for j in left}
    if (w < _BF_WEIGHTS[0]).any():
        needed.add(0)
    if (w >= _BF_WEIGHTS[last]).any():
        needed.add(last)
    return needed


def behrens_fisher_quantile(
    w: float | np.ndarray, df1: int, df2: int, confidence: float = CONFIDENCE
) -> np.ndarray:
    """The two-sided ``confidence`` quantile of the Behrens–Fisher distribution at weight
    ``w`` (interpolated in a table of 41 weights; vectorised in ``w``). Only the entries the
    interpolation reads are computed (each root costs a few dozen evaluations of the CDF);
    the others stay NaN, which ``np.interp`` never reads."""
    df1, df2, confidence = int(df1), int(df2), float(confidence)
    table = np.full(_BF_WEIGHTS.size, np.nan)
    for i in _bf_needed(np.atleast_1d(np.asarray(w, dtype=np.float64))):
        table[i] = _bf_entry(df1, df2, confidence, i)
    return np.interp(w, _BF_WEIGHTS, table)


def borrowed(units: Units, external: ExternalBetween | None) -> Borrowed | None:
    """For a side of boot means (two boots or more) with a profile that knows the variance of
    a boot mean: that side's variance of one boot mean pooled with the profile's for boots of
    its runs, or its own when the F-test says the profile no longer applies
    (:func:`vmtax.noise.borrow.pool`); None when there is nothing to borrow.

    The interval works on boot means of run values by the delta method, so the side's own
    estimate is its relative variance of boot means, ``s²/x̄²`` (``B`` times
    :func:`log_variance`'s), with its degrees of freedom (``B − 1``, or Satterthwaite's for
    unequal boots): to first order the variance of a log boot mean, which is what the
    profile's ``between + within / m`` estimates (``m``: the harmonic mean of the side's runs
    per boot)."""
    if not (units.boot_level and external is not None and external.has_boot_mean):
        return None
    lv = log_variance(units.values)
    if lv is None:
        return None
    profile, profile_df = external.boot_mean(units.runs_per_boot)
    if not (profile > 0 and profile_df > 0):
        return None
    dof = units.dof if math.isfinite(units.dof) else lv.dof
    return pool(lv.var * units.values.size, dof, profile, profile_df)


def side_log_variance(units: Units, external: ExternalBetween | None = None) -> LogVariance | None:
    """One side's ``(variance of log mean, degrees of freedom)`` at the level that varies:

    - boot means (two boots or more): ``s²/(B m²)`` with B − 1 degrees of freedom, fewer when
      the boots hold unequal runs (:func:`vmtax.stats.boots.boot_mean_dof`);
    - boot means with an ``external`` profile that knows a boot mean's variance: the pooled
      variance of one boot mean over B, with the pooled degrees of freedom (B − 1 and the
      profile's), unless the F-test says the profile no longer applies: then as above
      (:func:`borrowed`);
    - one boot's runs with an ``external`` between-boot variance (a stored noise profile):
      the boot's own run spread plus the boot effect it cannot show, ``σ_b² + s²/(n m²)``,
      with Satterthwaite's degrees of freedom from the profile's and the runs';
    - one boot's runs without: ``s²/(n m²)``, n − 1, an interval for that boot only.

    None when it cannot be had (under two units, or a mean that is not positive)."""
    lv = log_variance(units.values)
    if lv is None:
        return None
    if units.boot_level:
        got = borrowed(units, external)
        if got is not None and got.used_profile:
            return LogVariance(got.variance / units.values.size, got.df)
        dof = units.dof if math.isfinite(units.dof) else lv.dof
        return LogVariance(lv.var, dof)
    if external is None or not external.between_known:
        return lv
    ext = max(float(external.variance), 0.0)
    total = ext + lv.var
    if ext == 0:
        return lv
    denom = ext * ext / float(external.dof) + lv.var * lv.var / lv.dof
    return LogVariance(total, total * total / denom)


def _boot_sides(
    cfg: Units,
    base: Units,
    cfg_external: ExternalBetween | None,
    base_external: ExternalBetween | None,
) -> tuple[LogVariance, LogVariance, bool] | None:
    """Both sides' parts and whether the quantile is Behrens–Fisher's: when the sides' units
    differ in kind, or their degrees of freedom differ (unequal boots a side, or a side whose
    variance is pooled with a profile's: its degrees of freedom are then B − 1 and the
    profile's, and the other side's differ unless it pooled the same)."""
    vc = side_log_variance(cfg, cfg_external)
    vb = side_log_variance(base, base_external)
    if vc is None or vb is None:
        return None
    kind_c = cfg.boot_level or (cfg_external is not None and cfg_external.between_known)
    kind_b = base.boot_level or (base_external is not None and base_external.between_known)
    return vc, vb, kind_c != kind_b or vc.dof != vb.dof


def boot_ratio_interval(
    cfg: Units,
    base: Units,
    better: str,
    confidence: float = CONFIDENCE,
    *,
    cfg_external: ExternalBetween | None = None,
    base_external: ExternalBetween | None = None,
) -> RatioInterval:
    """:func:`ratio_interval` on the sides' units (boot means or runs). Welch–Satterthwaite
    when both sides have the same kind of unit and the same degrees of freedom (equal boots
    a side); the Behrens–Fisher quantile otherwise (boot means against one boot's runs, or
    unequal boots a side: docs/statistics.md, "Unequal boots a side"). Non-integer degrees of
    freedom are rounded down for the Behrens–Fisher table (conservative)."""
    plain = ratio_interval(cfg.values, base.values, better, confidence=confidence)
    if not plain.parts:
        return plain
    sides = _boot_sides(cfg, base, cfg_external, base_external)
    if sides is None:
        return RatioInterval(plain.estimate, math.nan, math.nan)
    vc, vb, bf = sides
    total = vc.var + vb.var
    if total == 0:
        return RatioInterval(plain.estimate, plain.estimate, plain.estimate, (vc, vb))
    log_est = math.log(plain.estimate)
    if not bf:
        low, high = t_interval(log_est, (vc, vb), confidence=confidence)
        return RatioInterval(plain.estimate, low, high, (vc, vb))
    q = float(behrens_fisher_quantile(vc.var / total, _idof(vc.dof), _idof(vb.dof), confidence))
    half = q * math.sqrt(total)
    return RatioInterval(
        plain.estimate, math.exp(log_est - half), math.exp(log_est + half), (vc, vb)
    )


def boot_ratio_pvalue(
    cfg: Units,
    base: Units,
    *,
    cfg_external: ExternalBetween | None = None,
    base_external: ExternalBetween | None = None,
) -> float:
    """The two-sided p-value :func:`boot_ratio_interval` is the dual of (p < 1 − confidence
    exactly when the interval excludes 1); NaN when the interval cannot be had."""
    c = np.asarray(cfg.values, dtype=np.float64)
    b = np.asarray(base.values, dtype=np.float64)
    if c.size < 2 or b.size < 2 or not (c.mean() > 0 and b.mean() > 0):
        return math.nan
    sides = _boot_sides(cfg, base, cfg_external, base_external)
    if sides is None:
        return math.nan
    vc, vb, bf = sides
    log_est = math.log(float(c.mean()) / float(b.mean()))
    total = vc.var + vb.var
    if total == 0:
        return 0.0 if log_est != 0 else 1.0
    t = abs(log_est) / math.sqrt(total)
    if not bf:
        df = total * total / (vc.var * vc.var / vc.dof + vb.var * vb.var / vb.dof)
        return float(2.0 * dist.t_sf(t, df))
    w = vc.var / total
    return behrens_fisher_p(t, w, _idof(vc.dof), _idof(vb.dof))


def _idof(dof: float) -> int:
    return max(1, int(math.floor(dof + 1e-9)))


def behrens_fisher_pvalues(
    log_est: np.ndarray, total: np.ndarray, w: np.ndarray, df1: int, df2: int
) -> np.ndarray:
    """Vectorised Behrens–Fisher p-values (for simulations): ``|log_est| / sqrt(total)``
    against ``sqrt(w)·T(df1) + sqrt(1 − w)·T(df2)``, the arithmetic of
    :func:`boot_ratio_pvalue` on many comparisons at once."""
    t = np.abs(np.asarray(log_est, dtype=np.float64)) / np.sqrt(total)
    w = np.clip(np.asarray(w, dtype=np.float64), 1e-12, 1 - 1e-12)
    flat_t, flat_w = t.ravel(), w.ravel()
    out = np.empty(flat_t.size)
    nodes = _t_nodes(int(df1))
    for start in range(0, flat_t.size, 4096):
        tt = flat_t[start : start + 4096, None]
        ww = flat_w[start : start + 4096, None]
        cdf = dist.t_cdf((tt - np.sqrt(ww) * nodes) / np.sqrt(1 - ww), df2).mean(-1)
        out[start : start + 4096] = np.minimum(1.0, 2.0 * (1.0 - cdf))
    # The far tail as behrens_fisher_p has it (by quadrature), so both paths agree.
    for i in np.flatnonzero(out < 0.01):
        out[i] = min(1.0, 2.0 * behrens_fisher_sf(flat_t[i], flat_w[i], int(df1), int(df2)))
    return out.reshape(t.shape)


def _log_parts(
    cfg: np.ndarray, base: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Means, delta-method variances of their logs and unit counts of both sides, units on
    the last axis: what the vectorised intervals below share."""
    c = np.asarray(cfg, dtype=np.float64)
    b = np.asarray(base, dtype=np.float64)
    nc, nb = c.shape[-1], b.shape[-1]
    mc, mb = c.mean(axis=-1), b.mean(axis=-1)
    vc = c.var(axis=-1, ddof=1) / (nc * mc * mc)
    vb = b.var(axis=-1, ddof=1) / (nb * mb * mb)
    return mc, mb, vc, vb, nc, nb


def boot_ratio_intervals(
    cfg_units: np.ndarray, base_units: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`boot_ratio_interval` (lower is better) of boot means against one boot's runs,
    for many comparisons at once, units on the last axis; vectorised for simulations (boot
    means against boot means: :func:`ratio_intervals`)."""
    mc, mb, vc, vb, nc, nb = _log_parts(cfg_units, base_units)
    total = vc + vb
    half = behrens_fisher_quantile(vc / total, nc - 1, nb - 1, confidence) * np.sqrt(total)
    log_est = np.log(mc / mb)
    return np.exp(log_est), np.exp(log_est - half), np.exp(log_est + half)


def behrens_fisher_pvalue(cfg: np.ndarray, base: np.ndarray) -> float:
    """The two-sided p-value of "equal means" that :func:`boot_ratio_interval` is the dual of
    (p < 1 − confidence exactly when the interval excludes 1); NaN under two units a side."""
    one = ratio_interval(cfg, base, "lower")
    if not one.parts:
        return math.nan
    vc, vb = one.parts
    total = vc.var + vb.var
    if total == 0:
        return 0.0 if one.estimate != 1 else 1.0
    t = abs(math.log(one.estimate)) / math.sqrt(total)
    w = vc.var / total
    return behrens_fisher_p(t, w, _idof(vc.dof), _idof(vb.dof))


def ratio_pvalue(cfg: np.ndarray, base: np.ndarray) -> float:
    """The two-sided p-value of "equal means" that :func:`ratio_interval` is the dual of:
    Welch's t on the log ratio of the means, with the interval's standard error and
    Welch–Satterthwaite degrees of freedom (p < 1 − confidence exactly when the interval
    excludes 1); NaN under two units a side. On boot means it is the test of two guest
    configurations measured in boots: unlike permuting 3 boot means against 3, whose p cannot
    go below 0.1, it has no floor (docs/statistics.md, "The boot-level test")."""
    c = np.asarray(cfg, dtype=np.float64)
    b = np.asarray(base, dtype=np.float64)
    if c.size < 2 or b.size < 2 or not (c.mean() > 0 and b.mean() > 0):
        return math.nan
    return float(ratio_pvalues(c, b))


def ratio_pvalues(cfg: np.ndarray, base: np.ndarray) -> np.ndarray:
    """:func:`ratio_pvalue` for many comparisons at once, units on the last axis (the same
    arithmetic as :func:`ratio_intervals`, vectorised for simulations). Both sides without
    spread: 1 for equal means, 0 otherwise."""
    mc, mb, vc, vb, nc, nb = _log_parts(cfg, base)
    total = vc + vb
    log_est = np.log(mc / mb)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = total * total / (vc * vc / (nc - 1) + vb * vb / (nb - 1))
        p = 2.0 * dist.t_sf(np.abs(log_est) / np.sqrt(total), df)
    return np.where(total > 0, p, np.where(log_est == 0, 1.0, 0.0))


def ratio_intervals(
    cfg_runs: np.ndarray, base_runs: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`ratio_interval` (lower is better) for many comparisons at once: the runs are
    on the last axis, every other axis is a separate comparison. The same arithmetic,
    vectorised for simulations (one t quantile per comparison, computed by scipy at once)."""
    mc, mb, vc, vb, nc, nb = _log_parts(cfg_runs, base_runs)
    total = vc + vb
    df = total * total / (vc * vc / (nc - 1) + vb * vb / (nb - 1))
    half = dist.t_ppf(0.5 + confidence / 2, df) * np.sqrt(total)
    log_est = np.log(mc / mb)
    return np.exp(log_est), np.exp(log_est - half), np.exp(log_est + half)


def cluster_log_variance(
    sides: Sequence[tuple[np.ndarray, np.ndarray]], k: int
) -> LogVariance | None:
    """The variance of one side's share of a log geomean over ``k`` probes: ``sides`` holds
    each probe's (unit values, cluster labels); None with fewer than two clusters or a mean
    that is not positive."""
    totals: dict[object, float] = {}
    for values, clusters in sides:
        v = np.asarray(values, dtype=np.float64)
        m = float(v.mean()) if v.size else math.nan
        if not (m > 0 and math.isfinite(m)):
            return None
        for c, x in zip(clusters, (v / m - 1.0) / (v.size * k), strict=True):
            totals[c] = totals.get(c, 0.0) + float(x)
    n = len(totals)
    if n < 2:
        return None
    u = np.fromiter(totals.values(), dtype=np.float64, count=n)
    return LogVariance(float(np.sum(u * u)) * n / (n - 1), n - 1)


def geomean_clustered(
    log_ratios: Sequence[float],
    cfg: Sequence[tuple[np.ndarray, np.ndarray]],
    base: Sequence[tuple[np.ndarray, np.ndarray]],
    confidence: float = CONFIDENCE,
    *,
    behrens_fisher: bool = False,
) -> RatioInterval:
    """The geometric mean of the probes' ratios, with its interval from the clusters (rounds
    or boots) the probes share; ``cfg`` and ``base`` hold each probe's (units, clusters).
    ``behrens_fisher`` when one side's clusters are boots and the other's rounds (as for
    :func:`boot_ratio_interval`), Welch–Satterthwaite otherwise."""
    logs = np.asarray(log_ratios, dtype=np.float64)
    if not logs.size or not np.isfinite(logs).all():
        return RatioInterval(math.nan, math.nan, math.nan)
    est = float(np.exp(logs.mean()))
    vc, vb = (cluster_log_variance(side, logs.size) for side in (cfg, base))
    if vc is None or vb is None:
        return RatioInterval(est, math.nan, math.nan)
    if not behrens_fisher:
        low, high = t_interval(math.log(est), (vc, vb), confidence=confidence)
        return RatioInterval(est, low, high, (vc, vb))
    total = vc.var + vb.var
    if total == 0:
        return RatioInterval(est, est, est, (vc, vb))
    half = float(behrens_fisher_quantile(vc.var / total, _idof(vc.dof), _idof(vb.dof), confidence))
    half *= math.sqrt(total)
    return RatioInterval(est, est * math.exp(-half), est * math.exp(half), (vc, vb))


def geomean_intervals_by_round(
    cfg_runs: np.ndarray,
    base_runs: np.ndarray,
    confidence: float = CONFIDENCE,
    *,
    behrens_fisher: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`geomean_clustered` for many comparisons at once: arrays of shape (..., probes,
    clusters), unit j of every probe in cluster j (run j of a round, or the boot means of
    boot j; lower is better). The same arithmetic, vectorised for simulations."""
    c = np.asarray(cfg_runs, dtype=np.float64)
    b = np.asarray(base_runs, dtype=np.float64)
    k = c.shape[-2]
    log_est = (np.log(c.mean(-1)) - np.log(b.mean(-1))).mean(-1)
    parts = []
    for x in (c, b):
        n = x.shape[-1]
        u = ((x / x.mean(-1, keepdims=True) - 1.0) / (n * k)).sum(-2)
        parts.append(((u * u).sum(-1) * n / (n - 1), n - 1))
    (vc, dc), (vb, db) = parts
    total = vc + vb
    if behrens_fisher:
        q = behrens_fisher_quantile(vc / total, dc, db, confidence)
    else:
        q = dist.t_ppf(0.5 + confidence / 2, total * total / (vc * vc / dc + vb * vb / db))
    half = q * np.sqrt(total)
    return np.exp(log_est), np.exp(log_est - half), np.exp(log_est + half)


def geomean_interval(
    ratios: Sequence[RatioInterval], confidence: float = CONFIDENCE
) -> RatioInterval:
    """The geometric mean of independent ratios, and its interval (NaN ends when any ratio
    lacks its variance parts). Probes measured in shared rounds or boots are not independent:
    compare uses :func:`geomean_clustered`; this one is the comparison the tests fail."""
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
