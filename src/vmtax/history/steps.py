"""Steps in one probe's overhead across experiments in time order.

The data are boot-level values: for each experiment, one log overhead per boot of the chosen
configuration (against the experiment's baseline). In three stages:

1. **Proposed** by ruptures (binary segmentation, least-squares cost) on the boot-level
   series: the one best change point, moved to the nearest boundary between experiments and
   kept ``min_size`` experiments from either end. ruptures finds where; it does not test.
2. **Tested** on the experiments searched: the statistic is Welch's t between the boots
   before and after the step; its null distribution comes from permuting whole experiments
   (the unit above boots: an experiment's boots stay together, so the test holds whether or
   not experiments vary beyond their boots) and taking, for each permutation, the largest
   |t| over every split the search could have chosen, so the choice of the location is paid
   for. p = (1 + #{max ≥ observed}) / (1 + permutations).
3. A step found splits the history, and the stretches before and after it are searched the
   same way (binary segmentation) until a search finds no step, or a stretch is too short
   for one (``2 × min_size`` experiments).

The false-discovery rate is controlled by hierarchical Benjamini–Hochberg across every probe
of one command (``search``, with ``scipy.stats.false_discovery_control`` in each family).
docs/history.md gives the simulation that checks the whole procedure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import ruptures as rpt
from scipy import stats

ALPHA = 0.05
#: Experiments on each side of a step, at least: one experiment a side cannot tell a step
#: from that experiment's own deviation.
MIN_SIZE = 2
PERMUTATIONS = 999


@dataclass(frozen=True)
class Point:
    """One experiment of a probe's history: its boot-level log overheads."""

    experiment_id: int
    values: np.ndarray


@dataclass(frozen=True)
class Step:
    """A step before ``index`` (the position of the first experiment after it)."""

    index: int
    before_id: int
    after_id: int
    ratio: float  # exp(mean after − mean before), experiment means as the unit
    p_value: float
    p_adjusted: float = math.nan

    @property
    def found(self) -> bool:
        return math.isfinite(self.p_adjusted) and self.p_adjusted < ALPHA


def needed(min_size: int = MIN_SIZE) -> int:
    """The fewest experiments a step can be tested in."""
    return 2 * min_size


def propose(points: Sequence[Point], min_size: int = MIN_SIZE) -> int | None:
    """The position (first experiment after) of the one step ruptures finds best in
    ``points``, moved to the nearest boundary between experiments with ``min_size``
    experiments a side; None when there are too few experiments."""
    if len(points) < needed(min_size):
        return None
    series = np.concatenate([p.values for p in points])
    bounds = np.cumsum([p.values.size for p in points])  # end of each experiment, in points
    (bkp, _end) = rpt.Binseg(model="l2", min_size=1, jump=1).fit(series).predict(n_bkps=1)
    index = int(np.argmin(np.abs(bounds - bkp))) + 1
    return min(max(index, min_size), len(points) - min_size)


def _max_t(n: np.ndarray, s1: np.ndarray, s2: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """|Welch t| between the boots before and after each split k in lo..hi, for each row (an
    order of the experiments) of the per-experiment counts and sums; shape (rows, splits)."""
    cn, c1, c2 = (np.cumsum(a, axis=-1) for a in (n, s1, s2))
    tn, t1, t2 = cn[..., -1:], c1[..., -1:], c2[..., -1:]
    ks = np.arange(lo, hi + 1) - 1
    nl, sl, ql = cn[..., ks], c1[..., ks], c2[..., ks]
    nr, sr, qr = tn - nl, t1 - sl, t2 - ql
    ml, mr = sl / nl, sr / nr
    with np.errstate(divide="ignore", invalid="ignore"):
        vl = np.maximum(ql - sl * ml, 0.0) / np.maximum(nl - 1, 1)
        vr = np.maximum(qr - sr * mr, 0.0) / np.maximum(nr - 1, 1)
        se = np.sqrt(vl / nl + vr / nr)
        t = np.abs(mr - ml) / np.maximum(se, 1e-300)
    return np.nan_to_num(t, nan=0.0, posinf=1e300)


def test_step(
    points: Sequence[Point],
    index: int,
    *,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> float:
    """The permutation p-value of a step before ``index`` within ``points`` (the experiments
    between its neighbouring steps)."""
    n = np.array([p.values.size for p in points], dtype=float)
    s1 = np.array([p.values.sum() for p in points])
    s2 = np.array([(p.values**2).sum() for p in points])
    lo, hi = min_size, len(points) - min_size
    observed = float(_max_t(n, s1, s2, index, index)[0])
    rng = np.random.default_rng(seed)
    orders = np.argsort(rng.random((permutations, len(points))), axis=1)
    null = _max_t(n[orders], s1[orders], s2[orders], lo, hi).max(axis=1)
    # A tolerance, so a permutation tying the observed order is not lost to rounding.
    return float((1 + np.count_nonzero(null >= observed * (1 - 1e-9))) / (1 + permutations))


def _step(
    points: Sequence[Point], lo: int, hi: int, *, min_size: int, permutations: int, seed: int
) -> Step | None:
    """The best step between experiments ``lo`` and ``hi`` (exclusive), tested; None when
    the stretch is too short for one."""
    part = points[lo:hi]
    at = propose(part, min_size)
    if at is None:
        return None
    p = test_step(part, at, min_size=min_size, permutations=permutations, seed=seed + lo)
    index = lo + at
    before = np.mean([q.values.mean() for q in points[lo:index]])
    after = np.mean([q.values.mean() for q in points[index:hi]])
    return Step(
        index=index,
        before_id=points[index - 1].experiment_id,
        after_id=points[index].experiment_id,
        ratio=float(np.exp(after - before)),
        p_value=p,
    )


def search(
    histories: Mapping[str, Sequence[Point]],
    *,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> dict[str, list[Step]]:
    """Every probe's tested steps, in time order, with their adjusted p-values.

    Hierarchical Benjamini–Hochberg (Yekutieli 2008): the first family is each probe's best
    step over its whole history (does it have a step at all?), adjusted across the probes;
    a step found there (adjusted p < ALPHA) splits its history, and the best steps of the
    stretches before and after it form the next family, adjusted among themselves; and so on
    until no family finds a step. The tested steps that were not found are kept, with their
    p-values, so a reader sees what was looked at."""
    out: dict[str, list[Step]] = {probe: [] for probe in histories}
    families = [[(probe, 0, len(points)) for probe, points in histories.items()]]
    while families:
        tested = []
        for probe, lo, hi in families.pop():
            one = _step(
                histories[probe], lo, hi, min_size=min_size, permutations=permutations, seed=seed
            )
            if one is not None:
                tested.append((probe, lo, hi, one))
        if not tested:
            continue
        adjusted = stats.false_discovery_control([t[3].p_value for t in tested], method="bh")
        children = []
        for (probe, lo, hi, one), p_adj in zip(tested, adjusted, strict=True):
            done = replace(one, p_adjusted=float(p_adj))
            out[probe].append(done)
            if done.found:
                children += [(probe, lo, done.index), (probe, done.index, hi)]
        if children:
            families.append(children)
    return {probe: sorted(found, key=lambda s: s.index) for probe, found in out.items()}
