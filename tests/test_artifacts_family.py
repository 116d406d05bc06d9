"""Artifact findings across a command: one family, Holm (family-wise), and words that say what
each test found: never a rejected test as an absence, nor a small one as a change."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vmtax.report.words import finding
from vmtax.stats.artifacts import ALPHA, control_family, detect, family_resamples, warmup

FAMILY = 24  # (probe, config) pairs of a two-level quick report: 12 probes x 2 levels
TRIALS = 20


def _null_report(seed: int) -> list:
    # Heavy-tailed noise (Student t, 3 df) without any artifact: it has random far-out
    # spikes, so the period and cross-run tests run too (72 tests a report, not 48).
    rng = np.random.default_rng(seed)

    def noise() -> np.ndarray:
        return 100 + 5 * rng.standard_t(3, (12, 400))

    base = noise()
    return [detect(noise(), base, resamples=199, seed=seed + i) for i in range(FAMILY)]


def _raw_p(results: list) -> list[float]:
    return [
        part.p_value
        for a in results
        for part in (a.periodic, a.cross_run, a.warmup, a.shape)
        if part.p_value is not None
    ]


@pytest.mark.slow
def test_a_null_report_rarely_finds_anything_once_the_family_is_adjusted():
    adjusted_any = unadjusted_any = 0
    for trial in range(TRIALS):
        results = _null_report(1000 * trial)
        unadjusted_any += min(_raw_p(results)) < ALPHA  # one test at a time, as before
        control_family(results)
        adjusted_any += any(a.found() and set(a.found()) - {"bimodal"} for a in results)
    # Under the null, a family-wise error rate of 1% is at most a 1% chance of any finding
    # per report: 3 or more of 20 has probability 0.001. Tested one at a time, about a
    # quarter of these reports had a false finding (the tests are conservative here; with
    # exact p-values, 72 tests at 1% give one in a report of two more often than not).
    assert adjusted_any <= 2
    assert stats.binom.sf(2, TRIALS, ALPHA) < 0.002
    assert unadjusted_any >= 3


@pytest.mark.slow
def test_a_real_period_survives_a_family_of_a_hundred():
    m = np.random.default_rng(3).lognormal(np.log(100), 0.05, (8, 2000))
    m[:, 24::25] *= 2.0
    planted = detect(m, resamples=family_resamples(4 * FAMILY))
    others = _null_report(77)
    control_family([planted, *others])
    assert planted.periodic.found and planted.periodic.period == 25
    assert planted.periodic.p_adjusted < ALPHA


@pytest.mark.fast
def test_a_slow_start_with_a_rejecting_test_is_never_worded_as_absent():
    # The first few iterations 4% slower in every run: the test over runs rejects, though no
    # single iteration stands above three times the noise (once worded "No leftover warm-up
    # (p = 4.56e-10)").
    rng = np.random.default_rng(8)
    m = rng.lognormal(np.log(100), 0.05, (10, 400))
    m[:, :12] *= 1.04
    w = warmup(m)
    assert w.p_value < ALPHA and w.stretch == 0
    assert w.found and w.n_slow == w.window > 0
    words = finding("syscall", "L1", detect(m))
    assert not any("warm-up" in line.lower() and "not detected" in line for line in words.clear)
    assert any(line.startswith("Warm-up not over") for line in words.found)


@pytest.mark.fast
def test_non_findings_say_not_detected_with_their_p():
    m = np.random.default_rng(5).lognormal(np.log(100), 0.05, (6, 500))
    words = finding("syscall", "L1", detect(m, m * 1.0))
    assert words.found == []
    for line in words.clear:
        assert not line.startswith(("No ", "Same ")), line
    assert any("not detected (p = " in line for line in words.clear)


@pytest.mark.slow
def test_a_clear_period_stops_at_the_look_with_the_full_tests_verdict():
    from vmtax.stats.artifacts import TAIL_BOUND_P, early_look

    # Every 25th iteration slow in 3 cycles of 10: clear to the shuffles, but not so far
    # beyond them that its tail bound decides it without any (test_artifacts_tail_bound.py).
    rng = np.random.default_rng(3)
    m = rng.lognormal(np.log(100), 0.05, (8, 2000))
    m[:, 24::25] *= np.where(rng.random((8, 80)) < 0.3, 2.0, 1.0)
    family = 4 * 6  # a report of 6 (probe, config) pairs
    resamples = family_resamples(family)
    look = early_look(family, resamples)
    assert look is not None and look <= resamples // 2
    early = detect(m, family=family)  # the family is known: the tests may stop at the look
    full = detect(m, resamples=resamples)  # it is not: every resample is drawn
    assert early.periodic.p_value == 1 / (look + 1) + TAIL_BOUND_P
    assert full.periodic.p_value == pytest.approx(1 / (resamples + 1))
    others = _null_report(78)[: 6 - 1]
    for planted in (early, full):
        control_family([planted, *others])
        assert planted.periodic.found and planted.periodic.period == 25


@pytest.mark.fast
def test_the_family_is_holms():
    from statsmodels.stats.multitest import multipletests

    results = _null_report(5)[:6]
    raw = _raw_p(results)
    assert control_family(results) == len(raw)
    adjusted = [
        part.p_adjusted
        for a in results
        for part in (a.periodic, a.cross_run, a.warmup, a.shape)
        if part.p_value is not None
    ]
    assert np.allclose(adjusted, multipletests(raw, method="holm")[1])


@pytest.mark.fast
def test_a_small_shape_difference_is_worded_as_detected_but_small():
    # A skewed distribution (gamma, shape 3) against a normal one: KS rejects, but the
    # standardised distributions differ by under 0.1 (0.08).
    rng = np.random.default_rng(6)
    base = rng.normal(100, 5, (6, 2000))
    other = 100 + 5 * rng.gamma(3, 1, base.shape)
    art = detect(other, base)
    assert art.shape.p_adjusted < ALPHA and art.shape.distance < 0.1
    assert art.shape.small and not art.shape.changed and "shape" not in art.found()
    words = finding("syscall", "L1", art)
    line = next(w for w in words.clear if w.startswith("A change of distribution shape"))
    assert "detected but small" in line and "not detected" not in line


@pytest.mark.fast
def test_two_runs_say_the_warm_up_test_cannot_reach_a_small_p():
    m = np.random.default_rng(9).lognormal(np.log(100), 0.05, (2, 400))
    m[:, :10] *= 2.0
    words = finding("syscall", "L1", detect(m))
    line = next(w for w in words.clear if w.startswith("Leftover warm-up"))
    assert "with 2 runs the sign-flip test over runs cannot give a p below 0.25" in line


@pytest.mark.fast
def test_a_familys_size_counts_the_tests_that_can_give_a_p_and_the_period_test_exactly():
    """A report sizes its resamples and early look by the tests that can give a p-value (a
    period test gives one only where its search found a peak); Holm then adjusts over those
    that did. The count must never be below Holm's (the look would fall above the smallest
    threshold) and is exact for the period test."""
    from vmtax.stats.artifacts import tests_with_p

    rng = np.random.default_rng(11)
    periodic = rng.lognormal(np.log(100), 0.05, (6, 2000))
    periodic[:, 24::25] *= 2.0
    cases = [
        (periodic, None),
        (periodic, rng.lognormal(np.log(100), 0.05, (6, 2000))),
        (100 + 5 * rng.standard_t(3, (12, 400)), 100 + 5 * rng.standard_t(3, (12, 400))),
        (rng.lognormal(np.log(100), 0.05, (5, 300)), None),  # spikes, but no period
        (np.full((4, 50), 100.0), None),  # no spikes: no period or cross-run test
        (rng.normal(100, 1, (1, 400)), None),  # one run: only the period test could
        (rng.normal(100, 1, (3, 12)), np.ones((2, 12))),  # too short for the warm-up test
    ]
    counted = []
    for m, b in cases:
        got = detect(m, b, resamples=199)
        counted.append(tests_with_p(m, b))
        # Exact here: none of these has a test whose conditions hold and whose p is not finite.
        assert counted[-1] == len(_raw_p([got])), (m.shape, counted[-1], _raw_p([got]))
    assert counted[:2] == [3, 4] and counted[4] == 1 and counted[3] < 4, counted
