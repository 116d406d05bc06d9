"""The warm-up test under autocorrelated iterations: its unit is the run, so its false-positive
rate holds at any number of runs. Simulated with AR(1) iterations and no warm-up (the null),
vectorised over 2,000 matrices per case, through the function `vmtax artifacts` and the
report call (`stats.artifacts.warmup_tests`)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vmtax.stats.artifacts import warmup, warmup_tests

pytestmark = pytest.mark.fast

TRIALS = 2000
ITERATIONS = 200


def _ar1(runs: int, seed: int, *, phi: float = 0.9, sd: float = 0.1) -> np.ndarray:
    """Latencies whose logs are AR(1) with coefficient ``phi`` from a stationary start: each
    run independent, iterations inside it strongly autocorrelated, no warm-up."""
    rng = np.random.default_rng(seed)
    e = np.empty((TRIALS, runs, ITERATIONS))
    e[..., 0] = rng.normal(0.0, sd, (TRIALS, runs))
    innov = rng.normal(0.0, sd * np.sqrt(1 - phi * phi), (TRIALS, runs, ITERATIONS))
    for t in range(1, ITERATIONS):
        e[..., t] = phi * e[..., t - 1] + innov[..., t]
    return 100.0 * np.exp(e)


def _upper(alpha: float) -> float:
    """The 99.9% binomial upper bound of the rejection rate of a test of size alpha."""
    return float(stats.binom.ppf(0.999, TRIALS, alpha) / TRIALS)


@pytest.mark.parametrize("runs", [2, 3, 5, 8])
def test_no_warm_up_is_rejected_at_most_alpha_of_the_time_at_any_number_of_runs(runs):
    p = warmup_tests(_ar1(runs, seed=runs))["p"]
    for alpha in (0.05, 0.01):
        assert (p < alpha).mean() <= _upper(alpha), (alpha, (p < alpha).mean())
    # The sign flips give exact p-values, 2^-runs at the smallest: at 5 runs and more the
    # test does reject at 0.05 under the null, as often as it should.
    if 2.0**-runs < 0.05:
        assert (p < 0.05).mean() >= stats.binom.ppf(0.001, TRIALS, 0.03) / TRIALS


def test_the_old_iteration_level_test_fails_the_same_bound():
    # Mann-Whitney over the iterations of 3 runs, as before 6 runs: it counts autocorrelated
    # iterations as independent and finds a warm-up in far more than 1% of null matrices.
    m = _ar1(3, seed=30)[:500]
    first, steady = m[..., :5].reshape(500, -1), m[..., 100:].reshape(500, -1)
    p = stats.mannwhitneyu(first, steady, alternative="greater", axis=-1).pvalue
    assert (p < 0.01).mean() > stats.binom.ppf(0.999, 500, 0.01) / 500


@pytest.mark.parametrize(("runs", "alpha"), [(5, 0.05), (8, 0.01)])
def test_a_planted_warm_up_is_found(runs, alpha):
    m = _ar1(runs, seed=40 + runs, phi=0.5, sd=0.05)
    m[..., :10] *= 1.3  # the first 10 iterations of every run 30% slower
    found = warmup_tests(m)
    assert (found["p"] < alpha).mean() > 0.95
    assert np.median(found["slowdown"]) == pytest.approx(1.3, abs=0.05)


def test_two_runs_can_say_only_that_the_test_cannot_reach_a_small_p():
    m = _ar1(2, seed=50)[0]
    m[:, :10] *= 2.0
    w = warmup(m)
    assert w.p_value == pytest.approx(0.25) and w.min_p == pytest.approx(0.25)
    assert not w.found and w.runs == 2


@pytest.mark.parametrize("runs", [2, 5, 9])
def test_the_sign_flips_are_scipys_exact_permutation_test(runs):
    from vmtax.stats.artifacts import sign_flip_p

    d = np.random.default_rng(runs).normal(0.3, 1.0, (4, runs))
    want = stats.permutation_test(
        (d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
        vectorized=True, axis=-1, alternative="greater", n_resamples=2**runs,
    ).pvalue  # fmt: skip
    assert np.allclose(sign_flip_p(d), want)
