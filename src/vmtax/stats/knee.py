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
  ``y = h + b*min(x-k, 0) + c*max(x-k, 0)`` (plus the rounds) fitted by least squares to the
  replicate means, with the breakpoint ``k`` at one of the interior steps (a sweep measures
  nothing between its steps; study B states its knees as steps too). The 95% interval is the
  set of interior steps k whose hinge fits not significantly worse than the best one:
  ``(SSE(k) - SSE(best)) / (steps - 3) / s^2 <= F(0.95; steps - 3, df)``, with ``s^2`` and
  ``df`` from the step-means model (one mean per step, plus the rounds). The hinge at the true
  knee is nested in that model with ``steps - 3`` fewer parameters and SSE(best) >= SSE(step
  means), so the set holds the exact lack-of-fit confidence set and covers the true knee with
  probability at least 0.95 under normal replicate means (a grid inversion as Lerman 1980's,
  made conservative by the step-means variance). The interval printed is the set's lowest
  and highest step. A knee is reported only if the hinge explains the data significantly
  better than one straight line (an F test; approximate, since ``k`` is chosen from the
  data), the curve was scaling before it (``b > 0``) and the slope after it is lower.
  The fits weight each replicate mean by 1 / (its step's mean)^2, since a throughput's noise
  grows with its level. A plateau that turns into a decline (memory overcommitment of a
  fixed set of guests) has its knee where the decline begins.
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

The least-squares fits are batched numpy projections (one pseudo-inverse per design applied
to many response vectors at once), hand-written because statsmodels fits one vector at a time
and the coverage simulations in the tests fit thousands; ``tests/test_knee.py`` checks them
against statsmodels' OLS.
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

    ratio: float
    low: float | None
    high: float | None
    slope_before: float
    slope_after: float
    #: Throughput at the knee (the fitted level ``h``).
    level: float
    #: F test of the hinge against one straight line (approximate: ``k`` is estimated).
    p_value: float
    #: The interior steps in the 95% confidence set (empty without replicates).
    candidates: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, float | None]:
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


@dataclass(frozen=True)
class KneeFits:
    """Batched hinge fits (leading axes = response vectors)."""

    candidates: np.ndarray  # the interior steps
    best: np.ndarray  # index of the best breakpoint
    beta: np.ndarray  # (h, b, c) at the best breakpoint
    sse_hinge: np.ndarray
    sse_line: np.ndarray
    df_hinge: int  # residual df of the hinge, counting k as a parameter
    #: Per candidate: whether the 95% set keeps it (all False when there is no residual df).
    in_set: np.ndarray
    #: Lack-of-fit p-value of each candidate's hinge against the step-means model.
    set_p: np.ndarray


def fit_knees(
    x: np.ndarray,
    y: np.ndarray,
    blocks: np.ndarray | None = None,
    *,
    confidence: float = CONFIDENCE,
    relative: bool = True,
) -> KneeFits:
    """Hinge fits at every interior step of ``x`` for every response vector in ``y``, with
    the knee's confidence set (see the module's docstring)."""
    x = np.asarray(x, dtype=np.float64)
    steps = np.unique(x)
    candidates = steps[1:-1]
    extra = _blocks(blocks, x.size)
    sw = _relative_weights(x, y) if relative else None
    sses, betas = [], []
    for k in candidates:
        beta, sse, _ = _fit(_hinge_design(x, float(k), extra), y, sw)
        sses.append(sse)
        betas.append(beta[..., :3])
    sse = np.stack(sses, axis=-1)  # (..., K)
    best = np.argmin(sse, axis=-1)
    beta = np.take_along_axis(np.stack(betas, axis=-2), best[..., None, None], axis=-2)[..., 0, :]
    _, sse_line, _ = _fit(np.column_stack([np.ones_like(x), x, extra]), y, sw)
    step_means = np.column_stack([(x == s).astype(np.float64) for s in steps] + [extra])
    _, sse_sat, df_sat = _fit(step_means, y, sw)
    lack_df = steps.size - 3
    if df_sat > 0 and lack_df > 0:
        # Against the best hinge rather than the step-means model: SSE(best) >= SSE(steps),
        # so the set holds the exact lack-of-fit set (coverage >= 0.95 when a hinge is the
        # truth) and is never empty when the curve is not exactly a hinge.
        best_sse = sse.min(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = ((sse - best_sse) / lack_df) / (sse_sat[..., None] / df_sat)
        set_p = stats.f.sf(np.maximum(f, 0.0), lack_df, df_sat)
        set_p = np.where(np.isfinite(set_p), set_p, (sse - best_sse <= 0) * 1.0)
        in_set = set_p > 1 - confidence
    else:
        set_p = np.full(sse.shape, np.nan)
        in_set = np.zeros(sse.shape, dtype=bool)
    return KneeFits(
        candidates=candidates,
        best=best,
        beta=beta,
        sse_hinge=np.take_along_axis(sse, best[..., None], axis=-1)[..., 0],
        sse_line=sse_line,
        df_hinge=x.size - 4 - extra.shape[1],
        in_set=in_set,
        set_p=set_p,
    )


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
    fits = fit_knees(x, y, block if np.unique(block).size > 1 else None, confidence=confidence)
    k = float(fits.candidates[int(fits.best)])
    h, b, c = (float(v) for v in fits.beta)
    sse_hinge, sse_line, df = float(fits.sse_hinge), float(fits.sse_line), fits.df_hinge
    if df <= 0:
        p_value = math.nan
    elif sse_hinge <= 0:
        p_value = 0.0 if sse_line > 0 else 1.0
    else:
        f = ((sse_line - sse_hinge) / 2) / (sse_hinge / df)
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
    kept = tuple(float(v) for v in fits.candidates[np.asarray(fits.in_set)])
    replicated = bool(np.isfinite(fits.set_p).all())
    low: float | None
    high: float | None
    if replicated:
        low, high, why = min(kept + (k,)), max(kept + (k,)), ""
    else:
        low = high = None
        why = "; one replicate per step, so no interval"
    knee = Knee(k, low, high, b, c, h, p_value, kept)
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

    mean, _, _, low, high = mean_interval(pd.Series(values))
    if not math.isfinite(low):
        low = high = mean
    kind = "saturated" if mean >= saturated_at else "idle-cpu"
    return Flat(kind, float(mean), float(low), float(high), tuple(r for r, _ in chosen))
