"""Overcommitment sweeps: where throughput stops scaling, where response time first rises,
whether a service-level objective holds, and why a flat curve is flat.

The unit of every statistic here is the **replicate mean**: the mean of one replicate's
steady-state window (one boot or placement of the step's guests). A window's samples are
autocorrelated and share their boot, so they are never treated as independent repeats. A
sweep's replicates run in rounds (blocks): each round measures every step once, in a random
order, on freshly booted guests; ``blocks`` gives each replicate mean its round, and the
models below carry a fixed effect per round, so drift between rounds (other load on the
machine) is not mistaken for an effect of the ratio.

- **Step interval** (:func:`replicate_interval`): Student's t over the step's replicate means.
- **Knee** (:func:`find_knee`): a continuous two-segment ("hinge") linear model
  ``y = h + b*min(x-k, 0) + c*max(x-k, 0)`` (plus the rounds) fitted by weighted least
  squares to the replicate means, with the breakpoint ``k`` continuous: profiled over the
  steps' range, and exact between two steps, where the best ``k`` is where the line through
  the steps on the left crosses the line through those on the right. ``k`` can be placed only
  between the second and the last-but-one step: with one step on a side, a bend anywhere
  before the second step fits exactly as one at it. A best ``k`` at either end of that range
  is therefore reported in words, without a ratio (``edge``). The 95% interval inverts the
  profile likelihood-ratio test: the breakpoints whose hinge fits not significantly worse
  than the best, ``(SSE(k) - SSE(best)) / s^2 <= F(0.95; 1, df)``, with ``s^2`` and ``df`` from
  the step-means model (one mean per step, plus the rounds), whose variance does not depend
  on the hinge being right; at the ends of the range, a boundary of ``k``'s space, the
  statistic is 0 half the time and the p-value is halved (Self and Liang 1987). The interval
  runs between the kept breakpoints (interpolated to where p crosses 0.05), and on to the first
  (last) step when the second (last-but-one) is kept. Its coverage is simulated in
  ``tests/test_sweep_coverage.py``. A knee is reported only if the hinge explains the data
  significantly better than one straight line (an F test; approximate, since ``k`` is chosen
  from the data), the curve was scaling before it (``b > 0``) and the slope after it is
  lower. The interior step whose hinge fits best is kept beside it (``step``). The fits
  weight each replicate mean by 1 / (its step's mean)^2, since a throughput's noise grows
  with its level. A plateau that turns into a decline (memory overcommitment of a fixed set of
  guests) has its knee where the decline begins.
- **Response-time rise** (:func:`response_rise`): each later step's replicate mean response
  times against the first step's, on the log scale, by a one-sided paired t test over the
  rounds (Welch's t where the rounds do not pair), Holm-adjusted over the steps
  (``stats.significance.adjust``), plus a minimum relative rise so a trivial but significant
  shift is not called a rise.
- **SLO** (:func:`slo_check`): the p95 response time of each step against a limit (study E
  required 2 s); the highest ratio up to which every step met it.
- **Why flat** (:func:`classify_flat`): after the knee, host CPU utilisation (1.0 = all CPUs
  busy) at or above the threshold ``SATURATED_AT`` (0.95) means "saturated"; below it the
  curve is "flat with idle CPU" (study B: Xen flattened at 1.5:1 with its CPUs near 92%,
  z/VM at 100%).

The least-squares fits are batched numpy normal equations (one per breakpoint scanned, for
many response vectors at once), hand-written because statsmodels fits one vector at a time
and the coverage simulations in the tests fit thousands; ``tests/test_knee.py`` checks them
against statsmodels' WLS.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
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
    """Where throughput stops scaling, with its 95% interval (None without replicates)."""

    #: The least-squares breakpoint; None when it is the second or last-but-one step (a bend
    #: beyond it fits as well there: its place is not known).
    ratio: float | None
    low: float | None
    high: float | None
    slope_before: float
    slope_after: float
    #: Throughput at the knee (the fitted level ``h``).
    level: float
    #: F test of the hinge against one straight line (approximate: ``k`` is estimated).
    p_value: float
    #: The interior step whose hinge fits best: the knee as a step.
    step: float = math.nan
    #: ``low`` / ``high``: the bend is in the first / last step interval (``ratio`` is None).
    edge: str | None = None

    def as_dict(self) -> dict[str, float | str | None]:
        """The knee as ``{ratio, low, high, step, edge}`` (the JSON of ``vmtax sweep show``)."""
        return {
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "step": self.step,
            "edge": self.edge,
        }


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
    #: Per step (after the first): ratio, relative rise, Holm-adjusted p-value (NaN: no test).
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


def replicate_interval(
    values: np.ndarray, *, confidence: float = CONFIDENCE, axis: int = -1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and Student's t interval of replicate means along ``axis`` (NaN ends with fewer
    than 2 replicates). Vectorised, so the coverage tests call this very function."""
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[axis]
    mean = x.mean(axis=axis)
    if n < 2:
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * stats.sem(x, axis=axis)
    return mean, mean - half, mean + half


def _blocks(blocks: np.ndarray | None, n: int) -> np.ndarray:
    """Round indicator columns (the first round is the reference level)."""
    if blocks is None:
        return np.empty((n, 0))
    levels = np.unique(blocks)
    return np.column_stack([blocks == b for b in levels[1:]]).astype(np.float64).reshape(n, -1)


def _hinge_design(x: np.ndarray, k: float, extra: np.ndarray) -> np.ndarray:
    d = x - k
    return np.column_stack([np.ones_like(x), np.minimum(d, 0.0), np.maximum(d, 0.0), extra])


def _fit(
    design: np.ndarray, y: np.ndarray, sw: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Least squares of every ``y`` (last axis = observations) on ``design``, weighted by
    ``sw`` squared if given (one row of weights per ``y``): coefficients, residual sum of
    squares and residual degrees of freedom."""
    df = design.shape[0] - int(np.linalg.matrix_rank(design))
    if sw is None:
        beta = y @ np.linalg.pinv(design).T
        resid = y - beta @ design.T
    else:
        dw = design * sw[..., None]  # (..., n, p)
        yw = y * sw
        beta = np.einsum("...pn,...n->...p", np.linalg.pinv(dw), yw)
        resid = yw - np.einsum("...np,...p->...n", dw, beta)
    return beta, np.sum(resid * resid, axis=-1), df


def _relative_weights(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Square roots of weights 1 / (step mean)^2: a throughput's noise grows with its level
    (a step of more guests sums more of them), so least squares on relative errors. None
    when a step mean is not positive."""
    steps = np.unique(x)
    means = np.stack([y[..., x == s].mean(axis=-1) for s in steps], axis=-1)
    if not np.all(means > 0):
        return None
    return 1.0 / means[..., np.searchsorted(steps, x)]


#: Breakpoints scanned per step interval for the knee's set (its ends are widened to the next
#: point scanned, so the set printed holds the exact one).
SCAN = 20


@dataclass(frozen=True)
class KneeFits:
    """Batched breakpoint fits (leading axes = response vectors); see the module docstring."""

    #: The breakpoints scanned: the identifiable range (second step to last-but-one), SCAN
    #: points per step interval.
    grid: np.ndarray
    #: Per breakpoint scanned: the likelihood-ratio test's p-value that the bend is there.
    p: np.ndarray
    #: The least-squares breakpoint (continuous) and its hinge's residual sum of squares.
    estimate: np.ndarray
    sse_hinge: np.ndarray
    sse_line: np.ndarray
    df_hinge: int  # residual df of the hinge, counting k as a parameter
    df_test: int  # residual df of the step-means model the tests use (0: no interval)
    #: The 95% interval (NaN when no breakpoint is kept or there is no df): the hull of the
    #: kept breakpoints, reaching the first (last) step when the second (last-but-one) is kept.
    low: np.ndarray
    high: np.ndarray
    #: The interior step whose hinge fits best (a bend placed at a step).
    step: np.ndarray
    #: -1: the estimate is the second step (the bend may be anywhere below it), +1: the
    #: last-but-one step, 0: inside; in the first two cases the place of the bend is not known.
    edge: np.ndarray


def _wls(design: np.ndarray, y: np.ndarray, sw: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of every ``y`` on one design (weights ``sw`` squared), batched
    over leading axes by the normal equations: coefficients and residual sum of squares."""
    w = np.ones_like(y) if sw is None else sw
    dw = design * w[..., None]
    dt = np.swapaxes(dw, -1, -2)
    yw = (y * w)[..., None]
    try:
        beta = np.linalg.solve(dt @ dw, dt @ yw)
    except np.linalg.LinAlgError:  # a rank-deficient design (steps with missing rounds)
        beta = np.linalg.pinv(dw) @ yw
    resid = (yw - dw @ beta)[..., 0]
    return beta[..., 0], np.sum(resid * resid, axis=-1)


def fit_knees(
    x: np.ndarray,
    y: np.ndarray,
    blocks: np.ndarray | None = None,
    *,
    confidence: float = CONFIDENCE,
    relative: bool = True,
) -> KneeFits:
    """The knee's estimate and 95% interval for every response vector in ``y`` (last axis =
    observations at the ratios ``x``), with the rounds ``blocks`` as fixed effects (see the
    module's docstring)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    steps = np.unique(x)
    extra = _blocks(blocks, x.size)
    sw = _relative_weights(x, y) if relative else None
    lead = y.shape[:-1]
    splits = range(1, steps.size - 2)
    grid = np.unique(
        np.concatenate([np.linspace(steps[j], steps[j + 1], SCAN + 1) for j in splits])
    )
    sse = np.stack([_wls(_hinge_design(x, float(k), extra), y, sw)[1] for k in grid], axis=-1)
    # Between two steps the least-squares breakpoint is where the line through the steps on
    # the left crosses the line through those on the right, when it crosses there.
    cross, cross_sse = [], []
    for j in splits:
        left = (x <= steps[j]).astype(np.float64)
        two = np.column_stack([left, left * x, 1 - left, (1 - left) * x, extra])
        beta, sse_two = _wls(two, y, sw)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = (beta[..., 2] - beta[..., 0]) / (beta[..., 1] - beta[..., 3])
        inside = (k > steps[j]) & (k < steps[j + 1])
        cross.append(np.where(inside, k, steps[j]))
        cross_sse.append(np.where(inside, sse_two, np.inf))
    where = np.concatenate([np.broadcast_to(grid, sse.shape), np.stack(cross, axis=-1)], axis=-1)
    best = np.argmin(np.concatenate([sse, np.stack(cross_sse, axis=-1)], axis=-1), axis=-1)
    estimate = np.take_along_axis(where, best[..., None], axis=-1)[..., 0]
    interior = steps[1:-1]
    at_steps = sse[..., np.searchsorted(grid, interior)]
    step = interior[np.argmin(at_steps, axis=-1)]
    _, sse_line = _wls(np.column_stack([np.ones_like(x), x, extra]), y, sw)
    # The profile likelihood-ratio test of each breakpoint: how much worse its hinge fits
    # than the best one, over the residual variance of one mean per step (and the rounds).
    step_means = np.column_stack([(x == s).astype(np.float64) for s in steps] + [extra])
    _, sse_sat = _wls(step_means, y, sw)
    df_sat = x.size - int(np.linalg.matrix_rank(step_means))
    sse_best = np.min(np.concatenate([sse, np.stack(cross_sse, axis=-1)], axis=-1), axis=-1)
    tol = 1e-9 * max(1.0, float(np.abs(steps).max()))
    edge = np.where(estimate <= steps[1] + tol, -1, np.where(estimate >= steps[-2] - tol, 1, 0))
    if df_sat > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            f = (sse - sse_best[..., None]) / (sse_sat[..., None] / df_sat)
        p = stats.f.sf(np.maximum(f, 0.0), 1, df_sat)
        p = np.where(np.isfinite(p), p, 1.0 * (sse <= sse_best[..., None]))
        # At an end of the range the breakpoint sits on the boundary of its parameter space:
        # the statistic is 0 half the time and F(1, df) otherwise (Self and Liang 1987).
        ends = np.isin(grid, steps[[1, -2]])
        p = np.where(ends & (f > 0), p / 2, p)
        low, high = _hull(grid, p, 1 - confidence, steps, estimate)
    else:
        p = np.full(sse.shape, np.nan)
        low = high = np.full(lead, np.nan)
    return KneeFits(
        grid=grid,
        p=p,
        estimate=estimate,
        sse_hinge=sse_best,
        sse_line=sse_line,
        df_hinge=x.size - 4 - extra.shape[1],
        df_test=df_sat,
        low=low,
        high=high,
        step=step,
        edge=edge,
    )


def _hull(
    points: np.ndarray, p: np.ndarray, alpha: float, steps: np.ndarray, estimate: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The interval printed: from the lowest to the highest breakpoint kept (p > alpha), each
    end moved to where p, interpolated linearly between the points scanned, crosses alpha;
    and to the first (last) step when the second (last-but-one) is kept: one step on a side
    cannot place a bend there, so a bend below the second step fits exactly as one at it."""
    n = points.size
    kept = p > alpha
    any_kept = kept.any(axis=-1)
    first = np.argmax(kept, axis=-1)
    last = n - 1 - np.argmax(kept[..., ::-1], axis=-1)

    def crossing(inside: np.ndarray, outside: np.ndarray) -> np.ndarray:
        pi = np.take_along_axis(p, inside[..., None], axis=-1)[..., 0]
        po = np.take_along_axis(p, outside[..., None], axis=-1)[..., 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.clip(np.nan_to_num((pi - alpha) / (pi - po)), 0.0, 1.0)
        return points[inside] + t * (points[outside] - points[inside])

    low = np.minimum(crossing(first, np.maximum(first - 1, 0)), estimate)
    high = np.maximum(crossing(last, np.minimum(last + 1, n - 1)), estimate)
    low = np.where(kept[..., 0], steps[0], low)
    high = np.where(kept[..., -1], steps[-1], high)
    return np.where(any_kept, low, np.nan), np.where(any_kept, high, np.nan)


def find_knee(
    ratios: Sequence[float],
    samples: Sequence[Sequence[float]],
    *,
    blocks: Sequence[Sequence[int]] | None = None,
    confidence: float = CONFIDENCE,
    alpha: float = ALPHA,
) -> KneeFit:
    """The knee of a throughput curve: where a hinge fits and the slope drops after it.

    ``samples[i]`` holds the replicate means of the step at ``ratios[i]`` and ``blocks[i]``
    (optional) the round of each. With one replicate per step there is a point but no
    interval. Needs at least 4 steps: a hinge has 4 parameters.
    """
    if len(ratios) == 0:  # a sweep interrupted before its first step was stored
        return KneeFit(None, "too-few", "0 distinct steps with data; a knee needs 4")
    order = np.argsort(np.asarray(ratios, dtype=np.float64), kind="stable")
    xs, ys, bs = [], [], []
    for i in order:
        y = np.asarray(samples[i], dtype=np.float64)
        rounds = np.zeros(y.size, dtype=int) if blocks is None else np.asarray(blocks[i], dtype=int)
        keep = np.isfinite(y)
        xs.append(np.full(int(keep.sum()), float(ratios[i])))
        ys.append(y[keep])
        bs.append(rounds[keep])
    x, y, block = np.concatenate(xs), np.concatenate(ys), np.concatenate(bs)
    steps = np.unique(x)
    present = [float(ratios[i]) for i in order if np.isfinite(np.asarray(samples[i])).any()]
    if steps.size < 4 or steps.size != len(present):
        return KneeFit(None, "too-few", f"{steps.size} distinct steps with data; a knee needs 4")
    extra_blocks = block if np.unique(block).size > 1 else None
    fits = fit_knees(x, y, extra_blocks, confidence=confidence)
    k = float(fits.estimate)
    sw = _relative_weights(x, y)
    beta, sse_hinge, _ = _fit(_hinge_design(x, k, _blocks(extra_blocks, x.size)), y, sw)
    h, b, c = (float(v) for v in beta[:3])
    sse_line, df = float(fits.sse_line), fits.df_hinge
    if df <= 0:
        p_value = math.nan
    elif sse_hinge <= 0:
        p_value = 0.0 if sse_line > 0 else 1.0
    else:
        f = ((sse_line - float(sse_hinge)) / 2) / (float(sse_hinge) / df)
        p_value = float(stats.f.sf(f, 2, df))
    scale = float(np.mean(np.abs(y))) or 1.0
    scaled = b > 0 and b * (k - steps[0]) >= 0.02 * scale
    significant = (p_value < alpha if math.isfinite(p_value) else b - c > 0) and c < b
    # A plateau that turns into a decline (memory overcommitment with a fixed number of
    # guests) is a knee too: where throughput stops holding.
    plateau = abs(b) * (k - steps[0]) < 0.02 * scale and c < 0
    if not significant or not (scaled or plateau):
        if not scaled:
            return KneeFit(None, "flat", "throughput did not scale from the first step")
        return KneeFit(
            None, "scales", f"one line fits as well as a knee (F test p = {p_value:.3g})"
        )
    replicated = bool(np.bincount(np.searchsorted(steps, x)).max() >= 2)
    low: float | None = float(fits.low) if replicated else None
    high: float | None = float(fits.high) if replicated else None
    if low is not None and not math.isfinite(low):
        low = high = None
        why = "; no breakpoint passes the test: the curve is not one bend"
    elif low is None:
        why = "; one replicate per step, so no interval"
    else:
        why = ""
    edge = int(fits.edge)
    step = float(fits.step)
    if edge:
        side = "first" if edge < 0 else "last"
        where = f"at or below {steps[1]:g}" if edge < 0 else f"at or above {steps[-2]:g}"
        knee = Knee(None, low, high, b, c, h, p_value, step, "low" if edge < 0 else "high")
        return KneeFit(
            knee,
            "edge",
            f"the bend is {where}:1, in the {side} step interval, where one step on a side "
            f"cannot place it{why}",
        )
    knee = Knee(k, low, high, b, c, h, p_value, step)
    return KneeFit(knee, "knee", f"slope {b:.4g} -> {c:.4g} per unit of ratio at {k:.3g}{why}")


def rise_tests(
    first: np.ndarray, later: np.ndarray, *, paired: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One-sided tests that a later step's log response time exceeds the first step's.

    ``first`` and ``later`` hold positive replicate means on their last axis (any leading
    batch axes). ``paired``: the i-th replicates of both steps ran in the same round, so the
    test is Student's paired t over the rounds (the round's drift and boots cancel, and the
    steps may differ in variance); otherwise Welch's t. Returns the relative rise of the
    geometric mean and the raw one-sided p-value (NaN with too few replicates)."""
    a, b = np.log(first), np.log(later)
    rise = np.expm1(b.mean(axis=-1) - a.mean(axis=-1))
    if min(a.shape[-1], b.shape[-1]) < 2:
        return rise, np.full(rise.shape, np.nan)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # Identical replicates give a zero variance: scipy warns and returns NaN.
        warnings.simplefilter("ignore")
        if paired:
            p = stats.ttest_rel(b, a, axis=-1, alternative="greater").pvalue
        else:
            p = stats.ttest_ind(b, a, axis=-1, equal_var=False, alternative="greater").pvalue
    return rise, np.where(np.isnan(p), np.where(rise > 0, 0.0, 1.0), p)


def response_rise(
    ratios: Sequence[float],
    samples: Sequence[Sequence[float]],
    *,
    blocks: Sequence[Sequence[int]] | None = None,
    alpha: float = ALPHA,
    min_rise: float = MIN_RISE,
) -> Rise:
    """The first step whose response time is significantly above the first step's.

    ``samples[i]`` are the replicate mean response times of the step at ``ratios[i]`` and
    ``blocks[i]`` their rounds. A one-sided t test per later step against the first (see
    :func:`rise_tests`; paired by round where both steps have at least 2 rounds in common),
    Holm-adjusted over the later steps, and a rise by at least ``min_rise``."""
    order = np.argsort(np.asarray(ratios, dtype=np.float64), kind="stable")
    groups = []
    for i in order:
        y = np.asarray(samples[i], dtype=np.float64)
        b = np.arange(y.size) if blocks is None else np.asarray(blocks[i], dtype=int)
        keep = np.isfinite(y) & (y > 0)
        groups.append((float(ratios[i]), dict(zip(b[keep].tolist(), y[keep], strict=True))))
    if len(groups) < 2 or not groups[0][1]:
        return Rise(None, ())
    base = groups[0][1]
    raw, rises = [], []
    for _, g in groups[1:]:
        common = sorted(set(base) & set(g))
        paired = blocks is not None and len(common) >= 2
        a = np.asarray([base[k] for k in common] if paired else list(base.values()))
        b = np.asarray([g[k] for k in common] if paired else list(g.values()))
        if b.size == 0:
            raw.append(math.nan)
            rises.append(math.nan)
            continue
        rel, p = rise_tests(a, b, paired=paired)
        raw.append(float(p))
        rises.append(float(rel))
    adjusted = adjust(np.asarray(raw), "holm")
    rows = tuple(
        (r, float(rel), float(p))
        for (r, _), rel, p in zip(groups[1:], rises, adjusted, strict=True)
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
    the knee. The steps counted begin at the first step at or past the knee (the second step
    for a bend in the first step interval, the last for one in the last)."""
    if knee is None:
        return None
    pairs = sorted(zip((float(r) for r in ratios), utilisation, strict=True), key=lambda p: p[0])
    steps = np.asarray([r for r, _ in pairs])
    if knee.ratio is None:  # a bend in the first step interval, or in the last
        start = knee.step if knee.edge == "low" else float(steps[-1])
    else:
        past = steps[steps >= knee.ratio - 1e-9 * max(1.0, abs(knee.ratio))]
        start = float(past[0]) if past.size else float(steps[-1])
    chosen = [(r, np.asarray(u, dtype=np.float64)) for r, u in pairs if r >= start]
    values = np.concatenate([u[np.isfinite(u)] for _, u in chosen]) if chosen else np.empty(0)
    if values.size == 0:
        return None

    mean, _, _, low, high = mean_interval(pd.Series(values))
    if not math.isfinite(low):
        low = high = mean
    kind = "saturated" if mean >= saturated_at else "idle-cpu"
    return Flat(kind, float(mean), float(low), float(high), tuple(r for r, _ in chosen))
