"""The permutation tests' p-value with its two early stops is a valid p-value: under the
null, P(p <= x) <= x, at the look's own p and above it.

The null is simulated directly (the data's statistic and the draws are i.i.d. uniform, so
exchangeable), which is what a permutation test's statistics are under its null.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vmtax.stats.artifacts import ALPHA, early_look, family_resamples, monte_carlo_p

pytestmark = pytest.mark.fast

TRIALS = 20_000
LOOK, RESAMPLES = 20, 400  # the look's p is 1/21: large enough to count its rejections


def _null_pvalues(*, look: int | None, penalty: bool = True) -> np.ndarray:
    rng = np.random.default_rng(2024)
    out = np.empty(TRIALS)
    for t in range(TRIALS):
        stat = rng.random()
        out[t] = monte_carlo_p(
            stat, lambda b: rng.random(b), resamples=RESAMPLES, chunk=100, look=look
        )
    if not penalty and look is not None:
        # What the p would be without the union bound: the full test's, after the look.
        out = np.where(out == 1 / (look + 1), out, out - 1 / (look + 1))
    return out


def _upper(x: float) -> int:
    """The most rejections a valid p allows at level x over TRIALS, at 0.1% one-sided."""
    return int(stats.binom.ppf(0.999, TRIALS, x))


@pytest.fixture(scope="module")
def with_look() -> np.ndarray:
    return _null_pvalues(look=LOOK)


@pytest.mark.parametrize("x", [1 / (LOOK + 1), 0.06, 0.1, 0.25])
def test_the_p_value_with_a_look_is_valid(with_look, x):
    assert (with_look <= x + 1e-12).sum() <= _upper(x)


def test_the_look_stops_exactly_where_nothing_matched(with_look):
    stopped = np.isclose(with_look, 1 / (LOOK + 1)).sum()
    # P(no draw of the first LOOK beats the data) = 1/(LOOK+1) under the null.
    assert stats.binomtest(int(stopped), TRIALS, 1 / (LOOK + 1)).pvalue > 1e-3


def test_without_the_union_bound_the_look_inflates_the_rejections():
    # The test above can fail: dropping the 1/(look+1) a test pays for going on gives about
    # 35% too many p-values at or below the look's.
    x = 1 / (LOOK + 1)
    naive = _null_pvalues(look=LOOK, penalty=False)
    assert (naive <= x + 1e-12).sum() > _upper(x)


@pytest.fixture(scope="module")
def sequential_only() -> np.ndarray:
    return _null_pvalues(look=None)


@pytest.mark.parametrize("x", [0.03, 0.06, 0.1, 0.25, 0.5])
def test_the_sequential_stop_alone_is_valid(sequential_only, x):
    # Taking Besag and Clifford's h / L at the end of a batch of 100 draws, not at the h-th
    # match, gave 1,322 p-values <= 0.06 of 20,000 (the bound is 1,305).
    assert (sequential_only <= x + 1e-12).sum() <= _upper(x)


def test_without_a_look_it_is_the_sequential_test():
    rng = np.random.default_rng(5)
    p = monte_carlo_p(0.999999, lambda b: rng.random(b), resamples=RESAMPLES, chunk=50)
    assert p == pytest.approx(1 / (RESAMPLES + 1), abs=2 / (RESAMPLES + 1))
    p = monte_carlo_p(0.5, lambda b: rng.random(b), resamples=RESAMPLES, chunk=50)
    assert p > 0.2  # stopped after SEQUENTIAL_EXCEED matches, at about 0.5


def test_the_look_is_below_the_familys_smallest_threshold_or_absent():
    for tests in (4, 24, 48, 96, 400):
        resamples = family_resamples(tests)
        look = early_look(tests, resamples)
        if look is not None:
            assert 1 / (look + 1) < ALPHA / tests / 1.9 and look <= resamples // 2
    # A family of a hundred (a report of two levels) has one; capped resamples leave a family
    # of four hundred no room for it.
    assert early_look(96, family_resamples(96)) == 19_200
    assert early_look(400, family_resamples(400)) is None
