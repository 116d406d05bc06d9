"""The statistics agree with direct scipy calls on the same data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vmtax.stats import intervals, significance
from vmtax.stats.compare import compare
from vmtax.testing.runs import Config, runs_frame

pytestmark = pytest.mark.fast


@pytest.fixture
def two_sides():
    rng = np.random.default_rng(7)
    return rng.normal(100, 3, 10), rng.normal(104, 3, 9)


def test_welch_matches_scipy(two_sides):
    a, b = two_sides
    assert significance.pvalue(a, b, "welch") == stats.ttest_ind(a, b, equal_var=False).pvalue


def test_mannwhitney_matches_scipy(two_sides):
    a, b = two_sides
    assert significance.pvalue(a, b, "mannwhitney") == stats.mannwhitneyu(a, b).pvalue


def test_permutation_matches_scipy(two_sides):
    a, b = two_sides
    direct = stats.permutation_test(
        (a, b),
        lambda x, y, axis: x.mean(axis) - y.mean(axis),
        vectorized=True,
        n_resamples=5000,
        rng=np.random.default_rng(3),
    ).pvalue
    assert significance.pvalue(a, b, "permutation", resamples=5000, seed=3) == direct


def test_small_permutation_is_exact():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    # 20 relabellings, 2 as extreme as the observed one: p = 0.1, and it is the floor.
    assert significance.pvalue(a, b, "permutation") == pytest.approx(0.1)
    assert significance.min_pvalue(3, 3, "permutation") == pytest.approx(0.1)
    assert significance.min_pvalue(3, 3, "mannwhitney") == pytest.approx(0.1)
    assert significance.min_pvalue(3, 3, "welch") == 0.0


def test_holm_and_bh_are_statsmodels_multipletests():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(3)
    for m in (1, 2, 7, 40):
        p = rng.uniform(size=m) ** 3
        assert np.allclose(significance.holm(p), multipletests(p, method="holm")[1])
        assert np.allclose(significance.adjust(p, "bh"), multipletests(p, method="fdr_bh")[1])


def test_bh_is_scipy_and_holm_is_step_down():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    adj = significance.adjust(p, "bh")
    assert np.allclose(adj[:4], stats.false_discovery_control(p[:4]))
    assert math.isnan(adj[4])
    # Holm by hand: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, then running max.
    expected = {3: 0.02, 0: 0.03, 2: 0.06, 1: 0.06}
    holm = significance.adjust(p, "holm")
    for i, v in expected.items():
        assert holm[i] == pytest.approx(v)
    assert significance.adjust(p, "none")[1] == 0.04


def _welch_reference(cfg: np.ndarray, base: np.ndarray) -> tuple[float, float]:
    # Scaling each side by its own mean makes scipy's Welch interval of the difference the
    # delta-method interval of the log-ratio: the same standard error and the same degrees of
    # freedom. Its half-width is the log-scale half-width of vmtax's interval.
    res = stats.ttest_ind(cfg / cfg.mean(), base / base.mean(), equal_var=False)
    ci = res.confidence_interval(0.95)
    half = (ci.high - ci.low) / 2
    centre = math.log(cfg.mean() / base.mean())
    return math.exp(centre - half), math.exp(centre + half)


def test_ratio_interval_is_scipys_welch_interval_on_the_log_scale(two_sides):
    a, b = two_sides
    res = intervals.ratio_interval(a, b, "lower")
    assert res.estimate == pytest.approx(a.mean() / b.mean())
    assert (res.low, res.high) == pytest.approx(_welch_reference(a, b), rel=1e-12)


def test_higher_is_better_is_inverted(two_sides):
    a, b = two_sides
    lower = intervals.ratio_interval(a, b, "lower")
    higher = intervals.ratio_interval(b, a, "higher")
    assert (higher.estimate, higher.low, higher.high) == pytest.approx(
        (lower.estimate, lower.low, lower.high), rel=1e-12
    )


def test_a_ratio_interval_is_positive_or_absent():
    # The report's case: a ratio whose old interval reached below zero, [-3.46, 40.16].
    cfg = np.array([1.0, 2.0, 60.0, 3.0, 1.5])
    base = np.array([1.0, 1.1, 0.9, 1.05, 0.95])
    res = intervals.ratio_interval(cfg, base, "lower")
    assert 0 < res.low < res.estimate < res.high
    assert math.isnan(intervals.ratio_interval(np.array([-1.0, 1.0]), base, "lower").low)
    assert math.isnan(intervals.ratio_interval(cfg[:1], base, "lower").low)


def test_geomean_of_one_ratio_is_that_ratio(two_sides):
    a, b = two_sides
    one = intervals.ratio_interval(a, b, "lower")
    geo = intervals.geomean_interval([one])
    assert (geo.estimate, geo.low, geo.high) == pytest.approx((one.estimate, one.low, one.high))


def test_compare_uses_the_same_scipy_numbers():
    runs, _ = runs_frame(
        [Config("L0"), Config("L1", {"accel": "tcg"}, 1.03)], runs=8, iterations=200, seed=2
    )
    base = runs[runs.level == "L0"]["mean"].to_numpy()
    cfg = runs[runs.level == "L1"]["mean"].to_numpy()
    for test, direct in (
        ("welch", stats.ttest_ind(cfg, base, equal_var=False).pvalue),
        ("mannwhitney", stats.mannwhitneyu(cfg, base).pvalue),
    ):
        comp = compare(runs, "level=L0", test=test, adjust="none", resamples=2000)
        row = comp.rows[comp.rows.level == "L1"].iloc[0]
        assert row.p_value == pytest.approx(direct)
    comp = compare(runs, "level=L0", resamples=2000, seed=4)
    row = comp.rows[comp.rows.level == "L1"].iloc[0]
    assert (row.ci_low, row.ci_high) == pytest.approx(_welch_reference(cfg, base), rel=1e-12)


def test_the_behrens_fisher_p_value_holds_in_the_far_tail():
    """The boot-level p-value for unequal boots a side: its integration grid left out T1's
    far tails and gave half the tail probability (and 0 at the extreme); against a Monte
    Carlo of the same distribution, in the middle and far in the tail."""
    from vmtax.stats.intervals import behrens_fisher_p

    rng = np.random.default_rng(11)
    n = 4_000_000
    draws = np.sqrt(0.5) * rng.standard_t(7, n) + np.sqrt(0.5) * rng.standard_t(7, n)
    for t in (2.0, 6.0):
        mc = 2 * np.mean(draws > t)
        assert behrens_fisher_p(t, 0.5, 7, 7) == pytest.approx(mc, rel=0.1), t
    assert behrens_fisher_p(40.0, 0.5, 7, 1) > 0
