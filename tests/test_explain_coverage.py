"""The explained fraction's 95% interval (`vmtax explain`) covers the true fraction about 95%
of the time: simulated runs with known costs, the four independent samples the fraction uses
(the configuration's runs with their exits and handling, its baseline, and cpuid's runs at
both levels), normal and heavy-tailed run noise, 3 to 10 runs a side. Run-level
correlation between a run's time and its exits is built in, as on a real machine."""

from __future__ import annotations

import numpy as np
import pytest

from vmtax.explain.decompose import _fraction
from vmtax.stats.delta import delta_interval

pytestmark = pytest.mark.fast

TRIALS = 2000
# Binomial(2000, 0.95) puts 99.9% of its mass in about [0.934, 0.965]; a correct interval
# that is slightly conservative (t quantiles, Satterthwaite's df) stays under 0.985.
LOW, HIGH = 0.93, 0.985
N0, HANDLING, ROUND_TRIP, RESIDUAL, BASE = 3.0, 8_000.0, 4_000.0, 20_000.0, 100_000.0
CPUID_HANDLING, CPUID_BASE = 30_000.0, 200.0
TRUTH = N0 * (HANDLING + ROUND_TRIP) / (N0 * (HANDLING + ROUND_TRIP) + RESIDUAL)


def _noise(rng: np.random.Generator, size: int, dist: str) -> np.ndarray:
    if dist == "normal":
        return rng.normal(0.0, 1.0, size)
    return rng.standard_t(3, size) / np.sqrt(3)  # unit variance, heavy tails


def _covered(rng: np.random.Generator, n: int, cv: float, dist: str, shrink: float) -> bool:
    def e(size: int = n) -> np.ndarray:
        return _noise(rng, size, dist)

    exits = N0 * (1 + 0.02 * e())
    handling = exits * HANDLING * (1 + 0.03 * e())
    time = BASE + exits * (HANDLING + ROUND_TRIP) + RESIDUAL + cv * 136_000 * e()
    base = BASE * (1 + cv * e())
    c_exits = 1 + 0.001 * e()
    c_handling = c_exits * CPUID_HANDLING * (1 + 0.03 * e())
    c_time = CPUID_BASE + c_exits * (CPUID_HANDLING + ROUND_TRIP) + cv * 34_000 * e()
    c_base = CPUID_BASE * (1 + cv * e())
    got = delta_interval(
        _fraction,
        [np.column_stack([time, handling, exits]), base,
         np.column_stack([c_time, c_handling, c_exits]), c_base],
    )  # fmt: skip
    half = shrink * (got.high - got.low) / 2
    return got.estimate - half <= TRUTH <= got.estimate + half


def _coverage(n: int, cv: float, dist: str, shrink: float = 1.0, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([_covered(rng, n, cv, dist, shrink) for _ in range(TRIALS)]))


@pytest.mark.parametrize(
    ("n", "cv", "dist"),
    [(3, 0.02, "normal"), (5, 0.02, "normal"), (10, 0.02, "normal"), (5, 0.02, "t3"),
     (10, 0.02, "t3"), (5, 0.1, "normal"), (10, 0.1, "normal")],
)  # fmt: skip
def test_explained_fraction_interval_covers(n, cv, dist):
    coverage = _coverage(n, cv, dist, seed=n)
    assert LOW <= coverage <= HIGH, coverage


def test_an_interval_half_as_wide_fails_the_same_bound():
    assert _coverage(5, 0.02, "normal", shrink=0.5, seed=1) < LOW


def test_two_groups_of_one_quantity_give_welchs_interval():
    """A difference of two means through the delta method is Welch's interval exactly."""
    from scipy import stats

    rng = np.random.default_rng(2)
    a, b = rng.normal(10, 1, 6), rng.normal(9, 2, 9)
    got = delta_interval(lambda m: float(m[0][0] - m[1][0]), [a, b])
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert got.low == pytest.approx(ref.low, rel=1e-6)
    assert got.high == pytest.approx(ref.high, rel=1e-6)
