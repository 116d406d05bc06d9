"""The time-driven term on a synthetic stack with known rates and costs: calibration at a level
recovers its rate r, cost c, exits per operation n_op and time per operation T_ops; a deeper
level's T = T_ops / (1 − r·c) is recovered; where r·c ≥ 1 no number is given; and the
intervals cover 93–97.5% of the time while intervals half as wide do not."""

from __future__ import annotations

import numpy as np
import pytest

from vmtax.model.timedriven import calibrate, predict

pytestmark = pytest.mark.fast

TRIALS = 4000
CV = 0.05
# The VM level: 250 timer exits per second of guest time, each costing 400 µs (a tenth of the
# time); an operation causes 1.2 exits of its own and takes 100 µs without the time-driven ones.
RATE, COST, N_OP, T_OPS = 250.0, 400e-6, 1.2, 100e-6
# A spin of 1 s of exit-free work varies by 0.5% from run to run; idle runs last 2 s.
WORK, SPIN_CV, IDLE_SECONDS = 1.0, 0.005, 2.0
# A deeper level: the operation alone takes 3 ms, its timer exits cost 1 ms each.
DEEP_T_OPS, DEEP_COST = 3e-3, 1e-3


def _runs(rng, mean: float, shape, cv: float = CV) -> np.ndarray:
    return mean * rng.lognormal(-cv * cv / 2, cv, shape)


def _level(rng, n: int, trials: int = TRIALS) -> dict[str, np.ndarray]:
    """One level's calibration runs: idle, spin and the operation's own."""
    load = RATE * COST
    exits = rng.poisson(RATE * IDLE_SECONDS, (trials, n)).astype(np.float64)
    idle = np.stack([exits, np.full((trials, n), IDLE_SECONDS)], axis=2)
    spin = _runs(rng, WORK / (1 - load), (trials, n, 1), SPIN_CV)
    t = _runs(rng, T_OPS / (1 - load), (trials, n))
    ops = np.stack([t, N_OP + RATE * t + 0.02 * rng.standard_normal((trials, n))], axis=2)
    return {"idle": idle, "spin": spin, "ops": ops}


def _deeper(rng, n: int, cost: float, trials: int = TRIALS) -> dict[str, np.ndarray]:
    return {
        "t_ops": _runs(rng, DEEP_T_OPS, (trials, n, 1)),
        "rate": rng.poisson(RATE * IDLE_SECONDS, (trials, n, 1)) / IDLE_SECONDS,
        "cost": _runs(rng, cost, (trials, n, 1)),
    }


def test_calibration_recovers_the_rate_the_cost_and_the_operations_share():
    got = calibrate(_level(np.random.default_rng(1), 10, trials=1), WORK)
    for key, truth in (("rate", RATE), ("cost", COST), ("n_op", N_OP), ("t_ops", T_OPS)):
        est, low, high = (float(x[0]) for x in got[key])
        assert est == pytest.approx(truth, rel=0.05), key
        assert low < truth < high, key


def test_a_deeper_level_is_solved_for_its_time_and_one_that_never_finishes_is_said():
    rng = np.random.default_rng(2)
    done = predict(_deeper(rng, 10, DEEP_COST, trials=1))
    truth = DEEP_T_OPS / (1 - RATE * DEEP_COST)  # 4 ms: a quarter of it is timer exits
    assert float(done.time[0][0]) == pytest.approx(truth, rel=0.05)
    assert float(done.load[0]) == pytest.approx(0.25, rel=0.05)
    (line,) = done.say("L3 timer", "s")
    assert line.startswith("L3 timer: 0.004") and "never" not in line
    stuck = predict(_deeper(rng, 10, 5e-3, trials=1))  # r·c = 1.25
    assert bool(stuck.never[0]) and np.isnan(stuck.time[0][0])
    (line,) = stuck.say("L3 timer")
    assert "never finishes an operation" in line and "r·c = 1.2" in line


@pytest.mark.parametrize("n", [3, 5, 7, 10])
def test_the_intervals_cover_and_half_as_wide_do_not(n):
    rng = np.random.default_rng(n)
    got = calibrate(_level(rng, n), WORK)
    cells = {}
    for key, truth in (("rate", RATE), ("cost", COST), ("n_op", N_OP), ("t_ops", T_OPS)):
        est, low, high = got[key]
        half = (est - (est - low) / 2, est + (high - est) / 2)
        cells[key] = [np.mean((lo <= truth) & (truth <= hi)) for lo, hi in ((low, high), half)]
    done = predict(_deeper(rng, n, DEEP_COST))
    est, low, high = done.time
    future = _runs(rng, DEEP_T_OPS, TRIALS) / (1 - RATE * DEEP_COST)
    half = (est * np.sqrt(low / est), est * np.sqrt(high / est))
    cells["time"] = [np.mean((lo <= future) & (future <= hi)) for lo, hi in ((low, high), half)]
    assert all(0.93 <= c <= 0.975 for c, _ in cells.values()), cells
    assert all(h < 0.93 for _, h in cells.values()), cells
