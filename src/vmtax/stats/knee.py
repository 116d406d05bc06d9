"""Overcommitment sweeps: where throughput stops scaling, where response time first rises,
whether a service-level objective holds, and why a flat curve is flat.

Input is one sequence of replicate samples per step (e.g. the throughput of each 1-minute
sample of a steady-state window), keyed by the step's overcommit ratio.

- **Knee** (:func:`find_knee`): a continuous two-segment ("hinge") linear model
  ``y = h + b*min(x-k, 0) + c*max(x-k, 0)`` fitted by least squares to every replicate, with
  the breakpoint ``k`` at one of the interior steps (a sweep measures nothing between its
  steps, so where between two steps the break lies cannot be told; study B states its knees
  as steps too). The interval for ``k`` is a percentile bootstrap (``scipy.stats.bootstrap``
  resamples each step's replicates independently, so every resample keeps every step). A
  knee is reported only if the hinge explains the data significantly better than one
  straight line (an F test; approximate, since ``k`` is chosen from the data), the curve was
  scaling before it (``b > 0``) and the slope after it is lower (the bootstrap interval of
  ``b - c`` lies above zero). A rise, a plateau and a drop (z/VM at 3:1) is fitted as a rise
  and one falling segment, whose breakpoint stays at the end of the rise. A plateau that
  turns into a decline (memory overcommitment of a fixed set of guests) has its knee where
  the decline begins.
- **Response-time rise** (:func:`response_rise`): each step against the first with a
  one-sided Mann-Whitney U test, Holm-adjusted over the steps (``stats.significance.adjust``),
  plus a minimum relative rise of the median so a trivial but significant shift is not called
  a rise.
- **SLO** (:func:`slo_check`): the p95 response time of each step against a limit (study E
  required 2 s); the highest ratio up to which every step met it.
- **Why flat** (:func:`classify_flat`): after the knee, host CPU utilisation (1.0 = all CPUs
  busy) near 1 means "saturated"; clearly below it means the curve is "flat with idle CPU"
  (study B: Xen flattened at 1.5:1 with its CPUs near 92%, z/VM at 100%).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from vmtax.stats.describe import mean_interval
from vmtax.stats.significance import adjust

CONFIDENCE = 0.95
ALPHA = 0.05
#: Host CPU utilisation (fraction of all CPUs) at or above which a flat curve is "saturated".
SATURATED_AT = 0.95
#: A response time must rise by at least this fraction of the first step's median to count.
MIN_RISE = 0.05
#: Study E's requirement: p95 response time at most 2 s.
DEFAULT_SLO_S = 2.0


@dataclass(frozen=True)
class Knee:
    """Where throughput stops scaling, with its bootstrap interval."""

    ratio: float
    low: float
    high: float
    slope_before: float
    slope_after: float
    #: Throughput at the knee (the fitted level ``h``).
    level: float
    #: F test of the hinge against one straight line (approximate: ``k`` is estimated).
    p_value: float

    def as_dict(self) -> dict[str, float]:
        """The knee as ``{ratio, low, high}`` (the JSON shape of ``vmtax sweep show``)."""
        return {"ratio": self.ratio, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class KneeFit:
    """The outcome of :func:`find_knee`: a knee, or why there is none."""

    knee: Knee | None
    #: ``knee`` | ``scales`` (no knee: one line fits) | ``flat`` (never scaled) | ``too-few``.
    shape: str
    reason: str


@dataclass(frozen=True)
class Rise:
    """The first step whose response time rose significantly over the first step's."""

    ratio: float | None
    #: Per step (after the first): ratio, relative rise of the median, Holm-adjusted p-value.
    steps: tuple[tuple[float, float, float], ...]


@dataclass(frozen=True)
class Slo:
    limit_s: float
    #: Per step: ratio, p95 response time in seconds, whether it met the limit.
    steps: tuple[tuple[float, float, bool], ...]
    #: The highest ratio up to which every step met the limit (None: the first already failed).
    max_ratio: float | None


@dataclass(frozen=True)
class Flat:
    """Why throughput is flat after the knee, from host CPU utilisation there."""

    kind: str  # "saturated" | "idle-cpu"
    utilisation: float
    low: float
    high: float
    ratios: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _design(x: np.ndarray, k: float) -> np.ndarray:
    d = x - k
    return np.column_stack([np.ones_like(x), np.minimum(d, 0.0), np.maximum(d, 0.0)])


def _flatten(ratios: Sequence[float], samples: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    xs = [np.full(np.shape(s)[-1], float(r)) for r, s in zip(ratios, samples, strict=True)]
    return np.concatenate(xs), np.concatenate(samples, axis=-1)


def _hinge_fits(
    x: np.ndarray, y: np.ndarray, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every ``y`` (last axis = observations, any leading batch axes): the index of the
    best breakpoint among ``candidates``, its (h, b, c) and its residual sum of squares.

    With the breakpoint fixed the hinge is linear in (h, b, c), so each candidate is one
    least-squares projection (numpy's pseudo-inverse) applied to every resample at once."""
    sses, betas = [], []
    for k in candidates:
        design = _design(x, float(k))
        beta = y @ np.linalg.pinv(design).T  # (..., 3)
        resid = y - beta @ design.T
        sses.append(np.sum(resid * resid, axis=-1))
        betas.append(beta)
    sse = np.stack(sses, axis=-1)  # (..., K)
    best = np.argmin(sse, axis=-1)
    beta = np.take_along_axis(np.stack(betas, axis=-2), best[..., None, None], axis=-2)[..., 0, :]
    return best, beta, np.take_along_axis(sse, best[..., None], axis=-1)[..., 0]


def find_knee(
    ratios: Sequence[float],
    samples: Sequence[Sequence[float]],
    *,
    confidence: float = CONFIDENCE,
    alpha: float = ALPHA,
    resamples: int = 2000,
    seed: int = 0,
) -> KneeFit:
    """The knee of a throughput curve: where a hinge fits and the slope drops after it.

    ``samples[i]`` holds the replicate throughputs of the step at ``ratios[i]`` (at least 2
    per step for an interval). Needs at least 4 steps: a hinge has 4 parameters.
    """
    order = np.argsort(np.asarray(ratios, dtype=np.float64), kind="stable")
    pairs = [(float(ratios[i]), np.asarray(samples[i], dtype=np.float64)) for i in order]
    pairs = [(r, s[np.isfinite(s)]) for r, s in pairs]
    pairs = [(r, s) for r, s in pairs if s.size]
    ratios = [r for r, _ in pairs]
    groups = [s for _, s in pairs]
    steps = np.asarray(ratios)
    if len(set(ratios)) < 4 or len(set(ratios)) != len(ratios):
        found = len(set(ratios))
        return KneeFit(None, "too-few", f"{found} distinct steps with data; a knee needs 4")
    candidates = steps[1:-1]
    x, y = _flatten(ratios, groups)
    n = len(y)
    best, beta, sse_hinge = _hinge_fits(x, y, candidates)
    k = float(candidates[int(best)])
    h, b, c = (float(v) for v in beta)
    line = stats.linregress(x, y)
    sse_line = float(np.sum((y - (line.intercept + line.slope * x)) ** 2))
    if n <= 4:
        p_value = math.nan
    elif sse_hinge <= 0:
        p_value = 0.0 if sse_line > 0 else 1.0
    else:
        f = ((sse_line - float(sse_hinge)) / 2) / (float(sse_hinge) / (n - 4))
        p_value = float(stats.f.sf(f, 2, n - 4))

    def statistic(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        _, ry = _flatten(ratios, [np.moveaxis(g, axis, -1) for g in resampled])
        idx, rbeta, _ = _hinge_fits(x, ry, candidates)
        return np.stack([candidates[idx], rbeta[..., 1] - rbeta[..., 2]])

    if all(g.size >= 2 for g in groups):
        with warnings.catch_warnings():
            # A knee that every resample puts on the same step is a degenerate distribution.
            warnings.simplefilter("ignore")
            boot = stats.bootstrap(
                tuple(groups),
                statistic,
                n_resamples=resamples,
                vectorized=True,
                paired=False,
                confidence_level=confidence,
                method="percentile",
                rng=np.random.default_rng(seed),
            )
        k_low, drop_low = (float(v) for v in boot.confidence_interval.low)
        k_high = float(boot.confidence_interval.high[0])
    else:  # one value per step: nothing to resample; the interval is the fit alone
        k_low = k_high = k
        drop_low = b - c
    scale = float(np.mean(np.abs(y))) or 1.0
    scaled = b > 0 and b * (k - steps[0]) >= 0.02 * scale
    significant = (p_value < alpha if math.isfinite(p_value) else b - c > 0) and drop_low > 0
    # A plateau that turns into a decline (memory overcommitment with a fixed number of
    # guests) is a knee too: where throughput stops holding.
    plateau = abs(b) * (k - steps[0]) < 0.02 * scale and c < 0
    if not significant or not (scaled or plateau):
        if not scaled:
            return KneeFit(None, "flat", "throughput did not scale from the first step")
        return KneeFit(
            None, "scales", f"one line fits as well as a knee (F test p = {p_value:.3g})"
        )
    knee = Knee(
        ratio=k,
        low=min(k_low, k),
        high=max(k_high, k),
        slope_before=b,
        slope_after=c,
        level=h,
        p_value=p_value,
    )
    return KneeFit(knee, "knee", f"slope {b:.4g} -> {c:.4g} per unit of ratio at {k:.3g}")


def response_rise(
    ratios: Sequence[float],
    samples: Sequence[Sequence[float]],
    *,
    alpha: float = ALPHA,
    min_rise: float = MIN_RISE,
) -> Rise:
    """The first step whose response times are significantly above the first step's.

    One-sided Mann-Whitney U (later step greater) of each step against the first, Holm-
    adjusted over all later steps, and a rise of the median by at least ``min_rise``.
    """
    order = np.argsort(np.asarray(ratios, dtype=np.float64), kind="stable")
    ratios = [float(ratios[i]) for i in order]
    groups = [np.asarray(samples[i], dtype=np.float64) for i in order]
    groups = [g[np.isfinite(g)] for g in groups]
    if len(groups) < 2 or groups[0].size == 0:
        return Rise(None, ())
    base = groups[0]
    base_median = float(np.median(base))
    raw, rises = [], []
    for g in groups[1:]:
        if g.size == 0:
            raw.append(math.nan)
            rises.append(math.nan)
            continue
        raw.append(float(stats.mannwhitneyu(g, base, alternative="greater").pvalue))
        rel = (float(np.median(g)) - base_median) / base_median if base_median else math.inf
        rises.append(rel)
    adjusted = adjust(np.asarray(raw), "holm")
    rows = tuple(
        (r, float(rel), float(p)) for r, rel, p in zip(ratios[1:], rises, adjusted, strict=True)
    )
    first = next((r for r, rel, p in rows if p < alpha and rel >= min_rise), None)
    return Rise(first, rows)


def slo_check(
    ratios: Sequence[float], p95_s: Sequence[float], limit_s: float = DEFAULT_SLO_S
) -> Slo:
    """Each step's p95 response time (seconds) against ``limit_s``."""
    rows = sorted((float(r), float(p)) for r, p in zip(ratios, p95_s, strict=True))
    steps = tuple((r, p, bool(math.isfinite(p) and p <= limit_s)) for r, p in rows)
    max_ratio = None
    for r, _, ok in steps:
        if not ok:
            break
        max_ratio = r
    return Slo(limit_s, steps, max_ratio)


def classify_flat(
    knee: Knee | None,
    ratios: Sequence[float],
    utilisation: Sequence[Sequence[float]],
    *,
    saturated_at: float = SATURATED_AT,
) -> Flat | None:
    """Saturated or idle CPU, from utilisation samples (fractions) of the steps at or past
    the knee. The steps counted begin at the step nearest the knee."""
    if knee is None:
        return None
    pairs = sorted(zip((float(r) for r in ratios), utilisation, strict=True), key=lambda p: p[0])
    steps = np.asarray([r for r, _ in pairs])
    start = float(steps[np.argmin(np.abs(steps - knee.ratio))])
    chosen = [(r, np.asarray(u, dtype=np.float64)) for r, u in pairs if r >= start]
    values = np.concatenate([u[np.isfinite(u)] for _, u in chosen]) if chosen else np.empty(0)
    if values.size == 0:
        return None
    import pandas as pd

    mean, _, _, low, high = mean_interval(pd.Series(values))
    if not math.isfinite(low):
        low = high = mean
    kind = "saturated" if mean >= saturated_at else "idle-cpu"
    return Flat(kind, float(mean), float(low), float(high), tuple(r for r, _ in chosen))
