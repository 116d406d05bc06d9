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

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: What :meth:`VarianceComponents.runs_per_boot` returns when no boot effect is detected
#: (``between`` = 0): the formula's infinity, bounded to a count a plan can use.
MAX_RUNS_PER_BOOT = 100
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


@dataclass(frozen=True)
class Units:
    """One side of a comparison in its independent units: boot means when the side was
    measured in two boots or more (``boot_level``), its runs otherwise; ``clusters`` say which
    units share an effect with other probes' units (their boot, or their round)."""

    values: np.ndarray
    clusters: np.ndarray
    boot_level: bool
    boots: int


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
    means = np.bincount(codes, weights=v) / np.bincount(codes)
    return Units(means, np.asarray(labels, dtype=object), True, int(labels.size))
