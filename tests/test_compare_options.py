"""A comparison's options are one value, checked once when built and passed whole: the
command, the use case and ``stats.compare.compare`` see the same object."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from vmtax.errors import UsageError
from vmtax.stats.compare import compare
from vmtax.stats.compare_options import CompareOptions
from vmtax.testing.runs import Config, runs_frame

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("test", "ttest", "unknown test 'ttest'"),
        ("adjust", "bonferroni", "unknown adjustment 'bonferroni'"),
        ("noise", math.nan, "noise must be a fraction"),
        ("noise", 1.0, "noise must be a fraction"),
        ("resamples", 99, "resamples must be in 100.."),
        ("seed", -1, "seed must be in 0.."),
        ("boot_cost_s", 0.0, "boot cost must be a number of seconds"),
        ("boot_cost_s", math.inf, "boot cost must be a number of seconds"),
    ],
)
def test_bad_options_are_refused_when_built(field, value, says):
    with pytest.raises(UsageError, match=says):
        CompareOptions(**{field: value})


def test_options_are_frozen_and_the_edges_pass():
    how = CompareOptions(test="welch", adjust="none", noise=0.0, resamples=100, seed=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        how.seed = 1  # type: ignore[misc]
    assert CompareOptions(noise=0.999, resamples=1_000_000).noise == 0.999


def test_compare_uses_the_options_it_is_given():
    runs, _ = runs_frame([Config("L0"), Config("L1", {}, 1.10)], runs=6, iterations=200, seed=2)
    how = CompareOptions(test="welch", adjust="bh", noise=0.05, resamples=300, seed=7)
    whole = compare(runs, "level=L0", options=how)
    loose = compare(runs, "level=L0", test="welch", adjust="bh", noise=0.05, resamples=300,
                    seed=7)  # fmt: skip
    assert (whole.test, whole.adjust, whole.noise, whole.resamples, whole.seed) == (
        "welch", "bh", 0.05, 300, 7,
    )  # fmt: skip
    pd.testing.assert_frame_equal(whole.rows, loose.rows)
    # Another noise band changes the verdicts' band, so the object is what compare read.
    wide = compare(runs, "level=L0", options=dataclasses.replace(how, noise=0.5))
    assert set(wide.rows.loc[~wide.rows["is_baseline"], "verdict"]) == {"~"}
    assert "slower" in set(whole.rows["verdict"])
    with pytest.raises(UsageError, match="not both"):
        compare(runs, "level=L0", options=how, seed=1)
    with pytest.raises(UsageError, match="unexpected keyword"):
        compare(runs, "level=L0", sed=1)
