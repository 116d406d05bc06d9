"""scipy's numbers without scipy.optimize and scipy.integrate: vmtax.stats.brent finds the
roots scipy.optimize.brentq finds, bit for bit, and the Behrens–Fisher quantiles built on them
are the ones computed with scipy's own functions; the far tail's fixed Gauss–Legendre rule
gives scipy.integrate.quad's integral to 1e-11 relative, which 16 or 48 nodes miss."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import integrate, optimize, special

from vmtax.stats import brent, dist, intervals

pytestmark = pytest.mark.fast

#: Degrees of freedom and weights of Behrens–Fisher tables compare builds: boots minus one
#: against runs minus one, and the other way round.
PAIRS = [(1, 5), (2, 3), (2, 30), (4, 1), (9, 9)]


def test_brentq_is_scipys_on_the_behrens_fisher_table():
    q = 0.975
    for df1, df2 in PAIRS:
        hi = 1.5 * float(dist.t_ppf(q, min(df1, df2))) + 1.0
        for w in intervals._BF_WEIGHTS[1:-1:3]:
            args = (w, df1, df2, q)
            want = optimize.brentq(intervals._bf_gap, 0.0, hi, args=args)
            got = brent.brentq(lambda x, a=args: intervals._bf_gap(x, *a), 0.0, hi)
            assert got == want, (df1, df2, w)


def test_brentq_is_scipys_on_other_functions():
    for f, a, b in (
        (math.cos, 0.0, 3.0),
        (lambda x: x**3 - 2.0, 0.0, 2.0),
        (lambda x: math.exp(x) - 5.0, -3.0, 4.0),
        (lambda x: x - 1e-9, 0.0, 1.0),
        (lambda x: x, 0.0, 1.0),  # a root at an end
    ):
        assert brent.brentq(f, a, b) == optimize.brentq(f, a, b)
    with pytest.raises(ValueError, match="different signs"):
        brent.brentq(lambda x: x * x + 1.0, -1.0, 1.0)


#: Where the far tail is checked: T1 and T2 with heavy tails (1, 2, 3 degrees of freedom) and
#: nearly normal ones (200), weights near both ends and between.
TAIL_X = (0.5, 3.0, 12.0, 60.0)
TAIL_W = (1e-4, 0.05, 0.5, 0.95, 0.9999)
TAIL_DF = (1, 2, 3, 200)
#: Relative error to scipy.integrate.quad wherever the probability is above 1e-15.
TAIL_RTOL = 1e-11


def _quad_tail(x: float, w: float, df1: int, df2: int) -> float:
    """P(sqrt(w)·T1 + sqrt(1 − w)·T2 > x) by scipy.integrate.quad, over the density of the
    term with the smaller weight (the other's tail then changes slowly), in pieces split at
    the density's mode and where the tail is 1/2, with no absolute tolerance."""
    a, b = math.sqrt(w), math.sqrt(1 - w)
    if a > b:
        a, b, df1, df2 = b, a, df2, df1
    t0 = x / a
    # t's density and sf, as scalars: scipy.stats.t's formulas, without its array handling
    head = math.lgamma((df1 + 1) / 2) - math.lgamma(df1 / 2) - 0.5 * math.log(df1 * math.pi)

    def tail(t: float) -> float:
        pdf = math.exp(head - (df1 + 1) / 2 * math.log1p(t * t / df1))
        return pdf * special.stdtr(df2, (a * t - x) / b)

    edges = [-np.inf, *sorted({0.0, a * x, t0 / 2, t0, 2 * t0}), np.inf]
    total = 0.0
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        total += integrate.quad(
            tail,
            low,
            high,
            epsabs=0.0,
            epsrel=1e-13,
            limit=1000,
        )[0]
    return total


@pytest.fixture(scope="module")
def tail_cases() -> list[tuple[tuple[float, float, int, int], float]]:
    grid = itertools.product(TAIL_X, TAIL_W, TAIL_DF, TAIL_DF)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quad's IntegrationWarning about its last digits
        cases = [(case, _quad_tail(*case)) for case in grid]
    return [(case, want) for case, want in cases if want > 1e-15]


def _worst_error(cases: list[tuple[tuple[float, float, int, int], float]]) -> float:
    return max(abs(intervals.behrens_fisher_sf(*case) - want) / want for case, want in cases)


def test_the_far_tail_is_scipys_quadrature(tail_cases):
    assert len(tail_cases) > 300
    assert _worst_error(tail_cases) < TAIL_RTOL


@pytest.mark.parametrize("nodes", [16, 48])
def test_fewer_nodes_miss_the_far_tail(tail_cases, monkeypatch: pytest.MonkeyPatch, nodes: int):
    monkeypatch.setattr(intervals, "_BF_TAIL_NODES", nodes)
    assert _worst_error(tail_cases) > 1e-9


def _scipy_table(df1: int, df2: int, confidence: float) -> np.ndarray:
    """The table as it was built with scipy.optimize."""
    q = 0.5 + confidence / 2
    out = np.empty(intervals._BF_WEIGHTS.size)
    for i, w in enumerate(intervals._BF_WEIGHTS):
        if w in (0.0, 1.0):
            out[i] = dist.t_ppf(q, df1 if w else df2)
        else:
            hi = 1.5 * float(dist.t_ppf(q, min(df1, df2))) + 1.0
            out[i] = optimize.brentq(intervals._bf_gap, 0.0, hi, args=(w, df1, df2, q))
    return out


def test_the_quantiles_are_those_of_the_whole_table():
    """Only the entries np.interp reads are computed, and they give its numbers."""
    rng = np.random.default_rng(5)
    weights = np.concatenate(
        [rng.uniform(size=40), intervals._BF_WEIGHTS, [-0.5, 1.5, np.nan, 0.0, 1.0, 0.5]]
    )
    for df1, df2 in PAIRS[:2]:
        table = _scipy_table(df1, df2, 0.95)
        assert np.array_equal(intervals._bf_table(df1, df2, 0.95), table)
        for w in weights:
            intervals._bf_entry.cache_clear()
            got = intervals.behrens_fisher_quantile(w, df1, df2)
            want = np.interp(w, intervals._BF_WEIGHTS, table)
            assert got == want or (np.isnan(got) and np.isnan(want)), w
        intervals._bf_entry.cache_clear()
        got = intervals.behrens_fisher_quantile(weights, df1, df2)
        assert np.array_equal(got, np.interp(weights, intervals._BF_WEIGHTS, table), equal_nan=True)


def test_a_quantile_computes_two_entries():
    intervals._bf_entry.cache_clear()
    intervals.behrens_fisher_quantile(0.33, 3, 7)
    assert intervals._bf_entry.cache_info().currsize == 2
