"""The period test's tail bound (``stats.artifacts._period_tail_bound``): a period far beyond
what shuffles reach is decided without drawing any. The bound is the pair bound of the
statistic (tests/test_artifacts.py holds it above every shuffle's), a bound per lag of the
chance that the pairs reach a count (checked here against the exact distribution of every
arrangement), and a union over the lags."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vmtax.cli.artifacts_cmd import evidence_rows
from vmtax.report.words import finding
from vmtax.stats import artifacts
from vmtax.stats.artifacts import (
    TAIL_BOUND_P,
    _pair_acf,
    _pair_count_mean,
    _pair_count_tail,
    _pairs_needed,
    _period_search,
    _period_tail_bound,
    _shuffled_ones,
    detect,
    family_resamples,
    tukey,
)

pytestmark = pytest.mark.fast


def _exact_pair_counts(n: int, ones: tuple[int, ...], lag: int) -> np.ndarray:
    """P(C = c) for c = 0, 1, ...: C the pairs of ones ``lag`` apart summed over runs, each
    run's ones at every arrangement with equal chance (what a within-run shuffle draws)."""
    total = np.array([1.0])
    for k in ones:
        if k == 0:
            continue  # one arrangement, with no pair
        places = np.array(list(itertools.combinations(range(n), k)), dtype=np.intp)
        row = np.zeros((len(places), n), dtype=bool)
        np.put_along_axis(row, places, True, axis=1)
        counts = (row[:, :-lag] & row[:, lag:]).sum(axis=1)
        total = np.convolve(total, np.bincount(counts) / len(places))
    return total


@pytest.mark.parametrize("ones", [(4, 4, 4, 4), (2, 5, 3), (3,) * 6, (5, 1, 0)])
@pytest.mark.parametrize("n", [24, 32])
def test_each_lags_bound_is_never_below_the_exact_chance_of_its_pairs(n, ones):
    seen_below_one = False
    for lag in (2, 3, n // 4):
        exact = _exact_pair_counts(n, ones, lag)
        counts = np.arange(exact.size)
        mean = _pair_count_mean(np.array(ones), n, np.array([lag]))
        assert mean[0] == pytest.approx(float((counts * exact).sum()), rel=1e-12)
        need = np.arange(exact.size + 2, dtype=np.float64)
        bound = _pair_count_tail(need, np.broadcast_to(mean, need.shape))
        tail = np.append(exact[::-1].cumsum()[::-1], [0.0, 0.0])  # P(C >= c)
        assert (bound >= tail - 1e-12).all(), (lag, bound, tail)
        # Where it can decide (below 1), it is a bound and not a certainty of 1.
        seen_below_one |= bool(((bound < 1) & (tail > 0)).any())
    assert seen_below_one or max(ones) < 2


@pytest.mark.parametrize("share", [0.3, 1.0])
def test_an_arrangement_whose_statistic_reaches_a_value_has_the_pairs_it_needs(share):
    # Every shuffle, at the lag of its largest autocorrelation, and the data's own onsets:
    # their statistic there is the value asked for, so their pairs there are at least what
    # _pairs_needed says that value needs.
    spikes, _ = tukey(_planted(share), k=3.0)
    search = _period_search(spikes)
    ind, n, max_lag = search.ind, search.ind.shape[1], search.max_lag
    ones = ind.sum(axis=1)
    drawn = _shuffled_ones(ones, n, 300, np.random.default_rng(4), 300)
    rows = [np.vstack([np.flatnonzero(ind[r]), drawn[r]]) for r in range(len(ones))]
    acf = _pair_acf(rows, n, search.mean, search.weights, max_lag)[:, 2:]
    at = acf.argmax(axis=1)
    for row, lag in enumerate(at):
        arrangement = np.zeros_like(ind)
        for run, places in enumerate(rows):
            arrangement[run, places[row]] = True
        pairs = int((arrangement[:, : -(lag + 2)] & arrangement[:, lag + 2 :]).sum())
        needed = _pairs_needed(search, float(acf[row, lag]))[lag]
        assert pairs >= needed - 1e-9, (row, lag + 2, pairs, needed)


def _planted(share: float, seed: int = 3) -> np.ndarray:
    """8 runs of 2,000 iterations; every 25th twice as slow in ``share`` of the runs' cycles."""
    rng = np.random.default_rng(seed)
    m = rng.lognormal(np.log(100), 0.05, (8, 2000))
    cycles = np.arange(24, 2000, 25)
    hit = rng.random((8, cycles.size)) < share
    for run in range(8):
        m[run, cycles[hit[run]]] *= 2.0
    return m


def _bound_of(m: np.ndarray) -> float:
    spikes, _ = tukey(m, k=3.0)
    search = _period_search(spikes)
    assert search.testable
    return _period_tail_bound(search, search.stat - artifacts.TIE_SINGLE - artifacts.TIE)


def test_a_period_beyond_the_shuffles_reach_is_decided_without_one(monkeypatch):
    m = _planted(share=1.0)
    assert _bound_of(m) < 1e-100
    family = 4 * 24
    full = detect(m, resamples=2000)  # no family given: every shuffle is drawn

    def no_shuffle(*_args, **_kwargs):
        raise AssertionError("a shuffle was drawn")

    monkeypatch.setattr(artifacts, "_shuffled_ones", no_shuffle)
    monkeypatch.setattr(artifacts, "_shuffles", no_shuffle)
    early = detect(m, family=family)
    assert early.periodic.p_value == TAIL_BOUND_P and early.periodic.bounded
    assert not full.periodic.bounded
    for result in (early, full):
        assert result.periodic.found and result.periodic.period == 25
    # Said as a bound wherever it is shown: the report's words and `vmtax artifacts`.
    (said,) = [w for w in finding("syscall", "L1", early).found if w.startswith("Periodic")]
    assert "p ≤ 1e-12 by its tail bound" in said, said
    (row,) = [r for r in evidence_rows("L1", "syscall", early) if r["artifact"] == "periodic"]
    assert "p≤1e-12 by its tail bound" in row["evidence"], row
    (said,) = [w for w in finding("syscall", "L1", full).found if w.startswith("Periodic")]
    assert "p = " in said and "tail bound" not in said, said


def test_a_period_the_bound_cannot_decide_is_shuffled_and_pays_for_the_bound():
    # 3 cycles in 10 slow: a clear period to the shuffles, and a bound of about 5e-9.
    m = _planted(share=0.3)
    assert TAIL_BOUND_P < _bound_of(m) < 1e-3
    family = 4 * 6
    look = artifacts.early_look(family, family_resamples(family))
    early = detect(m, family=family)
    assert early.periodic.found and early.periodic.period == 25
    assert early.periodic.p_value == 1 / (look + 1) + TAIL_BOUND_P
    # Without a family nothing stops early, so nothing is paid.
    alone = detect(m, resamples=2000)
    assert alone.periodic.p_value == pytest.approx(1 / 2001, rel=1e-15)


def test_the_bound_falls_as_the_statistic_rises():
    spikes, _ = tukey(_planted(share=0.5), k=3.0)
    search = _period_search(spikes)
    stats = np.linspace(0.05, 1.0, 20)
    bounds = [_period_tail_bound(search, s) for s in stats]
    assert all(a >= b for a, b in zip(bounds, bounds[1:], strict=False))
    assert bounds[0] >= 1 and bounds[-1] < TAIL_BOUND_P


def test_under_the_null_the_bound_never_decides():
    # Random spikes without a period, in runs of many shapes: whatever peak the search finds
    # to test, the bound at it stays far above TAIL_BOUND_P (it is at least the chance that a
    # shuffle reaches the peak, which a null's own peak reaches often). A bound that decided
    # here would decide for noise.
    # Short runs with few spikes: there a null's autocorrelation often has a peak of 0.25 or
    # more, the least the period test tests (in long runs it almost never has).
    rng = np.random.default_rng(21)
    tested = []
    for _ in range(800):
        runs, n = int(rng.integers(1, 5)), int(rng.choice([16, 32, 64, 128, 400]))
        slow = rng.random((runs, n)) < rng.choice([0.05, 0.1, 0.3])
        search = _period_search(slow)
        if search.testable:
            tested.append(_period_tail_bound(search, search.stat))
    assert len(tested) >= 40
    assert min(tested) > 1e-3, sorted(tested)[:5]
