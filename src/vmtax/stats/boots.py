"""Variance components of run means nested in boots, and the runs per boot they call for.

Every run of a guest level shares its boot: the guest's memory layout, its clock source, the
host's placement of its vCPUs are drawn once per boot and last for all its runs. On the log
scale a run mean is ``y_bj = mu + b_b + e_bj`` with a boot effect ``b_b`` (variance
``between``) and run noise ``e_bj`` (variance ``within``). The estimators are the one-way
random-effects ANOVA ones, for unbalanced boots too (Searle, Casella and McCulloch, "Variance
Components", 1992, §3.6): ``within = MSW`` and ``between = max(0, (MSB − MSW) / n0)`` with
``n0 = (N − Σ n_b² / N) / (B − 1)``. For balanced boots and a positive ``between`` they are
REML's (statsmodels' MixedLM gives the same numbers, as the tests check); they are written here
because MixedLM fits iteratively (tens of milliseconds and convergence warnings for every probe
and level, and it fails on a single boot) where two sums of squares suffice.

Kalibera and Jones ("Rigorous benchmarking in reasonable time", ISMM 2013, §4) choose the
repetitions of the lower level from the components and the costs: with a boot costing
``c_boot`` (its start-up, not its runs) and a run ``c_run``, the runs per boot that give the
most precise mean for the time spent are ``ceil(sqrt(c_boot / c_run · within / between))``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: What :meth:`VarianceComponents.runs_per_boot` returns when no boot effect is detected
#: (``between`` = 0): the formula's infinity, bounded to a count a plan can use.
MAX_RUNS_PER_BOOT = 100
#: The stand-in boot id the store gives a run stored without one (``store.store``'s
#: ``UNRECORDED_BOOT``, kept equal by a test): such runs' boots are not known.
UNRECORDED_BOOT = "unrecorded-"
#: The warning of a comparison whose sides have one boot each (runs are then its unit).
ONE_BOOT = "one boot: the interval holds for this boot only"


@dataclass(frozen=True)
class VarianceComponents:
    """The two variance components of log run means (see the module's docstring).

    ``between`` is NaN with fewer than two boots (it cannot be estimated from one) and
    ``within`` is NaN when no boot has two runs.
    """

    between: float  # variance between boot means beyond what within-boot noise explains, >= 0
    within: float  # variance of run means within a boot
    boots: int
    runs: int

    @property
    def between_share(self) -> float:
        """``between / (between + within)``: the intraclass correlation; NaN when undefined."""
        total = self.between + self.within
        if not (math.isfinite(total) and total > 0):
            return math.nan
        return self.between / total

    def runs_per_boot(self, boot_cost_s: float, run_cost_s: float) -> int:
        """Kalibera and Jones' runs per boot: ``ceil(sqrt(boot_cost/run_cost · within/between))``,
        at least 1, and :data:`MAX_RUNS_PER_BOOT` when no boot effect is detected.

        Raises ValueError when a component is undefined (one boot, or no boot with two runs:
        measure a second boot first) or a cost is not positive.
        """
        if not (boot_cost_s > 0 and run_cost_s > 0):
            raise ValueError(f"costs must be positive, got boot {boot_cost_s}, run {run_cost_s}")
        if not (math.isfinite(self.between) and math.isfinite(self.within)):
            raise ValueError(
                f"variance components need at least 2 boots and a boot with 2 runs "
                f"(have {self.boots} boots, {self.runs} runs)"
            )
        if self.between <= 0:
            return MAX_RUNS_PER_BOOT
        best = math.sqrt(boot_cost_s / run_cost_s * self.within / self.between)
        return int(min(MAX_RUNS_PER_BOOT, max(1, math.ceil(best))))


def variance_components(
    log_run_means: np.ndarray, boot_ids: Sequence[object]
) -> VarianceComponents:
    """One-way random-effects ANOVA estimates of the between-boot and within-boot variances of
    ``log_run_means`` (one value per run, its boot in ``boot_ids``); unbalanced boots allowed.
    Non-finite values are left out."""
    y = np.asarray(log_run_means, dtype=np.float64)
    ids = np.asarray(list(boot_ids), dtype=object)
    if y.shape != ids.shape:
        raise ValueError(f"{y.size} values but {ids.size} boot ids")
    keep = np.isfinite(y)
    y, ids = y[keep], ids[keep]
    n_runs = int(y.size)
    if n_runs == 0:
        return VarianceComponents(math.nan, math.nan, 0, 0)
    codes, _ = pd.factorize(pd.Series(ids, dtype=object), sort=False)
    sizes = np.bincount(codes).astype(np.float64)
    k = int(sizes.size)
    means = np.bincount(codes, weights=y) / sizes
    ss_within = float(np.sum((y - means[codes]) ** 2))
    df_within = n_runs - k
    within = ss_within / df_within if df_within > 0 else math.nan
    if k < 2 or not math.isfinite(within):
        return VarianceComponents(math.nan, within, k, n_runs)
    grand = float(y.mean())
    ms_between = float(np.sum(sizes * (means - grand) ** 2)) / (k - 1)
    n0 = (n_runs - float(np.sum(sizes * sizes)) / n_runs) / (k - 1)
    between = max(0.0, (ms_between - within) / n0)
    return VarianceComponents(between, within, k, n_runs)


def boot_mean_dof(sizes: Sequence[int], between: float, within: float) -> float:
    """Satterthwaite's degrees of freedom of the sample variance of B boot means whose boots
    hold ``sizes`` runs: B − 1 when every boot mean has the same variance, fewer when they
    differ. A boot mean's variance is ``between + within / n_b``; with ``V`` their diagonal
    and ``A = I − J/B`` the centring, the sum of squares ``y'Ay`` has mean ``tr(AV)`` and
    variance ``2 tr(AVAV)``, so the chi-square it is matched to has ``tr(AV)² / tr(AVAV)``
    degrees of freedom (Satterthwaite 1946). A few boots of two runs beside boots of twenty
    (what adaptive sampling makes) carry most of the spread: the t quantile must come from
    their few degrees of freedom, not from B − 1. Unknown components: B − 1."""
    n = np.asarray(sizes, dtype=np.float64)
    b = int(n.size)
    if b < 2:
        return math.nan
    if not (math.isfinite(between) and math.isfinite(within)) or np.all(n == n[0]):
        return float(b - 1)
    v = max(between, 0.0) + max(within, 0.0) / n
    if not np.all(v > 0):
        return float(b - 1)
    av = np.diag(v) - np.outer(np.ones(b), v) / b  # A @ diag(v)
    dof = float(np.trace(av)) ** 2 / float(np.sum(av * av.T))
    return min(float(b - 1), max(1.0, dof))


@dataclass(frozen=True)
class ExternalBetween:
    """What a stored noise profile of this machine and configuration knows about the boots
    of one probe, learnt outside the experiment, and where it came from.

    ``variance`` and ``dof``: the between-boot variance of log run means and the
    Satterthwaite degrees of freedom of that estimate. It is what lets one boot a side give a
    verdict about the configuration: without it, a side measured in one boot shows only the
    difference within that boot (docs/statistics.md, "One boot a side"). ``dof`` is NaN when
    the profile detected no boot effect (its estimate is 0 and has no degrees of freedom):
    then it says nothing a one-boot side could use.

    ``within``, ``within_dof``, ``boot_variance``, ``boot_dof`` and ``boot_runs`` (all NaN
    when not known): the profile's within-boot variance, and its mean square of boot means,
    an estimate of the variance of one boot mean of ``boot_runs`` runs (``between + within /
    boot_runs``), each with its degrees of freedom. From them :meth:`boot_mean` forms the
    variance of one boot mean for boots of any run count, which a side measured in two boots
    or more pools with its own (:func:`vmtax.stats.intervals.side_log_variance`).
    ``vmtax.stats.compare.compare`` takes one per (probe, configuration) in ``between_boot``."""

    variance: float
    dof: float
    source: str = "profile"
    within: float = math.nan
    within_dof: float = math.nan
    boot_variance: float = math.nan
    boot_dof: float = math.nan
    boot_runs: float = math.nan

    def __post_init__(self) -> None:
        if not (math.isfinite(self.variance) and self.variance >= 0):
            raise ValueError(f"a between-boot variance must be >= 0, got {self.variance}")
        parts = (self.within, self.within_dof, self.boot_variance, self.boot_dof, self.boot_runs)
        given = [math.isfinite(x) for x in parts]
        positive = min(self.within_dof, self.boot_dof, self.boot_runs) > 0
        if any(given) and not (all(given) and min(parts) >= 0 and positive):
            raise ValueError(
                "a boot mean's variance needs within >= 0, boot_variance >= 0 and positive "
                f"degrees of freedom and runs, got {parts}"
            )
        if math.isnan(self.dof) and self.has_boot_mean:
            return  # no boot effect detected: only the boot mean's variance is known
        if not (math.isfinite(self.dof) and self.dof > 0):
            raise ValueError(f"its degrees of freedom must be > 0, got {self.dof}")

    @property
    def between_known(self) -> bool:
        """Whether the between-boot variance has degrees of freedom (what one boot needs)."""
        return math.isfinite(self.dof) and self.dof > 0

    @property
    def has_boot_mean(self) -> bool:
        """Whether :meth:`boot_mean` can be formed (what two boots or more need)."""
        return math.isfinite(self.boot_variance)

    def boot_mean(self, runs_per_boot: float) -> tuple[float, float]:
        """The variance of one boot mean of ``runs_per_boot`` runs (log scale), ``between +
        within / m``, and its Satterthwaite degrees of freedom: the arithmetic of
        ``vmtax.noise.components.Components.boot_mean`` from the numbers carried here
        (``boot_variance + (1/m − 1/boot_runs)·within``; at least ``within / m``, with the
        within-boot degrees of freedom, when no boot effect shows). ``(NaN, NaN)`` when the
        parts are not known."""
        m = float(runs_per_boot)
        if not (self.has_boot_mean and m > 0):
            return math.nan, math.nan
        c = 1.0 / m - 1.0 / self.boot_runs
        value = self.boot_variance + c * self.within
        floor = self.within / m
        if value <= floor:
            return floor, float(self.within_dof)
        denom = self.boot_variance**2 / self.boot_dof + (c * self.within) ** 2 / self.within_dof
        return value, value * value / denom


@dataclass(frozen=True)
class Units:
    """One side of a comparison in its independent units: boot means when the side was
    measured in two boots or more (``boot_level``), its runs otherwise; ``clusters`` say which
    units share an effect with other probes' units (their boot, or their round)."""

    values: np.ndarray
    clusters: np.ndarray
    boot_level: bool
    boots: int
    #: Degrees of freedom of the units' variance: n − 1, or for boot means with unequal runs
    #: per boot :func:`boot_mean_dof` (NaN: not given, n − 1 is meant).
    dof: float = math.nan
    #: Boot means: the harmonic mean of the runs per boot (``1/m`` is the mean of ``1/n_b``, so
    #: ``between + within / m`` is the mean variance of a boot mean); NaN for runs.
    runs_per_boot: float = math.nan


def units(
    values: np.ndarray, boot_ids: Sequence[object] | None, rounds: Sequence[object] | None = None
) -> Units:
    """``values`` (one per run) as :class:`Units`. ``boot_ids`` None means one boot; a run's
    round (its ``run_index``) is its cluster at the run level, its own position if None."""
    v = np.asarray(values, dtype=np.float64)
    ids = np.asarray(list(boot_ids), dtype=object) if boot_ids is not None else None
    rnd = np.asarray(list(rounds), dtype=object) if rounds is not None else np.arange(v.size)
    keep = np.isfinite(v)
    v, rnd = v[keep], rnd[keep]
    if ids is None:
        return Units(v, rnd, False, 1 if v.size else 0)
    ids = ids[keep]
    codes, labels = pd.factorize(pd.Series(ids, dtype=object), sort=False)
    if labels.size < 2:
        return Units(v, rnd, False, int(labels.size))
    sizes = np.bincount(codes)
    means = np.bincount(codes, weights=v) / sizes
    dof = float(labels.size - 1)
    if np.any(sizes != sizes[0]) and np.all(v > 0):
        comp = variance_components(np.log(v), list(ids))
        dof = boot_mean_dof(sizes.tolist(), comp.between, comp.within)
    harmonic = float(sizes.size / np.sum(1.0 / sizes))
    return Units(means, np.asarray(labels, dtype=object), True, int(labels.size), dof, harmonic)


@dataclass(frozen=True)
class ComponentIntervals:
    """The variance components of log run means with their confidence intervals.

    ``within`` (σ_w²): exact for normal run noise, ``SSW / χ²`` quantiles with N − B degrees
    of freedom. ``between`` (σ_b²): the modified large-sample (MLS) interval of a difference
    of mean squares, ``(MSB − MSW) / n0`` (Graybill and Wang 1980; Burdick and Graybill,
    "Confidence Intervals on Variance Components", 1992, §3.2), cut at 0. ``share``
    (σ_b² / (σ_b² + σ_w²), the intraclass correlation): exact from the F ratio
    ``MSB / MSW`` for balanced boots (Searle, Casella and McCulloch 1992, §3.5). With
    unbalanced boots ``n0`` stands in for the runs per boot (the intervals are then
    approximate; ``tests/test_boots_components.py`` simulates both). scipy and statsmodels
    have no interval for a variance component, hence these few lines. NaN where undefined
    (one boot, or no boot with two runs)."""

    components: VarianceComponents
    between_low: float
    between_high: float
    within_low: float
    within_high: float
    share_low: float
    share_high: float


def component_intervals(
    log_run_means: np.ndarray, boot_ids: Sequence[object], confidence: float = 0.95
) -> ComponentIntervals:
    """:func:`variance_components` with the intervals of :class:`ComponentIntervals`."""
    comp = variance_components(log_run_means, boot_ids)
    nan = math.nan
    if not (comp.boots >= 2 and math.isfinite(comp.within)):
        return ComponentIntervals(comp, nan, nan, nan, nan, nan, nan)
    y = np.asarray(log_run_means, dtype=np.float64)
    ids = np.asarray(list(boot_ids), dtype=object)[np.isfinite(y)]
    y = y[np.isfinite(y)]
    codes, _ = pd.factorize(pd.Series(ids, dtype=object), sort=False)
    sizes = np.bincount(codes).astype(np.float64)
    k, n = int(sizes.size), int(y.size)
    means = np.bincount(codes, weights=y) / sizes
    df1, df2 = k - 1, n - k
    msw = comp.within
    msb = float(np.sum(sizes * (means - y.mean()) ** 2)) / df1
    n0 = (n - float(np.sum(sizes * sizes)) / n) / df1
    w_lo_q, w_hi_q, g1, g2, h1, h2, g12, h12, fu, fl = _mls_constants(df1, df2, confidence)
    # within: SSW / sigma_w^2 ~ chi2(df2)
    w_low = msw * df2 / w_hi_q
    w_high = msw * df2 / w_lo_q
    diff = msb - msw
    lo = diff - math.sqrt(max(0.0, g1 * g1 * msb * msb + h2 * h2 * msw * msw + g12 * msb * msw))
    hi = diff + math.sqrt(max(0.0, h1 * h1 * msb * msb + g2 * g2 * msw * msw + h12 * msb * msw))
    # share: F / F-quantiles, mapped through rho = (F' - 1) / (F' - 1 + n0)
    ratio = msb / msw if msw > 0 else math.inf
    s_lo = s_hi = nan
    if math.isfinite(ratio):
        lo_f, hi_f = ratio / fu, ratio / fl
        s_lo = min(1.0, max(0.0, (lo_f - 1) / (lo_f - 1 + n0)))
        s_hi = min(1.0, max(0.0, (hi_f - 1) / (hi_f - 1 + n0)))
    return ComponentIntervals(comp, max(0.0, lo / n0), max(0.0, hi / n0), w_low, w_high, s_lo, s_hi)


@functools.lru_cache(maxsize=1024)
def _mls_constants(df1: int, df2: int, confidence: float) -> tuple[float, ...]:
    """The chi-square and F quantiles of :func:`component_intervals` for its degrees of
    freedom: (χ² lower, χ² upper of df2, G1, G2, H1, H2, G12, H12, F upper, F lower), where
    ``F_{a: p, q}`` is the upper-a quantile and ``F_{a: p, ∞} = χ²_a(p) / p``."""
    from vmtax.stats import dist  # scipy.special, only where intervals are asked for

    a = (1 - confidence) / 2
    f1u, f1l = dist.chi2_ppf(1 - a, df1) / df1, dist.chi2_ppf(a, df1) / df1
    f2u, f2l = dist.chi2_ppf(1 - a, df2) / df2, dist.chi2_ppf(a, df2) / df2
    fu, fl = float(dist.f_ppf(1 - a, df1, df2)), float(dist.f_ppf(a, df1, df2))
    g1, g2 = 1 - 1 / f1u, 1 - 1 / f2u
    h1, h2 = 1 / f1l - 1, 1 / f2l - 1
    g12 = ((fu - 1) ** 2 - g1 * g1 * fu * fu - h2 * h2) / fu
    h12 = ((1 - fl) ** 2 - h1 * h1 * fl * fl - g2 * g2) / fl
    return (
        float(dist.chi2_ppf(a, df2)),
        float(dist.chi2_ppf(1 - a, df2)),
        float(g1), float(g2), float(h1), float(h2), float(g12), float(h12), fu, fl,
    )  # fmt: skip
