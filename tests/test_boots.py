"""Variance components of run means nested in boots, and Kalibera and Jones' runs per boot."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from vmtax.stats.boots import MAX_RUNS_PER_BOOT, VarianceComponents, variance_components

pytestmark = pytest.mark.fast


def _nested(rng, sizes, between, within):
    ids = np.repeat(np.arange(len(sizes)), sizes)
    effects = rng.normal(0, math.sqrt(between), len(sizes))
    return effects[ids] + rng.normal(0, math.sqrt(within), ids.size), ids


def test_balanced_components_are_reml_as_mixedlm_fits_them():
    rng = np.random.default_rng(1)
    y, ids = _nested(rng, [6] * 5, 4e-4, 1e-4)
    vc = variance_components(y, [f"boot-{i}" for i in ids])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("y ~ 1", pd.DataFrame({"y": y, "g": ids}), groups="g").fit(reml=True)
    assert vc.boots == 5 and vc.runs == 30
    assert vc.within == pytest.approx(fit.scale, rel=1e-4)
    assert vc.between == pytest.approx(float(fit.cov_re.iloc[0, 0]), rel=1e-3)


def test_unbalanced_estimates_are_unbiased_for_known_components():
    # 8,000 simulated experiments with 3..9 runs in each of 4 boots: the average estimates
    # land on the components they were drawn with (between large enough that the truncation
    # at 0 is rare; the mean's standard error is about 0.04).
    rng = np.random.default_rng(2)
    sizes = [3, 5, 9, 4]
    est = np.array(
        [
            (vc.between, vc.within)
            for vc in (variance_components(*_nested(rng, sizes, 4.0, 1.0)) for _ in range(8000))
        ]
    )
    between, within = est.mean(axis=0)
    assert within == pytest.approx(1.0, abs=0.03)
    assert between == pytest.approx(4.0, abs=0.15)
    # Ignoring the imbalance (dividing by N / B runs instead of n0) misses by more than that.
    n, n0 = sum(sizes), (sum(sizes) - sum(s * s for s in sizes) / sum(sizes)) / 3
    assert abs(between * n0 / (n / len(sizes)) - 4.0) > 0.2


def test_no_boot_effect_gives_a_small_share_and_a_real_one_a_large_share():
    rng = np.random.default_rng(3)
    none = variance_components(*_nested(rng, [8] * 6, 0.0, 1.0))
    big = variance_components(*_nested(rng, [8] * 6, 9.0, 1.0))
    assert none.between_share < 0.2
    assert big.between_share > 0.6


def test_one_boot_or_one_run_per_boot_leaves_a_component_undefined():
    one = variance_components(np.log([1.0, 1.1, 0.9]), ["a", "a", "a"])
    assert one.boots == 1 and math.isnan(one.between) and math.isnan(one.between_share)
    assert one.within == pytest.approx(np.var(np.log([1.0, 1.1, 0.9]), ddof=1))
    single = variance_components(np.log([1.0, 1.1]), ["a", "b"])
    assert math.isnan(single.within) and math.isnan(single.between)
    with pytest.raises(ValueError, match="at least 2 boots"):
        one.runs_per_boot(10.0, 1.0)
    with pytest.raises(ValueError, match="values but"):
        variance_components(np.ones(3), ["a"])
    nan_dropped = variance_components(np.array([0.0, np.nan, 0.1, 0.2]), ["a", "a", "b", "b"])
    assert nan_dropped.runs == 3


def test_runs_per_boot_is_kalibera_and_jones_formula():
    vc = VarianceComponents(between=1e-4, within=4e-4, boots=3, runs=15)
    # sqrt(20 s / 0.5 s * 4) = 12.6 -> 13 runs per boot
    assert vc.runs_per_boot(20.0, 0.5) == 13
    assert vc.runs_per_boot(0.5, 20.0) == 1
    assert vc.between_share == pytest.approx(0.2)
    assert VarianceComponents(0.0, 1e-4, 3, 15).runs_per_boot(20.0, 0.5) == MAX_RUNS_PER_BOOT
    with pytest.raises(ValueError, match="positive"):
        vc.runs_per_boot(0.0, 1.0)
