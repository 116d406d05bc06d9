"""Coverage of the sequential design, by simulation: over many synthetic experiments with a
known mean, the 95% interval stated when the sampling stops must cover the mean 93-97% of the
time. Run means here are normal, skewed (lognormal) and heavy-tailed (Student t, 3 degrees of
freedom), with spreads that make the design stop after a few dozen runs, as on a real machine.
Deterministic (seeded) and fast: every experiment plays `design.sequential_run`, the function
the adaptive loop itself uses to decide."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vmtax.sampling import design
from vmtax.stats.describe import mean_interval

pytestmark = pytest.mark.fast

TARGET = 0.03
EXPERIMENTS = 2000
MAX_RUNS = 200


def _normal(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    return 1000.0 * (1 + 0.05 * rng.standard_normal(size)), 1000.0


def _lognormal(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    # Right-skewed like a latency: a run slowed down is slower by a factor, never faster.
    sigma = 0.1
    return 11_000.0 * rng.lognormal(0.0, sigma, size), 11_000.0 * np.exp(sigma**2 / 2)


def _heavy(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, float]:
    return 500.0 * (1 + 0.03 * rng.standard_t(3, size)), 500.0


@pytest.mark.parametrize("family", [_normal, _lognormal, _heavy], ids=["normal", "lognormal", "t3"])
def test_stated_interval_covers_the_mean_93_to_97_percent(family) -> None:
    rng = np.random.default_rng(16)
    streams, true_mean = family(rng, (EXPERIMENTS, MAX_RUNS))
    covered = stopped_early = 0
    runs = []
    for stream in streams:
        last = design.sequential_run(stream, TARGET, min_runs=5, max_runs=MAX_RUNS)
        covered += abs(last.mean - true_mean) <= last.half_width * abs(last.mean)
        stopped_early += last.precise
        runs.append(last.n)
    coverage = covered / EXPERIMENTS
    assert 0.93 <= coverage <= 0.97, (coverage, np.median(runs))
    # The design did stop on its own (this is a test of the sequential rule, not of n=200).
    assert stopped_early / EXPERIMENTS > 0.99
    assert 10 <= np.median(runs) < MAX_RUNS


def test_naive_stopping_after_every_run_from_five_undercovers() -> None:
    # The reason for the floor and the planned looks: stopping at the first narrow interval,
    # looking after every run from the 5th, misses the mean more often than 5%.
    rng = np.random.default_rng(16)
    streams, true_mean = _normal(rng, (EXPERIMENTS, MAX_RUNS))
    covered = 0
    for stream in streams:
        for n in range(5, MAX_RUNS + 1):
            mean, h = design.relative_half_width(stream[:n])
            if h <= TARGET:
                break
        covered += abs(mean - true_mean) <= h * abs(mean)
    assert covered / EXPERIMENTS < 0.93


def test_half_width_is_the_interval_describe_reports() -> None:
    values = np.array([11_020.0, 10_950.0, 15_100.0, 11_300.0, 10_890.0, 11_150.0])
    mean, h = design.relative_half_width(values)
    d_mean, _, _, low, high = mean_interval(pd.Series(values))
    assert mean == pytest.approx(d_mean)
    assert h * mean == pytest.approx(high - d_mean)
    assert d_mean - low == pytest.approx(high - d_mean)


def test_look_plans_the_next_run_count_from_the_spread() -> None:
    rng = np.random.default_rng(1)
    few = 100 * (1 + 0.01 * rng.standard_normal(6))
    first = design.look(few, 0.03, min_runs=5)
    assert not first.precise and first.next_n == design.STOP_FLOOR  # below the floor
    wide = 100 * (1 + 0.2 * rng.standard_normal(20))
    step = design.look(wide, 0.03, min_runs=5)
    assert not step.precise and step.next_n == 30  # capped at GROWTH x 20
    narrow = 100 * (1 + 0.01 * rng.standard_normal(12))
    done = design.look(narrow, 0.03, min_runs=5)
    assert done.precise and done.next_n == 12 and done.half_width <= 0.03
    with pytest.raises(ValueError):
        design.look(narrow, 0)


def _two_clock_states(rng: np.random.Generator, size: tuple[int, int], slow: float) -> np.ndarray:
    # The CPUID cost of this kind of machine switches between ~11k and ~15k cycles; a run
    # falls in the slow state with probability `slow` (2% spread within a state).
    base = np.where(rng.random(size) < slow, 15_000.0, 11_000.0)
    return base * (1 + 0.02 * rng.standard_normal(size))


@pytest.mark.parametrize(
    ("slow", "fixed_band", "sequential_band"),
    [
        (0.05, (0.50, 0.75), (0.45, 0.70)),
        (0.10, (0.50, 0.75), (0.50, 0.75)),
        (0.30, (0.88, 0.97), (0.86, 0.96)),
    ],
)
def test_two_clock_states_undercover_as_docs_statistics_says(slow, fixed_band, sequential_band):
    # docs/statistics.md's table of what the t interval does not fix: a rare slow clock state.
    # The bands hold the documented figures, so a change of method that moves them shows here.
    rng = np.random.default_rng(5)
    true_mean = slow * 15_000.0 + (1 - slow) * 11_000.0
    fixed = _two_clock_states(rng, (EXPERIMENTS, 10), slow)
    mean = fixed.mean(axis=1)
    half = 2.262 * fixed.std(axis=1, ddof=1) / np.sqrt(10)  # t(0.975, 9)
    covered_fixed = float(np.mean(np.abs(mean - true_mean) <= half))
    covered_seq = 0
    for stream in _two_clock_states(rng, (EXPERIMENTS // 2, MAX_RUNS), slow):
        last = design.sequential_run(stream, TARGET, min_runs=5, max_runs=MAX_RUNS)
        covered_seq += abs(last.mean - true_mean) <= last.half_width * abs(last.mean)
    covered_seq /= EXPERIMENTS // 2
    assert fixed_band[0] <= covered_fixed <= fixed_band[1], covered_fixed
    assert sequential_band[0] <= covered_seq <= sequential_band[1], covered_seq
