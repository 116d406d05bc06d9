"""Timing artifacts in raw samples (a runs x iterations matrix), after study D.

- **Outliers**: Tukey fences per run (below Q1 - 1.5 IQR or above Q3 + 1.5 IQR of that run).
  They are counted and located, never dropped. The slow ones form the *spike indicator*
  ``S[r, i]`` that the next three detectors read.
- **Periodic spikes** ("horizontal lines"): the mean over runs of the autocorrelation of each
  run's spike onsets (the spike indicator with each burst of consecutive slow iterations kept
  as its first one). A spike train with period k has its first strong autocorrelation peak
  at lag k (its periodogram has equal peaks at every harmonic, which is why the lag domain is
  used to name the period). The p-value is a permutation test: the indicator is shuffled
  within each run, which keeps the spike rate and destroys any order (the search and its test
  read at most the first ``PERIODIC_MAX_ITERATIONS`` of each run; it stops early, with Besag
  and Clifford's sequential p-value, once ``SEQUENTIAL_EXCEED`` shuffles are as extreme as the
  data, which leaves every verdict as the full test's). A shuffle's autocorrelation is
  counted from its pairs of onsets when the runs hold few (k onsets cost about k² pairs
  where an FFT costs n log n; a bound from one count of every run's pairs first sets aside
  the shuffles that cannot reach the data), and by FFT otherwise: the same shuffles and the
  same p-value either way. A period far beyond what shuffles reach is decided without any:
  when a tail bound of the statistic under the shuffles (``_period_tail_bound``: the pair
  bound below, a Chernoff bound per lag, a union over the lags) is at most TAIL_BOUND_P,
  that is its p-value. The iteration indices
  slow in (almost) every run are those whose spike count across runs is improbable under the
  overall spike rate (binomial test, Bonferroni over the indices).
- **Cross-run memory** ("diagonal spikes"): for each pair of consecutive runs, the circular
  correlation of their spike indicators at every lag; averaged over the pairs. A consistent
  peak at lag d means spike positions are remembered from run to run and move by d per run
  (d = 0: the same indices every run). The p-value shifts each run by an independent random
  circular offset, which keeps every run's own pattern (periodic or not) but breaks the
  alignment between runs (it reads the same first iterations as the period test, and stops
  as it does). A resample whose bound (each pair's largest correlation in each block of
  lags, averaged) cannot reach the data's statistic is not added up lag by lag: the same
  p-value for a fraction of the work when the data's correlation is far out.
- **Warm-up**: each run's first iterations against its steady state (the second half).
  The unit is the run: one difference per run (the median of its first window minus the
  median of its steady state), tested one-sided by flipping their signs (an exact
  permutation test over all 2^runs sign patterns, as ``scipy.stats.permutation_test``'s).
  Runs are independent and, with no warm-up, each difference is as likely negative as
  positive however autocorrelated the iterations inside a run are, so the test holds its
  level at any number of runs (2 and more); its smallest p-value is 2^-runs, which it
  reports (``min_p``). Iterations are never
  the unit: a test over them (Mann-Whitney, used below 6 runs before) counts autocorrelated
  iterations as independent. The test decides, and ``n_slow`` says how long the slow start
  is: the leading stretch whose across-run median exceeds the steady state's noise, or the
  tested window when the test finds a slow start that no single iteration shows above the
  noise.
- **Shape vs baseline**: the two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``)
  on the pooled samples after removing each side's location and scale
  (median and IQR), so it answers "did the shape change", not "did it shift". With thousands
  of samples KS finds differences too small to matter, so "changed" also needs the
  standardised ECDFs to differ by at least 0.1 somewhere (or the modality to differ); a
  rejection with a smaller distance is "detected but small" (``small``), not a change.
  Modality is an mvalue (Brendan Gregg's measure, used by BenchmarkDotNet): the total
  variation of the density divided by its maximum; about 2 for one mode, about 4 for two.
  The density is a Gaussian KDE on a grid over the central 99% of the data, which keeps
  the measure from counting histogram noise as modes (its bandwidth is at least the timer's
  quantum, so quantised values are not read as modes). mvalue >= 3.2 (BenchmarkDotNet's
  threshold) is "bimodal".

**One family per command.** A report of two levels runs about a hundred of these tests, so
a test at ALPHA each would make about one false finding per report. Every command (vmtax
artifacts, the report) adjusts all its tests' p-values together with Holm's step-down
method (``stats.significance.adjust``, checked against statsmodels' ``multipletests``),
which holds the family-wise error rate at ALPHA = 1%: the chance of any false finding in the
whole command is at most 1%. It decides each finding on its adjusted p-value; the
permutation tests get enough resamples (``family_resamples``) for their smallest p-value to
clear the family's smallest threshold. The shape test's p-value is
KS's (the Anderson-Darling statistic is kept as evidence): a permutation p-value could not
get small enough for a family of a hundred at a cost a report can pay. A test that finds
nothing is worded "not detected (p = …)", never as absence.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import fft as sfft
from scipy import ndimage

from vmtax.stats import dist
from vmtax.stats.significance import adjust

#: The family-wise error rate of a command's or report's artifact findings (Holm across all of
#: its tests): the chance of any false finding in one command or report is at most 1%.
ALPHA = 0.01
# A period needs a quarter of the spike onsets to recur at it. Slow stretches (a busy host's
# clustering) give significant autocorrelations of a few hundredths at short lags, which are
# not a period; a busy host's random spikes can outnumber a real period's (seen on a buffered
# write: 10% random spikes beside a flush every 16 writes, 0.36 at lag 16), which still is one.
MIN_ACF = 0.25
MVALUE_BIMODAL = 3.2
MIN_SHAPE_DISTANCE = 0.1  # with thousands of samples AD flags tiny differences: need a visible one
SHAPE_MAX_SAMPLES = 2000  # per side, for the AD permutation test and the KDE
MAX_REPORTED_INDICES = 200
#: Per run, for the period search and the cross-run test (see periodic()): periods up to 4,096
#: iterations, each seen four times. A period that is real in a family of 100 tests needs
#: 20,000 shuffles to clear Holm's smallest threshold; at 65,536 iterations two runs' shuffles
#: took 95 s of a 2-core VM for one report (a quarter of that here).
PERIODIC_MAX_ITERATIONS = 16_384
TIE = 1e-9  # correlations this close to the observed one count as ties (as large)
#: The period test's shuffles are correlated in single precision (half the FFT time of double,
#: and most of a large report's time): their rounding, about 1e-7 on a normalised correlation
#: of 16,384 iterations (tests/test_artifacts.py), is covered by counting this close as a tie.
TIE_SINGLE = 1e-5
#: The period test reads a shuffle's autocorrelation from its pairs of onsets rather than an
#: FFT when its runs hold few onsets: when PAIR_COST x (pairs within the largest lag) is below
#: runs x L log2 L, L the FFT's length (the two costs' ratio, measured on 7 runs of 8,192
#: iterations, the worked example's period).
PAIR_COST = 35
PAIR_BATCH = 32  # shuffles per call of the pair count, at least: fewer cost more in calls
CROSS_BLOCK = 64  # lags a block of the cross-run test's bound (see cross_run)
SEQUENTIAL_EXCEED = 10  # the period test stops after this many shuffles as extreme as the data
#: A period test of a known family whose tail bound (``_period_tail_bound``) is at most this
#: is decided without shuffles, with this p-value; the family's other period tests add it to
#: theirs (a union bound, as the early look's): under a ten-millionth of the smallest p the
#: shuffles give (2.5e-5), so no printed p moves. A clear period paid its family's early look
#: in shuffles, 2-3 CPU-s each in the report of a store with three.
TAIL_BOUND_P = 1e-12
EARLY_LOOK_MARGIN = 2  # a test nothing matched stops at a p this many times below the threshold


@dataclass
class Periodic:
    found: bool
    period: int | None
    acf: float | None  # mean autocorrelation of the spike indicator at the period
    p_value: float | None
    indices: list[int] = field(default_factory=list)  # iteration indices slow in every run
    spike_rate: float = 0.0
    p_adjusted: float | None = None  # across the family of one command (see control_family)
    candidate: int | None = None  # the lag a period would be at, before the test
    #: p_value is TAIL_BOUND_P, an upper bound from the tail bound: no shuffle was drawn
    bounded: bool = False

    def decide(self) -> None:
        self.found = self.candidate is not None and _significant(self.p_adjusted)
        self.period = self.candidate if self.found else None


@dataclass
class CrossRun:
    found: bool
    correlation: float | None  # mean correlation of consecutive runs' spikes at the best lag
    drift: int | None  # the best lag: how far spike positions move from one run to the next
    p_value: float | None
    pairs: int = 0
    p_adjusted: float | None = None

    def decide(self) -> None:
        self.found = self.correlation is not None and _significant(self.p_adjusted)


@dataclass
class Warmup:
    found: bool
    n_slow: int
    slowdown: float | None  # first-window mean / steady mean
    p_value: float | None
    p_adjusted: float | None = None
    window: int = 0  # the first iterations the test compares with the steady state
    stretch: int = 0  # the leading stretch above the steady state's noise (may be 0)
    runs: int = 0
    min_p: float | None = None  # the smallest p-value the sign-flip test can give: 2^-runs

    def decide(self) -> None:
        # The test decides; the stretch only says how long the slow start is. A significant
        # test with no stretch above the noise is still a slow start, of the tested window.
        self.found = _significant(self.p_adjusted)
        self.n_slow = max(self.stretch, self.window) if self.found else 0


@dataclass
class Shape:
    ad_stat: float | None
    p_value: float | None
    changed: bool
    mvalue: float
    modality: str
    mvalue_baseline: float | None = None
    modality_baseline: str | None = None
    distance: float | None = None  # largest gap between the standardised ECDFs (KS statistic)
    p_adjusted: float | None = None

    small: bool = False  # KS rejects, but the distance is under MIN_SHAPE_DISTANCE

    def decide(self) -> None:
        visible = (self.distance or 0.0) >= MIN_SHAPE_DISTANCE or (
            self.modality_baseline is not None and self.modality != self.modality_baseline
        )
        rejected = self.p_value is not None and _significant(self.p_adjusted)
        self.changed = rejected and visible
        self.small = rejected and not visible


@dataclass
class Outliers:
    count: int
    fraction: float
    high: int
    low: int
    indices: list[tuple[int, int]] = field(default_factory=list)  # (run, iteration), capped


@dataclass
class Artifacts:
    runs: int
    iterations: int
    periodic: Periodic
    cross_run: CrossRun
    warmup: Warmup
    shape: Shape
    outliers: Outliers

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN becomes None, numpy scalars become Python numbers."""
        return _clean(asdict(self))

    def found(self) -> list[str]:
        """Names of the artifacts with evidence, in report order."""
        names = []
        if self.periodic.found:
            names.append("periodic")
        if self.cross_run.found:
            names.append("cross_run")
        if self.warmup.found:
            names.append("warmup")
        if self.shape.changed:
            names.append("shape")
        if self.shape.modality == "bimodal":
            names.append("bimodal")
        return names


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def as_matrix(runs: list[np.ndarray]) -> np.ndarray:
    """Stack runs of possibly different lengths, cut to the shortest (iteration i aligned)."""
    runs = [np.asarray(r, dtype=np.float64) for r in runs if np.size(r)]
    if not runs:
        return np.empty((0, 0))
    n = min(r.size for r in runs)
    return np.vstack([r[:n] for r in runs])


def resolution(matrix: np.ndarray) -> np.ndarray:
    """Per run (last axis), the smallest positive gap between distinct values: the timer's
    quantum (0 when all values are equal)."""
    return _resolution_of_sorted(np.sort(np.asarray(matrix, dtype=np.float64), axis=-1))


def _resolution_of_sorted(ordered: np.ndarray) -> np.ndarray:
    gaps = np.diff(ordered, axis=-1)
    gaps = np.where(gaps > 0, gaps, np.inf)  # NaN (sorted last) and ties are no gap
    out = gaps.min(axis=-1) if gaps.shape[-1] else np.full(gaps.shape[:-1], np.inf)
    return np.where(np.isfinite(out), out, 0.0)


def tukey(
    matrix: np.ndarray, k: float = 1.5, *, quartiles: tuple[np.ndarray, ...] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-run Tukey fences: boolean matrices (slow, fast) of the values beyond them.

    The IQR is floored at the timer's quantum: with coarse clocks most values are equal, the
    IQR is 0, and every tick above the mode would otherwise count as an outlier.
    ``quartiles``: what :func:`run_quartiles` gave for this matrix, to reuse it across k.
    """
    q1, q3, iqr = quartiles if quartiles is not None else run_quartiles(matrix)
    return matrix > q3 + k * iqr, matrix < q1 - k * iqr


def run_quartiles(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each run's Q1, Q3 and IQR (floored at the quantum), as (runs, 1) columns.

    The quartiles are ``np.percentile``'s (its default, linear method), to the bit, read from
    the one sort the quantum needs anyway: percentile's own selection took twice the sort's
    time, and the two were a quarter of a report's artifact checks."""
    ordered = np.sort(np.asarray(matrix, dtype=np.float64), axis=1)
    runs, n = ordered.shape
    if n == 0:
        q1 = q3 = np.full((runs, 1), np.nan)
    else:
        q1, q3 = (_sorted_percentile(ordered, q) for q in (0.25, 0.75))
    return q1, q3, np.maximum(q3 - q1, _resolution_of_sorted(ordered)[:, None])


def _sorted_percentile(ordered: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile of each row of sorted ``ordered``, as ``np.percentile`` interpolates it
    (its lerp, two formulas either side of one half); NaN where a row holds one."""
    at = q * (ordered.shape[1] - 1)
    below = math.floor(at)
    above = min(below + 1, ordered.shape[1] - 1)
    t = at - below
    a, b = ordered[:, below : below + 1], ordered[:, above : above + 1]
    step = b - a
    out = b - step * (1 - t) if t >= 0.5 else a + step * t
    return np.where(np.isnan(ordered[:, -1:]), np.nan, out)


def _acf(
    ind: np.ndarray,
    mean: np.ndarray,
    weights: np.ndarray,
    max_lag: int,
    dtype: type[np.floating] = np.float64,
) -> np.ndarray:
    """Weighted sum over runs of each run's autocorrelation at lags 0..max_lag, computed in
    ``dtype``.

    ``ind``: a (..., runs, n) 0/1 indicator, demeaned here by ``mean`` (runs,); ``weights``:
    (runs,). Zero padding to n + max_lag (not 2n) is enough for a linear autocorrelation up to
    max_lag, and summing the runs' power spectra before the inverse FFT needs one inverse per
    stack instead of one per run. Lags are unbiased for the shrinking overlap, so a lag near n
    is not penalised for length alone.
    """
    *lead, runs, n = ind.shape
    size = sfft.next_fast_len(n + max_lag, real=True)
    x = np.zeros((*lead, runs, size), dtype=dtype)
    np.subtract(ind, mean[:, None].astype(dtype), out=x[..., :n])
    f = sfft.rfft(x, axis=-1, overwrite_x=True)
    parts = f.view(x.dtype)  # re, im interleaved: square in place, no temporaries
    np.square(parts, out=parts)
    # The weighted sum over runs is one matrix product (one pass, no weighted copy).
    power = np.matmul(weights.astype(dtype), parts)
    # re² + im²: each pair added by slices, the same additions as a sum over an axis of two,
    # which numpy does as a slow reduction
    power = power[..., 0::2] + power[..., 1::2]
    ac = sfft.irfft(power, n=size, axis=-1)[..., : max_lag + 1]
    return ac * (n / (n - np.arange(max_lag + 1)))


def monte_carlo_p(
    stat: float,
    nulls: Callable[[int], np.ndarray],
    *,
    resamples: int,
    chunk: int,
    look: int | None = None,
    tie: float = TIE,
) -> float:
    """A permutation test's p-value from ``nulls(b)``, b statistics drawn under the null
    (a draw within ``tie`` of ``stat`` counts as matching it).

    It stops early both ways. Once SEQUENTIAL_EXCEED draws have matched the data, p is
    Besag and Clifford's exceed / done, already far above ALPHA (most runs have no period,
    and this is what made reports of long runs slow). And with ``look``, after ``look`` draws
    none of which matched the data, p = 1 / (look + 1): the smallest p those draws can give,
    chosen (see ``early_look``) below every threshold the family can set, so the verdict is
    the full test's (a strong period in a 10^6-sample report no longer pays 20,000 draws). A
    test that goes on past the look pays for it with 1 / (look + 1) added to its p: the two
    ways to a small p are then a union bound, and p stays a valid p-value.
    """
    penalty = 1.0 / (look + 1) if look is not None else 0.0
    exceed, done = 0, 0
    while done < resamples:
        b = min(chunk, resamples - done)
        if look is not None and done < look:
            b = min(b, look - done)  # the look falls on a fixed draw count
        # FFT rounding must not break ties between equal arrangements in the data's favour.
        matched = np.flatnonzero(nulls(b) >= stat - tie)
        if exceed + matched.size >= SEQUENTIAL_EXCEED:
            # Besag and Clifford's p is h / L at the very draw L of the h-th match, not at
            # the end of its batch (which made p too small about one time in ten).
            drawn = done + int(matched[SEQUENTIAL_EXCEED - exceed - 1]) + 1
            return min(1.0, SEQUENTIAL_EXCEED / drawn + penalty)
        exceed += matched.size
        done += b
        if look is not None and done == look and exceed == 0:
            return 1.0 / (look + 1)
    return min(1.0, (exceed + 1) / (resamples + 1) + penalty)


def early_look(tests: int, resamples: int) -> int | None:
    """Where a family of ``tests`` may stop a permutation test that nothing matched: the draw
    count whose smallest p is EARLY_LOOK_MARGIN times below the family's smallest
    Holm threshold (ALPHA / tests), which a p-value there always passes; None when that is
    not well short of ``resamples``."""
    look = math.ceil(EARLY_LOOK_MARGIN * max(tests, 1) / ALPHA)
    return look if look <= resamples // 2 else None


def _first_peak(acf: np.ndarray, max_lag: int) -> tuple[int | None, float]:
    """The smallest lag >= 2 that is a local maximum with at least half the top peak."""
    seg = acf[: max_lag + 1]
    if seg.size < 4:
        return None, math.nan
    top = float(seg[2:].max())
    if top <= 0:
        return None, top
    for lag in range(2, seg.size):
        left = seg[lag - 1]
        right = seg[lag + 1] if lag + 1 < seg.size else -np.inf
        if seg[lag] >= 0.5 * top and seg[lag] >= left and seg[lag] >= right:
            return lag, float(seg[lag])
    return None, top


def _shuffles(ind: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """``b`` within-run shuffles of a boolean (runs, n) indicator, shape (b, runs, n).

    A shuffle of a 0/1 row is a uniformly random set of positions for its ones, so only those
    positions are drawn (or those of the zeros, whichever are fewer): draw the missing count
    with replacement, keep the distinct ones, repeat. That is sampling without replacement,
    and it costs the number of spikes, not a full Fisher-Yates pass over every iteration.
    """
    runs, n = ind.shape
    ones = ind.sum(axis=1)
    flip = ones > n // 2  # draw the zeros instead
    target = np.where(flip, n - ones, ones)
    hits = np.zeros((b, runs, n), dtype=bool)
    need = np.broadcast_to(target, (b, runs)).copy()
    while need.any():
        bi, ri = np.nonzero(need)
        reps = need[bi, ri]
        hits[np.repeat(bi, reps), np.repeat(ri, reps), rng.integers(0, n, reps.sum())] = True
        # Only the rows just drawn into can have changed (the others hold their count).
        need[bi, ri] = target[ri] - np.count_nonzero(hits[bi, ri], axis=-1)
    return hits ^ flip[None, :, None]


def _shuffled_ones(
    ones: np.ndarray, n: int, b: int, rng: np.random.Generator, batch: int
) -> list[np.ndarray]:
    """Where the ones of ``b`` within-run shuffles fall: per run, a (b, ones[r]) array of
    sorted positions (rows of at most n // 2 ones).

    The shuffles are :func:`_shuffles`' for the same ``rng``, drawn ``batch`` at a time as it
    would be called: the same draws (each row's positions with replacement, its repeats
    drawn again until it has its count), kept as positions instead of a (b, runs, n) matrix.
    """
    parts = [_ones_batch(ones, n, min(batch, b - i), rng) for i in range(0, b, batch)]
    if len(parts) == 1:
        return parts[0]
    return [np.concatenate(rows) for rows in zip(*parts, strict=True)]


def _ones_batch(ones: np.ndarray, n: int, b: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One call's worth of :func:`_shuffled_ones`: the draws :func:`_shuffles` makes."""
    total = int(ones.sum())
    if total == 0:
        return [np.empty((b, 0), dtype=np.int64) for _ in ones]
    draws = rng.integers(0, n, b * total).reshape(b, total)
    starts = np.cumsum(ones) - ones
    out = [np.sort(draws[:, s : s + k], axis=1) for s, k in zip(starts, ones, strict=True)]
    # A repeat in a sorted row is a hole: _shuffles draws that many positions for the row
    # again (rows in order, a row's draws together) and keeps the distinct ones.
    holes = [row[:, 1:] == row[:, :-1] for row in out]
    need = np.stack([h.sum(axis=1) for h in holes], axis=1)
    while need.any():
        bi, ri = np.nonzero(need)
        reps = need[bi, ri]
        drawn = rng.integers(0, n, reps.sum())
        owner = np.repeat(ri, reps)
        for r in np.unique(ri):
            hb, hc = np.nonzero(holes[r])
            out[r][hb, hc + 1] = drawn[owner == r]
            rows = np.unique(hb)
            again = np.sort(out[r][rows], axis=1)
            out[r][rows] = again
            holes[r][rows] = again[:, 1:] == again[:, :-1]
            need[rows, r] = holes[r][rows].sum(axis=1)
    return out


def _pair_acf(
    ones: Sequence[np.ndarray], n: int, mean: np.ndarray, weights: np.ndarray, max_lag: int
) -> np.ndarray:
    """What :func:`_acf` gives for 0/1 rows given by the positions of their ones (``ones[r]``:
    a sorted (b, k) array per run), in double precision, from the pairs of ones instead of
    an FFT: (b, max_lag + 1).

    A demeaned 0/1 row's autocovariance at lag L is C(L) - m (2k - lo(L) - hi(L)) + m² (n - L),
    where C(L) counts the pairs of ones L apart, lo(L) the ones before L and hi(L) those at
    n - L or later. The pairs are those of each one with the next few (sorted rows: as many
    as can lie within max_lag), which costs about k² max_lag / n a row, where an FFT costs
    n log n whatever k.
    """
    b = ones[0].shape[0] if ones else 0
    width = max_lag + 2  # lags 0..max_lag, and one bin for the pairs further apart
    base = np.arange(b, dtype=np.intp)[:, None] * width
    far = base + (max_lag + 1)
    lags = np.arange(max_lag + 1)
    pairs = np.zeros(b * width)  # the sum over runs of w C(L)
    # Where lo(L) + hi(L) steps up by one (at L = p + 1 and at L = n - p), every run's in
    # one weighted count: a few per one, where the pairs are many.
    total = sum(row.shape[1] for row in ones)
    steps = np.empty((b, 2 * total), dtype=np.intp)
    step_weights = np.empty(2 * total)
    at = 0
    fixed = np.zeros(max_lag + 1)  # the terms that depend on k only
    for row, w, m in zip(ones, weights, mean, strict=True):
        k = row.shape[1]
        if k == 0:
            continue
        fixed += w * (m * m * (n - lags) - 2 * m * k)
        fixed[0] += w * k  # C(0): every one with itself (the pairs below start at lag 1)
        reach = _reach(row, max_lag)
        if reach:
            # Each one against the next `reach` (past the row's end, a position further than
            # max_lag from all): one (b, k, reach) difference, clipped to the far bin. A count
            # per run, weighted after: cheaper than weighting every pair.
            ahead = np.full((b, k + reach), n + max_lag + 1, dtype=np.intp)
            ahead[:, :k] = row
            nexts = np.lib.stride_tricks.sliding_window_view(ahead, reach + 1, axis=1)
            apart = np.subtract(nexts[:, :k, 1:], (row - base)[:, :, None])
            np.minimum(apart, far[:, :, None], out=apart)
            pairs += w * np.bincount(apart.ravel(), minlength=b * width)
        np.add(row, base + 1, out=steps[:, at : at + k])
        np.subtract(base + n, row, out=steps[:, at + k : at + 2 * k])
        step_weights[at : at + 2 * k] = w * m
        at += 2 * k
    np.minimum(steps, far, out=steps)
    weighted = np.broadcast_to(step_weights, steps.shape).ravel()
    lo_hi = np.bincount(steps.ravel(), weighted, minlength=b * width).reshape(b, width)
    ac = pairs.reshape(b, width)[:, : max_lag + 1]
    ac += np.cumsum(lo_hi[:, : max_lag + 1], axis=-1)
    ac += fixed
    ac *= n / (n - lags)
    return ac


def _pair_floor(
    ones: np.ndarray, n: int, mean: np.ndarray, weights: np.ndarray, max_lag: int
) -> np.ndarray:
    """For lags 2..max_lag, what :func:`_pair_bound` adds to its pair counts: the terms of
    the autocovariance besides C(L), at their largest for each run's count of ones
    (lo(L) + hi(L) is at most 2 min(k, L)), times the unbiasing factor."""
    lags = np.arange(2, max_lag + 1)
    k = ones.astype(np.float64)[:, None]
    m = mean[:, None]
    terms = weights[:, None] * (m * 2 * np.minimum(k, lags) + m * m * (n - lags) - 2 * m * k)
    return terms.sum(axis=0) * (n / (n - lags))


def _pair_bound(
    ones: Sequence[np.ndarray], n: int, max_lag: int, top_weight: float, floor: np.ndarray
) -> np.ndarray:
    """A bound of each shuffle's statistic (its autocorrelation's largest value at lags 2 and
    up), as :func:`_pair_acf` would give it, from one count of every run's pairs together.

    A run's weight is at most ``top_weight``, so the weighted sum over runs of the pairs L
    apart is at most top_weight times their count over all runs: one count (every run's pairs
    in one histogram), where the exact sum needs one per run and the steps of lo and hi."""
    b = ones[0].shape[0] if ones else 0
    width = max_lag + 2  # as in _pair_acf: lags 0..max_lag and a far bin
    base = np.arange(b, dtype=np.intp)[:, None] * width
    far = base + (max_lag + 1)
    reach = [_reach(row, max_lag) for row in ones]
    index = np.empty(b * sum(r.shape[1] * j for r, j in zip(ones, reach, strict=True)), np.intp)
    at = 0
    for row, ahead_of in zip(ones, reach, strict=True):
        k = row.shape[1]
        if not ahead_of:
            continue
        ahead = np.full((b, k + ahead_of), n + max_lag + 1, dtype=np.intp)
        ahead[:, :k] = row
        nexts = np.lib.stride_tricks.sliding_window_view(ahead, ahead_of + 1, axis=1)
        out = index[at : at + b * k * ahead_of].reshape(b, k, ahead_of)
        np.subtract(nexts[:, :k, 1:], (row - base)[:, :, None], out=out)
        np.minimum(out, far[:, :, None], out=out)
        at += out.size
    counts = np.bincount(index[:at], minlength=b * width).reshape(b, width)[:, 2 : max_lag + 1]
    scale = top_weight * n / (n - np.arange(2, max_lag + 1))
    return (counts * scale + floor).max(axis=-1, initial=-np.inf)


def _reach(row: np.ndarray, max_lag: int) -> int:
    """The most places apart two ones of a sorted row (b, k) can be and still lie within
    ``max_lag`` of each other, over every row."""
    b, k = row.shape
    if k < 2:
        return 0
    # The rows one after the other, each beyond the previous by more than max_lag: one
    # sorted array, so one search finds every one's last partner.
    flat = (row + np.arange(b)[:, None] * (int(row[:, -1].max()) + max_lag + 1)).ravel()
    last = np.searchsorted(flat, flat + max_lag, side="right")
    return int((last - np.arange(flat.size)).max()) - 1


def _onsets(slow: np.ndarray) -> np.ndarray:
    """Where each burst of consecutive slow iterations starts.

    On a busy host slow iterations come in bursts (a preempted or throttled stretch), and a
    burst of b gives the autocorrelation a lobe at lags 1..b whose ripples out-rank a real
    period's peak. A burst is one event: keeping its first iteration removes the lobe and
    leaves a periodic train (a flush every k writes, with or without a slow follower) intact.
    """
    ind = slow.astype(bool)
    starts = ind.copy()
    starts[:, 1:] &= ~ind[:, :-1]
    return starts


@dataclass
class _PeriodSearch:
    """The period search before its permutation test: the spike onsets (None when too few to
    search), their autocorrelation's first peak, and whether it is strong enough to test."""

    ind: np.ndarray | None = None
    mean: np.ndarray = field(default_factory=lambda: np.empty(0))
    weights: np.ndarray = field(default_factory=lambda: np.empty(0))
    max_lag: int = 0
    lag: int | None = None
    peak: float = math.nan
    stat: float = math.nan

    @property
    def testable(self) -> bool:
        return self.ind is not None and self.lag is not None and self.peak >= MIN_ACF


def _period_search(slow: np.ndarray) -> _PeriodSearch:
    # The period search and its permutation test read the first PERIODIC_MAX_ITERATIONS only:
    # that bounds the cost, and still holds four repetitions of any period up to a quarter of it.
    ind = _onsets(slow[:, :PERIODIC_MAX_ITERATIONS])
    runs, n = ind.shape
    if n < 16 or ind.sum() < 3:
        return _PeriodSearch()
    max_lag = n // 4
    mean = ind.mean(axis=1)
    energy = ind.sum(axis=1) * (1.0 - mean)  # sum of squares of the demeaned 0/1 row
    # Each run's autocorrelation is normalised by its lag-0 value (a run without spikes counts
    # as 0) and averaged over runs. A shuffle keeps every run's spike count, so the weights
    # hold for the whole null distribution.
    weights = np.divide(1.0, runs * energy, out=np.zeros(runs), where=energy > 0)
    acf = _acf(ind, mean, weights, max_lag)
    lag, peak = _first_peak(acf, max_lag)
    return _PeriodSearch(ind, mean, weights, max_lag, lag, peak, float(acf[2:].max()))


def _period_tail_bound(search: _PeriodSearch, stat: float) -> float:
    """An upper bound of the chance that a within-run shuffle of ``search``'s onsets has a
    statistic of ``stat`` or more, from the counts of onsets alone (no shuffle drawn).

    - The statistic at lag L is at most U(L) = top_weight (n / (n - L)) C(L) + floor(L),
      C(L) the pairs of onsets L apart over all runs (``_pair_bound``, ``_pair_floor``), so
      U(L) >= stat needs C(L) >= c(L) = (stat - floor(L)) (n - L) / (n top_weight).
    - A shuffle of a run is a uniformly random set of its k places: the indicators of those
      places are negatively associated (Joag-Dev and Proschan 1983), and so are the products
      of disjoint pairs of them. C(L) splits into two sums of disjoint pairs (i, i + L), by the
      parity of i // L; each pair is a one with probability q = k (k - 1) / (n (n - 1)), and
      runs are independent. Each sum's moment generating function is then at most that of
      independent Bernoullis, and Chernoff's bound with mean mu = (n - L) sum q (an upper
      bound of each half's) gives P(half >= c / 2) <= exp(-mu h(c / (2 mu))),
      h(u) = u log u - u + 1, for c / 2 > mu.
    - P(C(L) >= c) is at most twice that; the bound is the sum over the lags (a union).

    Loose, by the sum over thousands of lags among other things, and so only for a period far
    beyond the shuffles' reach: 1e-33 to 1e-97 for the three periods a worked example's report
    found, of 12,200 shuffles each. Written here: scipy has the Chernoff bound of no such
    statistic."""
    ind = search.ind
    if ind is None or search.max_lag < 2 or float(search.weights.max(initial=0.0)) <= 0.0:
        return 1.0
    n = ind.shape[1]
    lags = np.arange(2, search.max_lag + 1)
    mean = _pair_count_mean(ind.sum(axis=1), n, lags)
    return float(_pair_count_tail(_pairs_needed(search, stat), mean).sum())


def _pairs_needed(search: _PeriodSearch, stat: float) -> np.ndarray:
    """Per lag L from 2 to max_lag, the pairs of onsets L apart (summed over runs) that an
    arrangement of ``search``'s onsets needs for its statistic at L to reach ``stat``: the
    pair bound (``_pair_bound``) solved for its count. Fewer cannot reach it."""
    assert search.ind is not None
    n = search.ind.shape[1]
    lags = np.arange(2, search.max_lag + 1)
    top = float(search.weights.max())
    floor = _pair_floor(search.ind.sum(axis=1), n, search.mean, search.weights, search.max_lag)
    return (stat - floor) * (n - lags) / (n * top)


def _pair_count_mean(ones: np.ndarray, n: int, lags: np.ndarray) -> np.ndarray:
    """The mean over within-run shuffles of C(L), the pairs of ones L apart summed over runs
    of ``ones`` ones each: n - L places a pair can start, each a pair with probability
    k (k - 1) / (n (n - 1))."""
    k = ones.astype(np.float64)
    return (n - lags) * float((k * (k - 1)).sum()) / (n * (n - 1))


def _pair_count_tail(need: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Per lag, a bound of P(C(L) >= need) under within-run shuffles, C(L) of the given mean
    (``_pair_count_mean``): twice the Chernoff bound of a half (``_period_tail_bound``)."""
    half = need / 2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        u = half / mean
        log_tail = np.where(u > 1, -mean * (u * np.log(u) - u + 1), 0.0)
    # No pairs can form (mean 0): C(L) is 0, which reaches no positive count.
    log_tail = np.where(mean > 0, log_tail, np.where(half > 0, -np.inf, 0.0))
    return np.minimum(1.0, 2 * np.exp(log_tail))


def periodic(
    slow: np.ndarray, *, resamples: int = 199, seed: int = 0, look: int | None = None
) -> Periodic:
    """Period of the spikes and the indices slow in every run (see module docstring)."""
    runs, n = slow.shape
    rate = float(slow.mean()) if slow.size else 0.0
    counts = slow.sum(axis=0)
    indices: list[int] = []
    if runs >= 3 and rate > 0:
        col_p = dist.binom_sf(counts - 1, runs, rate)
        hot = np.flatnonzero((col_p < ALPHA / n) & (counts >= max(2, math.ceil(0.5 * runs))))
        indices = [int(i) for i in hot[:MAX_REPORTED_INDICES]]
    search = _period_search(slow)
    ind, lag, peak = search.ind, search.lag, search.peak
    if ind is None:
        return Periodic(False, None, None, None, indices, rate)
    if lag is None or not search.testable:
        # No peak strong enough to be a period: no p-value can make one, so none is computed.
        return Periodic(False, None, peak if lag else None, None, indices, rate)
    mean, weights, max_lag = search.mean, search.weights, search.max_lag
    n = ind.shape[1]
    stat = search.stat
    # A family's test (``look``) may stop before its first shuffle, when the tail bound puts
    # the data beyond every shuffle's reach; every test that goes on pays for it with
    # TAIL_BOUND_P on its p (a union bound), so p stays a valid p-value. The shuffles count a
    # draw within the ties as matching, and so does the bound.
    bounded = look is not None
    if bounded and _period_tail_bound(search, stat - TIE_SINGLE - TIE) <= TAIL_BOUND_P:
        out = Periodic(False, None, peak, TAIL_BOUND_P, indices, rate, TAIL_BOUND_P, lag, True)
        out.decide()
        return out
    rng = np.random.default_rng(seed)

    # The shuffles are drawn in batches of about 16 MiB of FFT input: enough to amortise the
    # FFT's calls; bigger batches were slower (memory traffic). The pair count draws the same
    # batches, so either way a seed gives the same shuffles.
    batch = max(1, int(2**21 // max(1, runs * (n + max_lag))))
    ones = ind.sum(axis=1)
    size = sfft.next_fast_len(n + max_lag, real=True)
    pair_cost = PAIR_COST * float((ones.astype(np.float64) ** 2).sum()) * max_lag / n
    if ones.max() <= n // 2 and pair_cost < runs * size * math.log2(size):
        # Sparse onsets: each shuffle's autocorrelation from its pairs of onsets (exact), the
        # same shuffles as below, several batches a call (each costs little). A bound first
        # (see _pair_bound) rules out the shuffles that cannot reach the data's statistic;
        # once most of a batch could, the bound only adds cost, and is dropped.
        floor = _pair_floor(ones, n, mean, weights, max_lag)
        bounding = True

        def nulls(b: int) -> np.ndarray:
            nonlocal bounding
            drawn = _shuffled_ones(ones, n, b, rng, batch)
            if not bounding:
                return _pair_acf(drawn, n, mean, weights, max_lag)[:, 2:].max(axis=-1)
            out = _pair_bound(drawn, n, max_lag, float(weights.max()), floor)
            # A further TIE for the bound's own rounding (it adds in another order).
            near = np.flatnonzero(out >= stat - TIE_SINGLE - TIE)
            if near.size:
                some = [row[near] for row in drawn]
                out[near] = _pair_acf(some, n, mean, weights, max_lag)[:, 2:].max(axis=-1)
            bounding = 2 * near.size <= b
            return out

        chunk = batch * max(1, PAIR_BATCH // batch)
    else:

        def nulls(b: int) -> np.ndarray:
            shuffled = _shuffles(ind, b, rng)
            return _acf(shuffled, mean, weights, max_lag, np.float32)[:, 2:].max(axis=-1)

        chunk = batch
    p = monte_carlo_p(stat, nulls, resamples=resamples, chunk=chunk, look=look, tie=TIE_SINGLE)
    if bounded:
        p = min(1.0, p + TAIL_BOUND_P)
    out = Periodic(False, None, peak, p, indices, rate, p, lag)
    out.decide()
    return out


def _cross_pairs(slow: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each run's spike rate and its standard deviation, and the consecutive pairs of runs
    that both have some spikes and some iterations without (those the cross-run test reads).

    A 0/1 row's mean and standard deviation follow from its count of ones: no passes over
    the (often runs x 10^5) matrix besides the one that counts."""
    rate = slow.sum(axis=1, dtype=np.float64) / max(slow.shape[1], 1)
    sd = np.sqrt(rate * (1.0 - rate))
    usable = sd > 0
    return rate, sd, np.flatnonzero(usable[:-1] & usable[1:])


def _cross_testable(slow: np.ndarray, pairs: np.ndarray) -> bool:
    """Whether the cross-run test gives a p-value for ``slow`` (already cut to the first
    PERIODIC_MAX_ITERATIONS) and its ``pairs``."""
    runs, n = slow.shape
    return runs >= 2 and pairs.size > 0 and n >= 16


def cross_run(
    slow: np.ndarray, *, resamples: int = 199, seed: int = 0, look: int | None = None
) -> CrossRun:
    """Correlation of spike positions between consecutive runs, the lag it peaks at, a p.

    The correlation is circular (run b is read from index d on, wrapping around), the same
    convention as the null, which shifts each run circularly. Shifting run a by s_a and run b
    by s_b moves their circular correlation by s_b - s_a, so every resample is a re-indexing
    of the observed correlations: one FFT in all, however many resamples.
    """
    slow = slow[:, :PERIODIC_MAX_ITERATIONS]  # as the period search: bounded cost
    runs, n = slow.shape
    rate, sd, pairs = _cross_pairs(slow)
    if not _cross_testable(slow, pairs):
        return CrossRun(False, None, None, None, int(pairs.size))
    max_lag = min(n // 4, 2000)
    z = slow.astype(np.float64)
    z -= rate[:, None]
    z /= np.maximum(sd, 1e-300)[:, None]
    f = sfft.rfft(z, axis=-1)
    # cc[p, d]: mean over t of run a[t] times run b[(t + d) mod n], for a, b = pairs[p], +1.
    cc = sfft.irfft(np.conj(f[pairs]) * f[pairs + 1], n=n, axis=-1) / n
    lags = np.arange(-max_lag, max_lag + 1)
    prof = cc[:, lags % n].mean(axis=0)
    stat = float(prof.max())
    # A periodic pattern peaks at every multiple of its period: report the smallest shift.
    near_top = np.flatnonzero(prof >= stat - 0.02 * abs(stat))
    best = int(near_top[np.argmin(np.abs(lags[near_top]))])
    rng = np.random.default_rng(seed)
    # cc wrapped around by max_lag on both sides: the lags of shift s are the contiguous
    # window wrapped[p, s : s + len(lags)], so a resample copies rows instead of gathering
    # pairs x lags elements through a modulo (that took most of a report's detection time).
    wrapped = cc[:, np.arange(-max_lag, n + max_lag) % n]

    # The lags in blocks of CROSS_BLOCK: each pair's largest correlation in each block of
    # every shift bounds a resample's mean over pairs block by block, so only the blocks
    # whose bound reaches the data's statistic (in a test with a clear finding, next to none)
    # are added up lag by lag.
    blocks = -(-lags.size // CROSS_BLOCK)
    room = np.pad(wrapped, ((0, 0), (0, blocks * CROSS_BLOCK - lags.size)))
    # The largest of every CROSS_BLOCK consecutive values: a running maximum (van Herk's,
    # in scipy), a sixth of the time of a maximum over each window.
    block_top = ndimage.maximum_filter1d(room, CROSS_BLOCK, axis=-1, origin=-(CROSS_BLOCK // 2))
    block_top = block_top[:, : room.shape[1] - CROSS_BLOCK + 1]
    block_lags = np.lib.stride_tricks.sliding_window_view(room, CROSS_BLOCK, axis=-1)
    offsets = np.arange(blocks) * CROSS_BLOCK
    beyond = offsets[:, None] + np.arange(CROSS_BLOCK) >= lags.size  # the last block's tail

    def nulls(b: int) -> np.ndarray:
        """Each resample's statistic where it may reach the data's (within the tie), and
        elsewhere a bound below that, which is all that monte_carlo_p reads."""
        shifts = rng.integers(0, n, size=(b, runs))
        moved = (shifts[:, pairs + 1] - shifts[:, pairs]) % n  # (b, pairs)
        # Every sum here adds the pairs in one order, as the statistic's mean does: its
        # rounding cannot put a bound below the value it bounds.
        bound = block_top[0, moved[:, :1] + offsets]
        for p in range(1, pairs.size):
            bound += block_top[p, moved[:, p : p + 1] + offsets]
        bound /= pairs.size
        out = bound.max(axis=-1)
        draw, block = np.nonzero(bound >= stat - TIE)
        if draw.size:
            # Those blocks lag by lag: the mean over pairs as numpy takes it (added pair by
            # pair, then divided), so each value is the one the whole profile would have.
            at = offsets[block]
            total = block_lags[0, moved[draw, 0] + at]
            for p in range(1, pairs.size):
                total += block_lags[p, moved[draw, p] + at]
            total /= pairs.size
            total[beyond[block]] = -np.inf
            out[draw] = -np.inf
            np.maximum.at(out, draw, total.max(axis=-1))
        return out

    # Small batches: a resample may gather pairs x lags values at random places in cc, and the
    # sequential stop (as in periodic()) ends most tests after a batch or two.
    chunk = max(1, min(resamples, int(2**20 // (pairs.size * lags.size))))
    p = monte_carlo_p(stat, nulls, resamples=resamples, chunk=chunk, look=look)
    out = CrossRun(False, stat, best - max_lag, p, int(pairs.size), p)
    out.decide()
    return out


def _first(x: np.ndarray, width: np.ndarray) -> np.ndarray:
    """The matrices with iterations from ``width`` on (one width per leading index) as NaN."""
    return np.where(np.arange(x.shape[-1]) < np.asarray(width)[..., None, None], x, np.nan)


#: Runs up to which the warm-up test enumerates every sign pattern (2^16 of them).
EXACT_RUNS = 16


def sign_flip_p(diff: np.ndarray, *, resamples: int = 199, seed: int = 0) -> np.ndarray:
    """One-sided sign-flip p-value of the mean of ``diff`` (last axis; leading axes batched):
    the share of sign patterns whose mean is at least the data's, over all 2^n patterns up to
    EXACT_RUNS (hand-written: one matrix product, where scipy's ``permutation_test`` loops
    over the patterns in Python, 0.1 s a test), else ``scipy.stats.permutation_test``'s."""
    n = diff.shape[-1]
    if n > EXACT_RUNS:
        from scipy import stats  # heavy (see load_tests), only for this many runs

        return np.asarray(
            stats.permutation_test(
                (diff,),
                lambda d, axis: np.mean(d, axis=axis),
                permutation_type="samples",
                vectorized=True,
                axis=-1,
                alternative="greater",
                n_resamples=resamples,
                random_state=seed,
            ).pvalue
        )
    signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # (2^n, n)
    flat = diff.reshape(-1, n)
    out = np.empty(flat.shape[0])
    step = max(1, 2**22 // 2**n)  # bounded memory for batches of many matrices
    for i in range(0, flat.shape[0], step):
        d = flat[i : i + step]
        null = d @ signs.T  # sums; the first pattern (all +1) is the data's own
        tie = 1e-9 * np.abs(d).sum(axis=-1, keepdims=True)
        out[i : i + step] = (null >= null[:, :1] - tie).mean(axis=-1)
    return out.reshape(diff.shape[:-1])


def warmup_tests(
    matrix: np.ndarray, *, resamples: int = 199, seed: int = 0
) -> dict[str, np.ndarray]:
    """The warm-up test of every (..., runs, iterations) matrix at once (see :func:`warmup`):
    p-value, tested window, stretch above the noise, slowdown and the test's smallest p."""
    x = np.asarray(matrix, dtype=np.float64)
    runs, n = x.shape[-2:]
    steady = x[..., n // 2 :]
    level = np.median(steady, axis=(-2, -1))
    quantum = np.median(resolution(x), axis=-1)
    profile = np.median(x, axis=-2)  # the typical run, iteration by iteration
    smooth = ndimage.convolve1d(profile, np.ones(5) / 5, axis=-1, mode="constant")
    tail = smooth[..., n // 2 :]
    mad = np.median(np.abs(tail - np.median(tail, axis=-1, keepdims=True)), axis=-1)
    spread = np.maximum(1.4826 * mad, quantum / 2)
    above = smooth[..., : n // 2] > (level + 3 * spread + quantum)[..., None]
    stretch = np.where(above.all(axis=-1), n // 2, np.argmin(above, axis=-1))
    window = np.minimum(np.maximum(stretch, 5), n // 4)
    # One pair per run: its first window's median against its steady state's. Runs are
    # independent, and under no warm-up each difference is as likely negative as positive,
    # whatever the autocorrelation inside a run: the test flips the signs (all 2^runs
    # patterns up to 16 runs, ``resamples`` drawn beyond), so its smallest p-value is 2^-runs.
    first = _first(x, window)
    diff = np.nanmedian(first, axis=-1) - np.median(steady, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slowdown = np.nanmedian(first, axis=(-2, -1)) / level
    if runs < 2:
        p = np.full(level.shape, np.nan)
    else:
        p = sign_flip_p(diff, resamples=resamples, seed=seed)
        p = np.where(np.all(diff == 0, axis=-1), 1.0, p)
    min_p = np.full(level.shape, 2.0**-runs if runs <= EXACT_RUNS else 1 / (resamples + 1))
    return {"p": np.asarray(p), "window": window, "stretch": stretch,
            "slowdown": np.where(level > 0, slowdown, np.nan), "min_p": min_p}  # fmt: skip


def warmup(matrix: np.ndarray, *, resamples: int = 199, seed: int = 0) -> Warmup:
    """Are the first iterations of the runs slower than their steady state (second half)?"""
    runs, n = matrix.shape
    if n < 20 or runs < 2:
        return Warmup(False, 0, None, None, runs=runs)
    tests = warmup_tests(matrix, resamples=resamples, seed=seed)
    t = {k: v.item() for k, v in tests.items()}
    slowdown = float(t["slowdown"]) if math.isfinite(t["slowdown"]) else None
    p = float(t["p"])
    out = Warmup(False, 0, slowdown, p, p, int(t["window"]), int(t["stretch"]), runs,
                 float(t["min_p"]))  # fmt: skip
    out.decide()
    return out


def _subsample(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x = x[np.isfinite(x)]
    if x.size > SHAPE_MAX_SAMPLES:
        x = rng.choice(x, SHAPE_MAX_SAMPLES, replace=False)
    return x


def _standardise(x: np.ndarray, quantum: float) -> np.ndarray:
    # With a coarse timer the IQR can be 0; the timer's step is then the natural scale.
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    scale = q3 - q1 if q3 > q1 else (quantum or np.std(x) or 1.0)
    return (x - med) / scale


def mvalue(x: np.ndarray, grid: int = 512, quantum: float | None = None) -> float:
    """Total variation of the KDE density over its maximum (2 = one mode, 4 = two).

    ``quantum`` is the timer's step (see :func:`resolution`); by default the smallest gap
    between distinct values.
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    lo, hi = np.percentile(x, [0.5, 99.5]) if x.size else (0.0, 0.0)
    core = x[(x >= lo) & (x <= hi)]
    if core.size < 10 or hi <= lo or np.ptp(core) == 0:
        return 2.0
    # Scott's rule, as scipy.stats.gaussian_kde's default: the kernel's width is the sample's
    # standard deviation times n^(-1/5).
    sd = float(core.std(ddof=1))
    width = sd * core.size ** (-1 / 5)
    # Coarse timers put the values on a grid; a bandwidth below the grid step would turn every
    # tick into a "mode". Widen the kernel to at least one step.
    if quantum is None:
        steps = np.diff(np.unique(core))
        quantum = float(steps.min()) if steps.size else 0.0
    width = max(width, quantum)
    pad = 0.1 * (hi - lo)
    density = gaussian_density(core, np.linspace(lo - pad, hi + pad, grid), width)
    return float(np.abs(np.diff(density, prepend=0.0, append=0.0)).sum() / density.max())


def gaussian_density(x: np.ndarray, at: np.ndarray, width: float) -> np.ndarray:
    """The Gaussian kernel density of the 1-D sample ``x`` (kernel standard deviation
    ``width``) at the points ``at``: what ``scipy.stats.gaussian_kde`` gives for that
    bandwidth. Written out because gaussian_kde's d-dimensional evaluation (a Cholesky
    whitening of the sample and of the points on every call) cost a report's 36 one-dimensional
    densities 0.6 CPU-s, where one (points x sample) expression costs a fifth of that."""
    z = np.subtract.outer(at / width, x / width)
    np.square(z, out=z)
    z *= -0.5
    np.exp(z, out=z)
    return z.sum(axis=1) / (x.size * width * math.sqrt(2 * math.pi))


def _modality(m: float) -> str:
    return "bimodal" if m >= MVALUE_BIMODAL else "unimodal"


def shape(
    matrix: np.ndarray, baseline: np.ndarray | None, *, resamples: int = 199, seed: int = 0
) -> Shape:
    """Shape change against the baseline (AD on standardised samples) and modality."""
    rng = np.random.default_rng(seed)
    x = _subsample(matrix.ravel(), rng)
    qx = float(np.median(resolution(matrix)))
    m = mvalue(x, quantum=qx)
    if baseline is None or baseline.size == 0 or x.size < 5:
        return Shape(None, None, False, m, _modality(m))
    baseline = np.atleast_2d(np.asarray(baseline, dtype=np.float64))
    y = _subsample(baseline.ravel(), rng)
    qy = float(np.median(resolution(baseline)))
    mb = mvalue(y, quantum=qy)
    sx, sy = _standardise(x, qx), _standardise(y, qy)
    from scipy import stats  # heavy (see load_tests), only against a baseline

    with warnings.catch_warnings():  # its table p-value is capped; only the statistic is used
        warnings.simplefilter("ignore")
        ad = float(stats.anderson_ksamp([sx, sy], variant="midrank").statistic)
    ks = stats.ks_2samp(sx, sy)
    out = Shape(
        ad, float(ks.pvalue), False, m, _modality(m), mb, _modality(mb), float(ks.statistic)
    )
    out.p_adjusted = out.p_value
    out.decide()
    return out


def load_tests(jobs: Iterable[tuple[np.ndarray, np.ndarray | None]]) -> None:
    """Import scipy.stats if a ``detect`` of one of ``jobs`` (matrix, baseline) will call it:
    the shape test against a baseline, or the warm-up test of more than EXACT_RUNS runs. It
    costs about half a CPU-second, and most reports need none of the rest of it: a command
    that forks workers to detect calls this first, so that it is imported once, not once
    per worker."""
    if any(b is not None or np.atleast_2d(m).shape[0] > EXACT_RUNS for m, b in jobs):
        from scipy import stats  # noqa: F401 - imported to be inherited


def _significant(p_adjusted: float | None) -> bool:
    return p_adjusted is not None and p_adjusted < ALPHA


#: Tests per (probe, configuration): period, cross-run memory, warm-up, shape.
DETECTORS = 4


#: Room between a permutation test's resolution and the family's smallest threshold: with
#: twice, a strong effect whose null distribution still met it once or twice in 800 shuffles
#: (a real buffered write on a loaded machine) landed just above the threshold.
RESOLUTION = 10
#: Resamples of a family of up to MAX_RESAMPLES / (RESOLUTION / ALPHA) tests, 40, at full
#: resolution; above that fewer. A clear finding stops at its early look (``early_look``,
#: at most half of these), so this much is drawn only for a finding the null met once or
#: twice.
MAX_RESAMPLES = 40_000


def family_resamples(tests: int) -> int:
    """Permutations each test needs so that its smallest possible p-value, 1/(B+1), is well
    below the smallest Holm threshold of a family of ``tests`` (ALPHA/tests).
    The permutation tests stop early once the data are plainly not extreme, so the extra
    resamples cost only where there may be a finding."""
    return min(MAX_RESAMPLES, max(199, math.ceil(RESOLUTION * max(tests, 1) / ALPHA)))


def tests_with_p(matrix: np.ndarray, baseline: np.ndarray | None = None) -> int:
    """How many of ``detect``'s tests of ``matrix`` can give a p-value: exactly for the period
    test (a p only where its search found a peak to test), at most for the others. A family's
    resamples and early look are sized by the sum (``family_resamples``, ``early_look``), and
    Holm adjusts over the tests that gave one, never more than it: the look stays below the
    threshold the family's smallest p-value meets."""
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    runs, n = matrix.shape
    spikes, _ = tukey(matrix, k=3.0, quartiles=run_quartiles(matrix))
    period = int(_period_search(spikes).testable)
    head = spikes[:, :PERIODIC_MAX_ITERATIONS]
    cross = int(_cross_testable(head, _cross_pairs(head)[2]))
    warm = int(n >= 20 and runs >= 2)
    has_baseline = baseline is not None and np.asarray(baseline).size > 0
    return period + cross + warm + int(has_baseline and matrix.size >= 5)


def control_family(results: Sequence[Artifacts]) -> int:
    """Holm across every test of one command or report (family-wise error rate ALPHA): each
    test's ``p_adjusted`` is set and its finding decided on it. Returns the family's size."""
    parts = [
        part
        for a in results
        for part in (a.periodic, a.cross_run, a.warmup, a.shape)
        if part.p_value is not None and math.isfinite(part.p_value)
    ]
    if not parts:
        return 0
    adjusted = adjust(np.asarray([part.p_value for part in parts], dtype=np.float64), "holm")
    for part, q in zip(parts, adjusted, strict=True):
        part.p_adjusted = float(q)
        part.decide()
    return len(parts)


def detect(
    matrix: np.ndarray,
    baseline: np.ndarray | None = None,
    *,
    resamples: int | None = None,
    seed: int = 0,
    family: int | None = None,
) -> Artifacts:
    """Run every detector on a runs x iterations matrix (and a baseline matrix for shape).

    ``family``: how many tests this one's p-values will be adjusted with (a command's or a
    report's; by default its own four); ``resamples``: permutations per test, by default what
    that family needs. The permutation tests stop early for a clear finding only when the
    family is known (given, or this result's own with the default resamples)."""
    look = None
    if family is not None or resamples is None:
        family = family or DETECTORS
        resamples = resamples or family_resamples(family)
        look = early_look(family, resamples)
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    runs, n = matrix.shape
    quartiles = run_quartiles(matrix)
    slow, fast = tukey(matrix, quartiles=quartiles)
    where = np.argwhere(slow | fast)
    spikes, _ = tukey(matrix, k=3.0, quartiles=quartiles)  # Tukey's "far out": the spikes
    outliers = Outliers(
        count=int(where.shape[0]),
        fraction=float(where.shape[0] / matrix.size) if matrix.size else 0.0,
        high=int(slow.sum()),
        low=int(fast.sum()),
        indices=[(int(r), int(i)) for r, i in where[:MAX_REPORTED_INDICES]],
    )
    result = Artifacts(
        runs=runs,
        iterations=n,
        periodic=periodic(spikes, resamples=resamples, seed=seed, look=look),
        cross_run=cross_run(spikes, resamples=resamples, seed=seed, look=look),
        warmup=warmup(matrix, resamples=resamples, seed=seed),
        shape=shape(matrix, baseline, resamples=resamples, seed=seed),
        outliers=outliers,
    )
    control_family([result])  # alone, its own tests are the family; a command widens it
    return result
