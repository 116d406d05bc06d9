"""Adaptive sampling's run floor lets the comparison it is made for reach a verdict."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import load_suite
from vmtax.stats.significance import adjust, significance_floor

pytestmark = pytest.mark.fast


def _best_adjusted_p(n: int, family: int) -> float:
    # All values of one side above the other's: the most extreme data there is. scipy's
    # exact two-sided permutation test of the difference in means, then Holm over a family
    # of equally extreme probes (the smallest p is multiplied by the family size).
    a, b = np.arange(n, dtype=float), np.arange(n, dtype=float) + 100
    p = stats.permutation_test(
        (a, b), lambda x, y: np.mean(x) - np.mean(y), permutation_type="independent",
        n_resamples=np.inf, alternative="two-sided",
    ).pvalue  # fmt: skip
    return float(adjust(np.array([p] + [0.5] * (family - 1)), "holm")[0])


@pytest.mark.parametrize("family", [1, 6, 12, 24])
def test_the_floor_is_the_fewest_runs_that_can_give_a_verdict(family):
    n = significance_floor(family)
    assert n is not None
    assert _best_adjusted_p(n, family) < 0.05
    assert _best_adjusted_p(n - 1, family) >= 0.05


#: The worked example's guest side, as its plan stores it.
GUEST = {"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": 3}


def test_the_worked_example_gets_enough_runs_for_a_verdict():
    # `vmtax run --levels L0,L1`: the quick suite's 12 probes, one comparison each. The floor
    # was 5 a side, whose best adjusted p is 12 * 2/252 = 0.095: never a verdict.
    suite, source = load_suite("quick")
    targets = [{"kind": "local"}, GUEST]
    plan = build_plan(suite, source=source, seed=1, targets=targets)
    assert len(plan.entries) == 12
    assert plan.sampling["min_runs"] == 6 and plan.sampling["raised_for"] == 12
    assert {e["runs"] for e in plan.entries.values()} == {6}
    assert _best_adjusted_p(6, 12) < 0.05 <= _best_adjusted_p(5, 12)


def test_one_target_or_an_explicit_floor_is_left_alone_and_an_unreachable_one_said():
    suite, source = load_suite("quick")
    alone = build_plan(suite, source=source, seed=1, targets=[{"kind": "local"}])
    assert alone.sampling["min_runs"] == 5 and "raised_for" not in alone.sampling
    two = [{"kind": "local"}, GUEST]
    kept = build_plan(suite, source=source, seed=1, targets=two, min_runs=5)
    assert kept.sampling["min_runs"] == 5
    assert "--min-runs 6 makes one possible" in kept.sampling["unreachable"]
