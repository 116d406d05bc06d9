"""The model never prints a negative time, and never calls a decomposition a prediction."""

from __future__ import annotations

import numpy as np
import pytest

from vmtax.model.nested import DECOMPOSITION, LOO_BASIS, PREDICTION, Series, fit

pytestmark = pytest.mark.fast


def _runs(rng, mean: float, n: int = 6) -> np.ndarray:
    return mean * rng.lognormal(0.0, 0.03, n)


def test_a_nested_level_cheaper_than_the_vm_gives_a_reason_not_a_negative_time():
    # The report of `vmtax run --levels L0,L1` under TCG: cpuid is answered inside QEMU's
    # translated code at L1 (72 cycles) but is a real exit at L0 (3,306): D < 0, and the old
    # model printed cpuid at L2 as -103,237 ns and at L3 as -1,187,764 ns.
    rng = np.random.default_rng(4)
    series = [
        Series("cpuid", "ns", _runs(rng, 1352.0), _runs(rng, 30.0)),
        Series("timer", "ns", _runs(rng, 100_386.0), _runs(rng, 334_197.0)),
        Series("wakeup", "ns", _runs(rng, 33_419.0), _runs(rng, 272_628.0)),
    ]
    result = fit(series)
    preds = result.predictions
    assert (preds["predicted"] > 0).all() and (preds["low"] > 0).all()
    # The leave-one-out row predicts cpuid's nested level from the other classes (none of
    # cpuid's nested runs go in), and is scored against them; no other cpuid row is given.
    own = preds[preds["basis"] != LOO_BASIS]
    assert not ((own["benchmark"] == "cpuid") & ~own["dvh"]).any()
    loo = preds[(preds["benchmark"] == "cpuid") & (preds["basis"] == LOO_BASIS)].iloc[0]
    assert loo["scope"] == "held out" and loo["error_pct"] > 1000
    said = [n for n in result.notes if n.startswith("cpuid at L")]
    assert said and all("not slower than the VM level" in n for n in said)


def test_a_negative_exit_round_trip_is_refused_for_the_decomposition():
    # Handling time in the VM's profile longer than the whole exit: e = (a - T1)/N1 < 0.
    rng = np.random.default_rng(5)
    vm_prof = np.column_stack([np.full(6, 1.0), _runs(rng, 2000.0)])
    nested_prof = np.column_stack([np.full(6, 40.0), _runs(rng, 9000.0)])
    series = [
        Series("cpuid", "ns", _runs(rng, 1500.0), _runs(rng, 30_000.0), vm_profile=vm_prof,
               nested_profile=nested_prof),
    ]  # fmt: skip
    result = fit(series)
    preds = result.predictions
    assert (preds["predicted"] > 0).all()
    assert not ((preds["level"] == 2) & (preds["kind"] == DECOMPOSITION)).any()
    assert any("round trip e = " in n and "not positive" in n for n in result.notes)


def test_rows_from_the_levels_own_profile_are_decompositions():
    rng = np.random.default_rng(6)
    vm_prof = np.column_stack([np.full(6, 1.0), _runs(rng, 200.0)])
    nested_prof = np.column_stack([np.full(6, 30.0), _runs(rng, 6000.0)])
    series = [
        Series("cpuid", "ns", _runs(rng, 1500.0), _runs(rng, 48_000.0), vm_profile=vm_prof,
               nested_profile=nested_prof),
    ]  # fmt: skip
    preds = fit(series).predictions
    own = preds[(preds["level"] == 2) & ~preds["dvh"]]
    assert set(own["kind"]) == {DECOMPOSITION}
    assert set(preds.loc[preds["level"] >= 3, "kind"]) == {PREDICTION}
