"""The knee detector, response-time rise and SLO check on curves with known shapes. Each
step's values here are replicate means (independent boots); the coverage of the intervals
and the rise test's error rate under autocorrelated windows are in test_sweep_coverage.py."""

from __future__ import annotations

import numpy as np
import pytest

from vmtax.stats.knee import classify_flat, find_knee, response_rise, slo_check
from vmtax.testing.sweeps import study_b

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("shape", "kind", "rise_at"), [("xen", "idle-cpu", 1.5), ("zvm", "saturated", 2.5)]
)
def test_study_b_shapes_knee_within_ci_and_why_flat(shape, kind, rise_at, seed):
    s = study_b(shape, seed=seed)
    fit = find_knee(s.ratios, s.throughput)
    knee = fit.knee
    assert knee is not None and fit.shape in ("knee", "edge"), fit.reason
    if fit.shape == "edge":
        # Xen bends at its second step: one step before it cannot tell a bend at 1.5 from
        # one anywhere above 1.0, so no place is given, only the side of the step.
        assert s.true_knee == s.ratios[1] and knee.ratio is None and knee.edge == "low"
        assert knee.low == s.ratios[0] and "at or below 1.5:1" in fit.reason
    else:
        # z/VM flattens at 2.0 and falls after 2.5: one bend placed between the two.
        assert knee.low <= knee.ratio <= knee.high and abs(knee.ratio - s.true_knee) < 0.15
    # The interval says something: narrower than the sweep.
    assert knee.high - knee.low < (s.ratios[-1] - s.ratios[0]) / 2 + 0.5 * (fit.shape == "edge")
    assert knee.step == s.true_knee  # the knee as a step, as shown beside it
    assert knee.slope_after < 0.2 * knee.slope_before
    flat = classify_flat(knee, s.ratios, s.utilisation)
    assert flat is not None and flat.kind == kind
    first_flat = min(r for r in s.ratios if knee.ratio is None or r >= knee.ratio - 1e-9)
    assert flat.ratios[0] == (knee.step if knee.ratio is None else first_flat)
    rise = response_rise(s.ratios, s.response_s)
    assert rise.ratio == rise_at


def test_zvm_drop_at_the_end_is_a_negative_slope_after_the_knee():
    s = study_b("zvm", seed=5)
    knee = find_knee(s.ratios, s.throughput).knee
    assert knee is not None and knee.slope_after < 0


@pytest.mark.parametrize("true_knee", [1.4, 1.75, 1.9, 2.1])
def test_knee_on_an_uneven_grid_is_found_within_its_ci(true_knee):
    # On the steps (1.75) and between them: the estimate is the breakpoint, not a step.
    rng = np.random.default_rng(7)
    ratios = [1.0, 1.25, 1.75, 2.0, 2.25, 3.0]
    tput = [100 * min(r, true_knee) * (1 + 0.02 * rng.standard_normal(8)) for r in ratios]
    fit = find_knee(ratios, tput)
    knee = fit.knee
    assert fit.shape == "knee" and abs(knee.ratio - true_knee) < 0.05, fit.reason
    # Its interval's coverage is simulated in test_sweep_coverage.py; here, it is narrow.
    assert knee.low <= knee.ratio <= knee.high and knee.high - knee.low < 0.25


@pytest.mark.parametrize(("true_knee", "edge"), [(0.75, "low"), (2.25, "high")])
def test_a_bend_in_the_first_or_last_step_interval_is_given_no_place(true_knee, edge):
    # One step on a side of the bend: a bend at 0.75 fits exactly as one at 1.0 with a
    # steeper rise, so the sweep can say only on which side of the step it is.
    # (Replicates 2% apart around the curve: the step means are the curve itself.)
    ratios = [0.5, 1.0, 1.5, 2.0, 2.5]
    tput = [100 * min(r, true_knee) * np.asarray([0.98, 1.0, 1.02]) for r in ratios]
    fit = find_knee(ratios, tput)
    assert fit.shape == "edge" and fit.knee.ratio is None and fit.knee.edge == edge, fit
    assert fit.knee.low <= true_knee <= fit.knee.high
    if edge == "low":
        assert fit.knee.low == 0.5 and "at or below 1:1" in fit.reason
    else:
        assert fit.knee.high == 2.5 and "at or above 2:1" in fit.reason
    assert fit.knee.as_dict()["ratio"] is None


def test_heavy_noise_widens_the_interval_and_keeps_the_knee_in_it():
    s = study_b("zvm", noise=0.12, samples=4, seed=3)
    knee = find_knee(s.ratios, s.throughput).knee
    assert knee is not None and knee.low <= s.true_knee <= knee.high
    assert knee.high > knee.low  # no longer a single step


def test_linear_scaling_has_no_knee():
    rng = np.random.default_rng(3)
    ratios = [1.0, 1.5, 2.0, 2.5, 3.0]
    fit = find_knee(ratios, [50 * r * (1 + 0.03 * rng.standard_normal(10)) for r in ratios])
    assert fit.knee is None and fit.shape == "scales"


def test_flat_from_the_first_step_has_no_knee():
    rng = np.random.default_rng(4)
    ratios = [1.0, 1.5, 2.0, 2.5]
    fit = find_knee(ratios, [100 * (1 + 0.03 * rng.standard_normal(10)) for _ in ratios])
    assert fit.knee is None and fit.shape in ("flat", "scales")
    assert classify_flat(fit.knee, ratios, [[0.9]] * 4) is None


def test_plateau_then_decline_has_its_knee_where_the_decline_begins():
    # Memory overcommitment of fixed guests: throughput holds, then paging drags it down.
    rng = np.random.default_rng(9)
    ratios = [0.5, 1.0, 1.5, 2.0, 2.5]
    level = [100, 100, 100, 60, 25]
    fit = find_knee(ratios, [v * (1 + 0.03 * rng.standard_normal(6)) for v in level])
    assert fit.shape == "knee" and abs(fit.knee.ratio - 1.5) < 0.1 and fit.knee.step == 1.5
    assert fit.knee.low <= 1.5 <= fit.knee.high and fit.knee.slope_after < 0


def test_too_few_steps_says_so():
    fit = find_knee([1.0, 2.0, 3.0], [[1, 2], [2, 3], [3, 3]])
    assert fit.knee is None and fit.shape == "too-few"


def test_one_replicate_per_step_still_fits_without_an_interval():
    fit = find_knee([0.5, 1.0, 1.5, 2.0, 2.5], [[50], [100], [101], [99], [100]])
    assert fit.knee is not None and fit.knee.low is None and fit.knee.high is None
    assert fit.knee.step == 1.0 and "no interval" in fit.reason


def test_knee_fits_match_statsmodels_weighted_least_squares():
    import statsmodels.api as sm
    from scipy import stats

    from vmtax.stats.knee import fit_knees

    rng = np.random.default_rng(2)
    x = np.tile([0.5, 1.0, 1.5, 2.0, 2.5], 3)
    blocks = np.repeat([0, 1, 2], 5)
    y = 100 * np.minimum(x, 1.2) * (1 + 0.03 * rng.standard_normal(x.size)) + 4 * blocks
    fits = fit_knees(x, y, blocks)
    means = {s: y[x == s].mean() for s in np.unique(x)}
    w = np.asarray([1 / means[v] ** 2 for v in x])
    dummies = np.column_stack([blocks == 1, blocks == 2]).astype(float)

    def hinge(k):
        d = x - k
        design = np.column_stack([np.ones_like(x), np.minimum(d, 0), np.maximum(d, 0), dummies])
        return sm.WLS(y, design, weights=w).fit()

    # The estimate is the least-squares breakpoint: no breakpoint on a fine profile fits better.
    k = float(fits.estimate)
    profile = np.linspace(1.0, 2.0, 1001)
    assert float(fits.sse_hinge) == pytest.approx(hinge(k).ssr)
    assert hinge(k).ssr <= min(hinge(v).ssr for v in profile) + 1e-9
    assert abs(k - 1.2) < 0.05 and k not in (1.0, 1.5)  # between the steps
    # Each breakpoint's test: its hinge against one mean per step (and the rounds), F test.
    step_means = sm.WLS(y, np.column_stack([*(x == s for s in np.unique(x)), dummies]),
                        weights=w).fit()  # fmt: skip
    # Each breakpoint's likelihood-ratio test: how much worse its hinge fits than the best,
    # over the step-means model's variance (halved at the ends of the range, a boundary).
    s2 = step_means.ssr / step_means.df_resid
    for i in (0, 7, 20, 33, 40):
        v = float(fits.grid[i])
        p = stats.f.sf((hinge(v).ssr - hinge(k).ssr) / s2, 1, step_means.df_resid)
        assert fits.p[i] == pytest.approx(p / 2 if v in (1.0, 2.0) else p)
    # The interval runs over the breakpoints the test keeps, to where p crosses 0.05.
    kept = fits.grid[fits.p > 0.05]
    assert fits.low <= kept.min() and fits.high >= kept.max()
    assert fits.high - fits.low <= kept.max() - kept.min() + 2 * (fits.grid[1] - fits.grid[0])


def test_rise_test_is_scipys_paired_t_on_the_log_scale():
    from scipy import stats

    from vmtax.stats.knee import rise_tests

    a = np.asarray([0.10, 0.11, 0.105])
    b = np.asarray([0.13, 0.12, 0.14])
    rise, p = rise_tests(a, b, paired=True)
    want = stats.ttest_rel(np.log(b), np.log(a), alternative="greater").pvalue
    assert p == pytest.approx(want) and rise == pytest.approx(
        np.exp(np.log(b).mean() - np.log(a).mean()) - 1
    )


def test_response_rise_pairs_rounds_and_needs_a_minimum_rise():
    # The rounds drift together (other load): paired by round, a 10% rise stands out of a
    # drift of +-20% between rounds that would swamp an unpaired test.
    drift = np.asarray([0.8, 1.0, 1.2])
    noise = np.asarray([1.0, 1.01, 0.99])
    first, later = 0.1 * drift * noise, 0.11 * drift * noise[::-1]
    blocks = [[0, 1, 2], [0, 1, 2]]
    paired = response_rise([1, 2], [first, later], blocks=blocks)
    assert paired.ratio == 2 and paired.steps[0][2] < 0.05
    assert response_rise([1, 2], [first, later]).ratio is None  # unpaired: Welch's t
    # A small but significant shift below min_rise is not a rise.
    small = response_rise([1, 2], [first, first * 1.02 * noise], blocks=blocks)
    assert small.ratio is None and small.steps[0][2] < 0.05


def test_slo_check_study_e_two_seconds():
    slo = slo_check([1.0, 1.5, 2.0, 2.5], [0.4, 1.2, 1.99, 2.6])
    assert [ok for _, _, ok in slo.steps] == [True, True, True, False]
    assert slo.max_ratio == 2.0 and slo.limit_s == 2.0
    assert slo_check([1.0, 2.0], [3.0, 1.0]).max_ratio is None
    assert slo_check([1.0], [float("nan")]).steps[0][2] is False
