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
  data, which leaves every verdict as the full test's). The iteration indices
  slow in (almost) every run are those whose spike count across runs is improbable under the
  overall spike rate (binomial test, Bonferroni over the indices).
- **Cross-run memory** ("diagonal spikes"): for each pair of consecutive runs, the circular
  correlation of their spike indicators at every lag; averaged over the pairs. A consistent
  peak at lag d means spike positions are remembered from run to run and move by d per run
  (d = 0: the same indices every run). The p-value shifts each run by an independent random
  circular offset, which keeps every run's own pattern (periodic or not) but breaks the
  alignment between runs (it reads the same first iterations as the period test, and stops
  as it does).
- **Warm-up**: each run's first iterations against its steady state (the second half).
  The p-value is a one-sided Wilcoxon signed-rank test over runs (first window mean vs
  steady mean), or Mann-Whitney over iterations when there are fewer than 6 runs; the test
  decides, and ``n_slow`` says how long the slow start is: the leading stretch whose
  across-run median exceeds the steady state's noise, or the tested window when the test
  finds a slow start that no single iteration shows above the noise.
- **Shape vs baseline**: the two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``)
  on the pooled samples after removing each side's location and scale
  (median and IQR), so it answers "did the shape change", not "did it shift". With thousands
  of samples KS finds differences too small to matter, so "changed" also needs the
  standardised ECDFs to differ by at least 0.1 somewhere (or the modality to differ). Modality is an
  mvalue (Brendan Gregg's measure, used by BenchmarkDotNet): the total variation of the
  density divided by its maximum; about 2 for one mode, about 4 for two. The density is a
  Gaussian KDE on a grid over the central 99% of the data, which keeps the measure from
  counting histogram noise as modes (its bandwidth is at least the timer's quantum, so
  quantised values are not read as modes). mvalue >= 3.2 (BenchmarkDotNet's threshold) is
  "bimodal".

**One family per command.** A report of two levels runs about a hundred of these tests, so
a test at ALPHA each would make about one false finding per report. Every command (vmtax
artifacts, the report) adjusts all its tests' p-values together with Benjamini-Hochberg
(statsmodels' ``multipletests``, false discovery rate ALPHA = 1%) and decides each finding on
its adjusted p-value; the permutation tests get enough resamples (``family_resamples``) for
their smallest p-value to clear the family's smallest threshold. The shape test's p-value is
KS's (the Anderson-Darling statistic is kept as evidence): a permutation p-value could not
get small enough for a family of a hundred at a cost a report can pay. A test that finds
nothing is worded "not detected (p = …)", never as absence.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import fft as sfft
from scipy import stats
from statsmodels.stats.multitest import multipletests

#: The false discovery rate of a command's or report's artifact findings (Benjamini-Hochberg
#: across all of its tests): artifacts are hints, so only strong evidence is reported.
ALPHA = 0.01
MIN_ACF = 0.5  # a period needs most spikes to recur at it; bursts of slow iterations (clustering)
# give small, significant autocorrelations at short lags that are not a period
MVALUE_BIMODAL = 3.2
MIN_SHAPE_DISTANCE = 0.1  # with thousands of samples AD flags tiny differences: need a visible one
SHAPE_MAX_SAMPLES = 2000  # per side, for the AD permutation test and the KDE
MAX_REPORTED_INDICES = 200
PERIODIC_MAX_ITERATIONS = 65_536  # per run, for the period search (see periodic())
TIE = 1e-9  # correlations this close to the observed one count as ties (as large)
SEQUENTIAL_EXCEED = 10  # the period test stops after this many shuffles as extreme as the data
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

    def decide(self) -> None:
        visible = (self.distance or 0.0) >= MIN_SHAPE_DISTANCE or (
            self.modality_baseline is not None and self.modality != self.modality_baseline
        )
        self.changed = self.p_value is not None and visible and _significant(self.p_adjusted)


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
    """Per run, the smallest positive gap between distinct values: the timer's quantum."""
    out = np.zeros(matrix.shape[0])
    for r, row in enumerate(matrix):
        gaps = np.diff(np.unique(row[np.isfinite(row)]))
        gaps = gaps[gaps > 0]
        out[r] = gaps.min() if gaps.size else 0.0
    return out


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
    """Each run's Q1, Q3 and IQR (floored at the quantum), as (runs, 1) columns."""
    q1, q3 = np.percentile(matrix, [25, 75], axis=1, keepdims=True)
    return q1, q3, np.maximum(q3 - q1, resolution(matrix)[:, None])


def _acf(ind: np.ndarray, mean: np.ndarray, weights: np.ndarray, max_lag: int) -> np.ndarray:
    """Weighted sum over runs of each run's autocorrelation at lags 0..max_lag.

    ``ind``: a (..., runs, n) 0/1 indicator, demeaned here by ``mean`` (runs,); ``weights``:
    (runs,). Zero padding to n + max_lag (not 2n) is enough for a linear autocorrelation up to
    max_lag, and summing the runs' power spectra before the inverse FFT needs one inverse per
    stack instead of one per run. Lags are unbiased for the shrinking overlap, so a lag near n
    is not penalised for length alone.
    """
    *lead, runs, n = ind.shape
    size = sfft.next_fast_len(n + max_lag, real=True)
    x = np.zeros((*lead, runs, size))
    np.subtract(ind, mean[:, None], out=x[..., :n])
    f = sfft.rfft(x, axis=-1, overwrite_x=True)
    parts = f.view(np.float64)  # re, im interleaved: square in place, no temporaries
    np.square(parts, out=parts)
    # The weighted sum over runs is one matrix product (one pass, no weighted copy).
    power = np.matmul(weights, parts)
    power = power.reshape(*power.shape[:-1], -1, 2).sum(axis=-1)
    ac = sfft.irfft(power, n=size, axis=-1)[..., : max_lag + 1]
    return ac * (n / (n - np.arange(max_lag + 1)))


def monte_carlo_p(
    stat: float,
    nulls: Callable[[int], np.ndarray],
    *,
    resamples: int,
    chunk: int,
    look: int | None = None,
) -> float:
    """A permutation test's p-value from ``nulls(b)``, b statistics drawn under the null.

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
        matched = np.flatnonzero(nulls(b) >= stat - TIE)
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
    Benjamini-Hochberg threshold (ALPHA / tests); None when that is not well short of
    ``resamples``."""
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
        need = target - hits.sum(axis=-1)
    return hits ^ flip[None, :, None]


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


def periodic(
    slow: np.ndarray, *, resamples: int = 199, seed: int = 0, look: int | None = None
) -> Periodic:
    """Period of the spikes and the indices slow in every run (see module docstring)."""
    runs, n = slow.shape
    rate = float(slow.mean()) if slow.size else 0.0
    counts = slow.sum(axis=0)
    indices: list[int] = []
    if runs >= 3 and rate > 0:
        col_p = stats.binom.sf(counts - 1, runs, rate)
        hot = np.flatnonzero((col_p < ALPHA / n) & (counts >= max(2, math.ceil(0.5 * runs))))
        indices = [int(i) for i in hot[:MAX_REPORTED_INDICES]]
    # The period search and its permutation test read the first PERIODIC_MAX_ITERATIONS only:
    # that bounds the cost, and still holds four repetitions of any period up to a quarter of it.
    ind = _onsets(slow[:, :PERIODIC_MAX_ITERATIONS])
    n = ind.shape[1]
    if n < 16 or ind.sum() < 3:
        return Periodic(False, None, None, None, indices, rate)
    max_lag = n // 4
    mean = ind.mean(axis=1)
    energy = ind.sum(axis=1) * (1.0 - mean)  # sum of squares of the demeaned 0/1 row
    # Each run's autocorrelation is normalised by its lag-0 value (a run without spikes counts
    # as 0) and averaged over runs. A shuffle keeps every run's spike count, so the weights
    # hold for the whole null distribution.
    weights = np.divide(1.0, runs * energy, out=np.zeros(runs), where=energy > 0)
    acf = _acf(ind, mean, weights, max_lag)
    lag, peak = _first_peak(acf, max_lag)
    if lag is None or peak < MIN_ACF:
        # No peak strong enough to be a period: no p-value can make one, so none is computed.
        return Periodic(False, None, peak if lag else None, None, indices, rate)
    stat = float(acf[2:].max())
    rng = np.random.default_rng(seed)

    def nulls(b: int) -> np.ndarray:
        return _acf(_shuffles(ind, b, rng), mean, weights, max_lag)[:, 2:].max(axis=-1)

    # About 16 MiB of FFT input per batch: enough to amortise the calls; bigger batches were
    # slower (memory traffic).
    chunk = max(1, int(2**21 // max(1, runs * (n + max_lag))))
    p = monte_carlo_p(stat, nulls, resamples=resamples, chunk=chunk, look=look)
    out = Periodic(False, None, peak if lag else None, p, indices, rate, p, int(lag))
    out.decide()
    return out


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
    # A 0/1 row's mean and standard deviation follow from its count of ones: no passes over
    # the (often runs x 10^5) matrix besides the one that counts.
    rate = slow.sum(axis=1, dtype=np.float64) / max(n, 1)
    sd = np.sqrt(rate * (1.0 - rate))
    usable = sd > 0
    pairs = np.flatnonzero(usable[:-1] & usable[1:])
    if runs < 2 or pairs.size == 0 or n < 16:
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
    windows = np.lib.stride_tricks.sliding_window_view(wrapped, lags.size, axis=-1)
    rows = np.arange(pairs.size)

    def nulls(b: int) -> np.ndarray:
        shifts = rng.integers(0, n, size=(b, runs))
        moved = (shifts[:, pairs + 1] - shifts[:, pairs]) % n  # (b, pairs)
        return windows[rows, moved].mean(axis=1).max(axis=-1)

    # Small batches: each resample gathers pairs x lags values at random places in cc, and the
    # sequential stop (as in periodic()) ends most tests after a batch or two.
    chunk = max(1, min(resamples, int(2**20 // (pairs.size * lags.size))))
    p = monte_carlo_p(stat, nulls, resamples=resamples, chunk=chunk, look=look)
    out = CrossRun(False, stat, best - max_lag, p, int(pairs.size), p)
    out.decide()
    return out


def warmup(matrix: np.ndarray) -> Warmup:
    """Are the first iterations of the runs slower than their steady state (second half)?"""
    runs, n = matrix.shape
    if n < 20:
        return Warmup(False, 0, None, None)
    steady = matrix[:, n // 2 :]
    level = float(np.median(steady))
    quantum = float(np.median(resolution(matrix)))
    profile = np.median(matrix, axis=0)  # the typical run, iteration by iteration
    smooth = np.convolve(profile, np.ones(5) / 5, mode="same")
    tail = smooth[n // 2 :]
    spread = max(1.4826 * float(np.median(np.abs(tail - np.median(tail)))), quantum / 2)
    above = smooth[: n // 2] > level + 3 * spread + quantum
    n_slow = int(np.argmin(above)) if not above.all() else n // 2
    window = min(max(n_slow, 5), n // 4)
    first = np.median(matrix[:, :window], axis=1)
    rest = np.median(steady, axis=1)
    slowdown = float(np.median(matrix[:, :window]) / level) if level > 0 else None
    if runs >= 6:
        diff = first - rest
        p = float(stats.wilcoxon(diff, alternative="greater").pvalue) if np.any(diff) else 1.0
    else:
        p = float(
            stats.mannwhitneyu(
                matrix[:, :window].ravel(), steady.ravel(), alternative="greater"
            ).pvalue
        )
    out = Warmup(False, 0, slowdown, p, p, window, n_slow)
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
    kde = stats.gaussian_kde(core)
    # Coarse timers put the values on a grid; a bandwidth below the grid step would turn every
    # tick into a "mode". Widen the kernel to at least one step.
    if quantum is None:
        steps = np.diff(np.unique(core))
        quantum = float(steps.min()) if steps.size else 0.0
    sd = float(core.std(ddof=1))
    if sd > 0 and kde.factor * sd < quantum:
        kde.set_bandwidth(quantum / sd)
    pad = 0.1 * (hi - lo)
    density = kde(np.linspace(lo - pad, hi + pad, grid))
    return float(np.abs(np.diff(density, prepend=0.0, append=0.0)).sum() / density.max())


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


def _significant(p_adjusted: float | None) -> bool:
    return p_adjusted is not None and p_adjusted < ALPHA


#: Tests per (probe, configuration): period, cross-run memory, warm-up, shape.
DETECTORS = 4


#: Room between a permutation test's resolution and the family's smallest threshold: with
#: twice, a strong effect whose null distribution still met it once or twice in 800 shuffles
#: (a real buffered write on a loaded machine) landed just above the threshold.
RESOLUTION = 10
MAX_RESAMPLES = 20_000  # the period test's cost where there is one to find


def family_resamples(tests: int) -> int:
    """Permutations each test needs so that its smallest possible p-value, 1/(B+1), is well
    below the smallest Benjamini-Hochberg threshold of a family of ``tests`` (ALPHA/tests).
    The permutation tests stop early once the data are plainly not extreme, so the extra
    resamples cost only where there may be a finding."""
    return min(MAX_RESAMPLES, max(199, math.ceil(RESOLUTION * max(tests, 1) / ALPHA)))


def control_family(results: Sequence[Artifacts]) -> None:
    """Benjamini-Hochberg across every test of one command or report (false discovery rate
    ALPHA): each test's ``p_adjusted`` is set and its finding decided on it."""
    parts = [
        part
        for a in results
        for part in (a.periodic, a.cross_run, a.warmup, a.shape)
        if part.p_value is not None and math.isfinite(part.p_value)
    ]
    if not parts:
        return
    adjusted = multipletests([part.p_value for part in parts], method="fdr_bh")[1]
    for part, q in zip(parts, adjusted, strict=True):
        part.p_adjusted = float(q)
        part.decide()


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
        warmup=warmup(matrix),
        shape=shape(matrix, baseline, resamples=resamples, seed=seed),
        outliers=outliers,
    )
    control_family([result])  # alone, its own tests are the family; a command widens it
    return result
