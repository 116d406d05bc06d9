"""Variance components of log run means, kept as the sums of squares they come from, so that
experiments pool with their degrees of freedom.

The model is the one of :mod:`vmtax.stats.boots`: a run mean's log is ``y = mu + b + e`` with a
boot effect ``b`` (variance ``between``) and run noise ``e`` (variance ``within``). One
experiment's configuration gives, per probe, a :class:`Source`: its boots ``k``, runs ``N``,
the between-boot and within-boot sums of squares and ``n0 = (N − Σ n_b² / N) / (k − 1)`` (the
runs per boot, for unbalanced boots too). Sources pool as one-way random-effects ANOVA pools
independent samples whose means may differ (each experiment keeps its own grand mean):

- ``within = Σ SSW / Σ (N − k)``, with ``Σ (N − k)`` degrees of freedom (chi-square interval);
- ``between = Σ w_i (MSB_i − within) / n0_i`` with ``w_i = (k_i − 1) / Σ (k_j − 1)``, zero when
  negative: the ANOVA estimate of each source, weighted by its degrees of freedom. For one
  source it is the ANOVA (and, balanced and positive, REML) estimate of ``stats.boots``;
- its 95% interval is Graybill and Wang's modified large-sample interval (Burdick and
  Graybill, "Confidence Intervals on Variance Components", 1992, §3.3): scipy and statsmodels
  give point estimates of the components, not intervals, so it is written here. With several
  sources the between-boot mean square is their weighted one, with Satterthwaite's degrees of
  freedom. Its coverage is simulated in ``tests/test_noise.py``;
- the variance of one boot mean of ``m`` runs, ``between + within / m``, which is what a
  boot-level interval needs, is the linear combination ``Σ a_i MSB_i + (1/m − Σ a_i) MSW``
  (``a_i = w_i / n0_i``), with Satterthwaite's degrees of freedom (:meth:`Components.boot_mean`).

Written by hand (numpy and scipy's quantiles) because the pooled sums of squares are what
folds a new experiment in; MixedLM refits from the raw runs and gives no degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Source:
    """One experiment's runs of one probe in one configuration, as sums of squares."""

    experiment_id: int | None
    boots: int
    runs: int
    n0: float  # runs per boot, (N − Σ n_b² / N) / (k − 1)
    ss_between: float  # Σ n_b (ȳ_b − ȳ)²
    ss_within: float  # Σ (y − ȳ_b)²

    @property
    def df_between(self) -> int:
        return self.boots - 1

    @property
    def df_within(self) -> int:
        return self.runs - self.boots

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "experiment_id": self.experiment_id,
            "boots": self.boots,
            "runs": self.runs,
            "n0": self.n0,
            "ss_between": self.ss_between,
            "ss_within": self.ss_within,
        }

    @classmethod
    def from_dict(cls, raw: object) -> Source:
        """A source read back from the store; ValueError when it is not one."""
        if not isinstance(raw, dict):
            raise ValueError(f"a source must be an object, got {type(raw).__name__}")
        exp = raw.get("experiment_id")
        src = cls(
            experiment_id=None if exp is None else int(exp),
            boots=int(raw["boots"]),
            runs=int(raw["runs"]),
            n0=float(raw["n0"]),
            ss_between=float(raw["ss_between"]),
            ss_within=float(raw["ss_within"]),
        )
        finite = all(math.isfinite(x) for x in (src.n0, src.ss_between, src.ss_within))
        if not (finite and src.boots >= 2 and src.runs > src.boots and src.n0 > 0):
            raise ValueError(f"a source needs 2 boots, a boot with 2 runs, finite sums: {raw}")
        if src.ss_between < 0 or src.ss_within < 0:
            raise ValueError(f"a sum of squares is negative: {raw}")
        return src


def source(
    log_run_means: np.ndarray, boot_ids: Sequence[object], experiment_id: int | None = None
) -> Source | None:
    """The sums of squares of one experiment's log run means (one per run, its boot in
    ``boot_ids``); None when they cannot give both components (fewer than 2 boots, or no
    boot with 2 runs). Non-finite values are left out."""
    y = np.asarray(log_run_means, dtype=np.float64)
    ids = np.asarray([str(b) for b in boot_ids], dtype=object)
    if y.shape != ids.shape:
        raise ValueError(f"{y.size} values but {ids.size} boot ids")
    keep = np.isfinite(y)
    y, ids = y[keep], ids[keep]
    _, codes = np.unique(ids.astype(str), return_inverse=True)
    sizes = np.bincount(codes).astype(np.float64)
    k, n = int(sizes.size), int(y.size)
    if k < 2 or n - k < 1:
        return None
    means = np.bincount(codes, weights=y) / sizes
    grand = float(y.mean())
    ss_between = float(np.sum(sizes * (means - grand) ** 2))
    ss_within = float(np.sum((y - means[codes]) ** 2))
    n0 = (n - float(np.sum(sizes * sizes)) / n) / (k - 1)
    return Source(experiment_id, k, n, n0, ss_between, ss_within)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True)
class Components:
    """Pooled components of one or more :class:`Source` s (see the module's docstring)."""

    sources: tuple[Source, ...]

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("components need at least one source")

    @property
    def boots(self) -> int:
        return sum(s.boots for s in self.sources)

    @property
    def runs(self) -> int:
        return sum(s.runs for s in self.sources)

    @property
    def df_within(self) -> int:
        return sum(s.df_within for s in self.sources)

    @property
    def within(self) -> float:
        return sum(s.ss_within for s in self.sources) / self.df_within

    def _weights(self) -> np.ndarray:
        df = np.array([s.df_between for s in self.sources], dtype=np.float64)
        return df / df.sum()

    def _msb(self) -> np.ndarray:
        return np.array([s.ss_between / s.df_between for s in self.sources])

    def _a(self) -> np.ndarray:
        return self._weights() / np.array([s.n0 for s in self.sources])

    @property
    def between_raw(self) -> float:
        """The untruncated estimate (may be negative: no boot effect detected)."""
        a = self._a()
        return float(np.sum(a * self._msb()) - a.sum() * self.within)

    @property
    def between(self) -> float:
        return max(0.0, self.between_raw)

    @property
    def between_share(self) -> float:
        total = self.between + self.within
        return self.between / total if total > 0 else math.nan

    def _msb_pooled(self) -> tuple[float, float, float]:
        """(the weighted between-boot mean square scaled to ``n0_eff``, its Satterthwaite
        degrees of freedom, ``n0_eff``); for one source (MSB, k − 1, n0)."""
        a, msb = self._a(), self._msb()
        n0_eff = 1.0 / float(a.sum())
        s1 = n0_eff * float(np.sum(a * msb))
        parts = (n0_eff * a * msb) ** 2 / np.array([s.df_between for s in self.sources])
        df1 = s1 * s1 / float(parts.sum()) if parts.sum() > 0 else float(self.sources[0].boots - 1)
        return s1, df1, n0_eff

    @property
    def df_between(self) -> float:
        """Degrees of freedom of the between-boot mean square (Satterthwaite when pooled)."""
        return self._msb_pooled()[1]

    def between_dof(self) -> float:
        """Satterthwaite's degrees of freedom of the ``between`` estimate itself,
        ``(Σ a_i MSB_i − c MSW)`` with ``c = Σ a_i``: fewer than the between-boot mean
        square's, the fewer the larger the within-boot share. NaN when no boot effect is
        detected (the estimate is 0)."""
        value = self.between_raw
        if not value > 0:
            return math.nan
        a, msb = self._a(), self._msb()
        denom = float(np.sum((a * msb) ** 2 / [s.df_between for s in self.sources]))
        denom += (float(a.sum()) * self.within) ** 2 / self.df_within
        return value * value / denom

    def without(self, experiment_id: int) -> Components | None:
        """These components without one experiment's source (None when it was the only
        one): what an experiment may borrow is learnt from the others."""
        kept = tuple(s for s in self.sources if s.experiment_id != experiment_id)
        return Components(kept) if kept else None

    def within_interval(self, confidence: float = CONFIDENCE) -> Interval:
        """The chi-square interval of ``within`` (exact for normal run noise)."""
        from scipy import stats  # heavy: scipy.stats, only where a profile's numbers are asked for

        df, alpha = self.df_within, 1.0 - confidence
        ss = self.within * df
        return Interval(
            ss / float(stats.chi2.ppf(1 - alpha / 2, df)), ss / float(stats.chi2.ppf(alpha / 2, df))
        )

    def between_interval(self, confidence: float = CONFIDENCE) -> Interval:
        """Graybill and Wang's modified large-sample interval of ``between`` (ends at 0 at
        least)."""
        from scipy import stats  # heavy: scipy.stats, only where a profile's numbers are asked for

        s1, n1, n0 = self._msb_pooled()
        s2, n2 = self.within, float(self.df_within)
        a = (1.0 - confidence) / 2  # each tail
        f_hi1, f_lo1 = stats.f.ppf(1 - a, n1, 1e9), stats.f.ppf(a, n1, 1e9)
        f_hi2, f_lo2 = stats.f.ppf(1 - a, n2, 1e9), stats.f.ppf(a, n2, 1e9)
        f_hi12, f_lo12 = stats.f.ppf(1 - a, n1, n2), stats.f.ppf(a, n1, n2)
        g1, h1 = 1 - 1 / f_hi1, 1 / f_lo1 - 1
        g2, h2 = 1 - 1 / f_hi2, 1 / f_lo2 - 1
        g12 = ((f_hi12 - 1) ** 2 - g1**2 * f_hi12**2 - h2**2) / f_hi12
        h12 = ((1 - f_lo12) ** 2 - h1**2 * f_lo12**2 - g2**2) / f_lo12
        v_low = g1**2 * s1**2 + h2**2 * s2**2 + g12 * s1 * s2
        v_high = h1**2 * s1**2 + g2**2 * s2**2 + h12 * s1 * s2
        low = (s1 - s2 - math.sqrt(max(v_low, 0.0))) / n0
        high = (s1 - s2 + math.sqrt(max(v_high, 0.0))) / n0
        return Interval(max(0.0, float(low)), max(0.0, float(high)))

    def boot_mean(self, runs_per_boot: float) -> tuple[float, float]:
        """The variance of one boot mean of ``runs_per_boot`` runs (log scale),
        ``between + within / m``, and its Satterthwaite degrees of freedom. It is at least
        ``within / m`` (no negative boot effect)."""
        m = float(runs_per_boot)
        if not m > 0:
            raise ValueError(f"runs per boot must be positive, got {runs_per_boot}")
        a, msb = self._a(), self._msb()
        c = 1.0 / m - float(a.sum())
        value = float(np.sum(a * msb)) + c * self.within
        floor = self.within / m
        if value <= floor:
            # No boot effect detected: the boot mean's variance is the runs' alone.
            return floor, float(self.df_within)
        denom = float(np.sum((a * msb) ** 2 / [s.df_between for s in self.sources]))
        denom += (c * self.within) ** 2 / self.df_within
        return value, value * value / denom

    def folded(self, more: Source) -> Components:
        """These components with one more source (one already there, by experiment id,
        is replaced: an experiment counts once)."""
        kept = tuple(
            s
            for s in self.sources
            if more.experiment_id is None or s.experiment_id != more.experiment_id
        )
        return Components((*kept, more))
