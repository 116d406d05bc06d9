"""The statistics agree with direct scipy calls on the same data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vmtax.stats import bootstrap, significance
from vmtax.stats.compare import compare
from vmtax.stats.synthetic import Config, runs_frame


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


def test_run_bootstrap_matches_scipy(two_sides):
    a, b = two_sides
    res = bootstrap.run_bootstrap(a, b, "lower", resamples=10_000, seed=11)
    direct = stats.bootstrap(
        (a, b),
        lambda x, y, axis: x.mean(axis) / y.mean(axis),
        vectorized=True,
        n_resamples=10_000,
        method="percentile",
        rng=np.random.default_rng(11),
    ).confidence_interval
    assert (res.low, res.high) == (direct.low, direct.high)
    assert res.estimate == pytest.approx(a.mean() / b.mean())


def test_higher_is_better_is_inverted(two_sides):
    a, b = two_sides
    lower = bootstrap.run_bootstrap(a, b, "lower", seed=1)
    higher = bootstrap.run_bootstrap(b, a, "higher", seed=1)
    assert higher.estimate == pytest.approx(lower.estimate)


def test_hierarchical_clt_path_matches_exact_resampling():
    rng = np.random.default_rng(5)
    cfg = [rng.lognormal(np.log(110), 0.1, 400) * rng.normal(1, 0.02) for _ in range(8)]
    base = [rng.lognormal(np.log(100), 0.1, 400) * rng.normal(1, 0.02) for _ in range(8)]
    clt = bootstrap.hierarchical_bootstrap(cfg, base, "lower", resamples=4000, seed=1)
    old = bootstrap.EXACT_BUDGET
    bootstrap.EXACT_BUDGET = 10**9
    try:
        exact = bootstrap.hierarchical_bootstrap(cfg, base, "lower", resamples=4000, seed=1)
    finally:
        bootstrap.EXACT_BUDGET = old
    assert clt.estimate == exact.estimate
    width = exact.high - exact.low
    assert abs(clt.low - exact.low) < 0.1 * width
    assert abs(clt.high - exact.high) < 0.1 * width


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
        comp = compare(runs, None, "level=L0", test=test, adjust="none", resamples=2000)
        row = comp.rows[comp.rows.level == "L1"].iloc[0]
        assert row.p_value == pytest.approx(direct)
    comp = compare(runs, None, "level=L0", resamples=2000, seed=4)
    row = comp.rows[comp.rows.level == "L1"].iloc[0]
    ci = stats.bootstrap(
        (cfg, base),
        lambda x, y, axis: x.mean(axis) / y.mean(axis),
        vectorized=True,
        n_resamples=2000,
        method="percentile",
        rng=np.random.default_rng(4),
    ).confidence_interval
    assert (row.ci_low, row.ci_high) == (ci.low, ci.high)
