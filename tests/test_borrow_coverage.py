"""Coverage of the overhead interval whose boot-level sides borrow strength from a noise profile,
through the code `vmtax compare` runs: ``calibrate.profile_external`` turns a profile's
components into the hook's ``ExternalBetween``, ``boots.units`` makes a side's boot means and
``intervals.boot_ratio_interval`` pools each side's variance of a boot mean with its profile's
(``noise.borrow.pool``: the F-test, then the pooled variance and degrees of freedom) and picks
the quantile. Nothing here re-implements the interval: the experiments are drawn at once with
numpy, and every one goes through those functions.

A/A experiments of 3 boots × 5 runs a side (log sd between boots and within them given); each
side's profile comes from its own calibration of 8 boots × 3 runs (or both sides share one)
whose variances were the truth (the profile right), half of it or twice it (both components:
the profile's variance of a boot mean is off by 2× either way). docs/statistics.md ("Noise
profiles", borrowed strength) gives the figures at 4,000 experiments a cell; these are 2,000
a cell (a proportion near 0.95 is then known to ±0.01 at two standard errors, ±0.015 at
three)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vmtax.experiment.calibrate import profile_external
from vmtax.noise.components import Components, source
from vmtax.stats.boots import units
from vmtax.stats.intervals import boot_ratio_interval

pytestmark = pytest.mark.slow  # a minute or two: 12,000 experiments, one by one

BOOTS, RUNS = 3, 5
PROFILE_BOOTS, PROFILE_RUNS = 8, 3
TRIALS = 2000


def coverage(
    factor: float,
    between_sd: float,
    within_sd: float,
    trials: int,
    seed: int,
    *,
    baseline: str = "guest",
) -> dict[str, float]:
    """Coverage of the true ratio (1) and median width (log units) of the 95% interval with
    the profiles (``borrowed``) and without (``own``), on the same experiments. ``baseline``
    "guest": both sides a guest of 3 boots with its own profile; "shared": both sides a guest
    of 3 boots with one profile (two sets of one configuration); "host": the configuration
    against 10 runs of the host (one boot, no profile), as a guest against L0."""
    rng = np.random.default_rng(seed)
    sides = 1 if baseline == "host" else 2
    shape = (trials, sides, BOOTS)
    logs = rng.normal(0, between_sd, (*shape, 1)) + rng.normal(0, within_sd, (*shape, RUNS))
    values = 100.0 * np.exp(logs).reshape(trials, sides, BOOTS * RUNS)
    host = 100.0 * np.exp(rng.normal(0, within_sd, (trials, 10)))
    boot_ids = np.repeat([f"b{i}" for i in range(BOOTS)], RUNS)
    scale = math.sqrt(factor)
    cal_shape = (trials, sides, PROFILE_BOOTS)
    cal = scale * (
        rng.normal(0, between_sd, (*cal_shape, 1))
        + rng.normal(0, within_sd, (*cal_shape, PROFILE_RUNS))
    )
    cal_ids = np.repeat([f"c{i}" for i in range(PROFILE_BOOTS)], PROFILE_RUNS)
    hits = {"borrowed": 0, "own": 0}
    widths: dict[str, list[float]] = {"borrowed": [], "own": []}
    for t in range(trials):
        profiles = [
            profile_external(Components((source(cal[t, s].ravel(), cal_ids),)), "a profile")
            for s in range(sides)
        ]
        if baseline == "shared":
            profiles[1] = profiles[0]
        cfg = units(values[t, 0], boot_ids)
        base = units(values[t, 1], boot_ids) if sides == 2 else units(host[t], None)
        base_profile = profiles[1] if sides == 2 else None
        for kind, ext_c, ext_b in (
            ("borrowed", profiles[0], base_profile),
            ("own", None, None),
        ):
            got = boot_ratio_interval(cfg, base, "lower", cfg_external=ext_c, base_external=ext_b)
            hits[kind] += got.low <= 1.0 <= got.high
            widths[kind].append(math.log(got.high / got.low))
    return {
        "borrowed": hits["borrowed"] / trials,
        "own": hits["own"] / trials,
        "borrowed_width": float(np.median(widths["borrowed"])),
        "own_width": float(np.median(widths["own"])),
    }


def _say(name: str, got: dict[str, float]) -> None:
    print(
        f"{name}: borrowed {got['borrowed']:.3f} (width {got['borrowed_width']:.4f}), "
        f"own boots only {got['own']:.3f} (width {got['own_width']:.4f})"
    )


def test_three_boots_a_side_with_the_profile_right_cover_and_are_narrower():
    got = coverage(1.0, 0.02, 0.01, TRIALS, seed=1)
    _say("profile right", got)
    # Not below 0.95 beyond what 2,000 experiments can tell (±0.015). Above it by what the
    # Behrens–Fisher quantile adds when the sides' pooled degrees of freedom differ (it is
    # conservative there) and the F-test's fall-back to a side's own 2 degrees of freedom:
    # about 0.97; pooled with B − 1 degrees of freedom it would be 0.99.
    assert 0.935 <= got["borrowed"] <= 0.985, got
    assert got["borrowed_width"] < 0.9 * got["own_width"], got  # what borrowing buys


def test_two_sets_of_one_configuration_sharing_their_profile_cover_near_095():
    # Equal pooled degrees of freedom: Welch–Satterthwaite, which counts the shared
    # profile's degrees of freedom twice; still 0.95 within what 2,000 experiments tell.
    got = coverage(1.0, 0.02, 0.01, TRIALS, seed=5, baseline="shared")
    _say("one profile for both sides, right", got)
    assert abs(got["borrowed"] - 0.95) <= 0.015, got
    assert got["borrowed_width"] < 0.85 * got["own_width"], got


def test_a_profile_twice_too_small_is_caught_often_enough_by_the_f_test():
    got = coverage(0.5, 0.02, 0.01, TRIALS, seed=2)
    _say("profile 2x too small", got)
    # Pooled without the F-test it covers 0.91; with it 0.94.
    assert got["borrowed"] >= 0.925, got


def test_a_profile_twice_too_large_only_widens():
    got = coverage(2.0, 0.02, 0.01, TRIALS, seed=3)
    _say("profile 2x too large", got)
    assert got["borrowed"] >= 0.95, got


def test_a_guest_against_the_hosts_runs_covers_with_the_profile_right():
    got = coverage(1.0, 0.02, 0.01, TRIALS, seed=4, baseline="host")
    _say("against the host, profile right", got)
    assert 0.935 <= got["borrowed"] <= 0.975, got
    assert got["borrowed_width"] < 0.8 * got["own_width"], got
