"""The model's 95% prediction intervals cover a future run at the depth they predict.

Simulated from the model's own structure (a_k, D_k = m_k · a_null, a guest-hypervisor exit
multiplying like the mean class), with lognormal runs of CV 5% at 5 and 7 runs a level. The
interval is for one future run's mean at L3, computed without any L3 data. Coverage must be
at least 0.93 (200 trials x 3 probes per n: a true 0.95 has a standard error of 0.009, so
0.93 is more than 2 below). Measured: 0.987 at n = 5 and 1.000 at n = 7; an interval half as
wide covers 0.875 and 0.872 and fails the same bound. The intervals are conservative because
m_h is resampled over the exit classes (which class a guest-hypervisor exit resembles is
part of the model's uncertainty), so no upper bound is asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

from vmtax.model.nested import Series, fit

A = {"cpuid": 1500.0, "timer": 20_000.0, "wakeup": 8_000.0}
M = {"cpuid": 30.0, "timer": 25.0, "wakeup": 35.0}
CV = 0.05
TRIALS = 200


def _runs(rng, mean: float, n: int) -> np.ndarray:
    return mean * rng.lognormal(-CV * CV / 2, CV, n)


def _coverage(n: int, seed: int) -> tuple[float, float]:
    """(coverage of the prediction interval, of the mean's bootstrap interval alone)."""
    rng = np.random.default_rng(seed)
    m_h = float(np.mean(list(M.values())))
    covered = narrow = total = 0
    for trial in range(TRIALS):
        series = [
            Series(k, "ns", _runs(rng, a, n), _runs(rng, a + M[k] * A["cpuid"], n))
            for k, a in A.items()
        ]
        preds = fit(series, depths=(3,), resamples=400, seed=trial).predictions
        for k, a in A.items():
            truth = a + M[k] * A["cpuid"] * (1 + m_h)
            future = truth * rng.lognormal(-CV * CV / 2, CV)
            row = preds[(preds.benchmark == k) & (preds.level == 3) & ~preds.dvh].iloc[0]
            covered += row.low <= future <= row.high
            half = 0.25 * (row.high - row.low)  # an interval half as wide: too narrow
            narrow += row.predicted - half <= future <= row.predicted + half
            total += 1
    return covered / total, narrow / total


@pytest.mark.parametrize("n", [5, 7])
def test_l3_prediction_intervals_cover_a_future_run(n):
    covered, narrow = _coverage(n, seed=n)
    assert covered >= 0.93
    assert narrow < 0.93  # the bound can fail: an interval half as wide does
