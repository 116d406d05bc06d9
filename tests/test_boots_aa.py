"""The test of two guest configurations measured in boots (an A/A run, `--levels L1,L1`):
false verdicts per family of 12 probes under Holm, with boot effects, and power.

Vectorised simulations through vmtax's own functions (``intervals.ratio_pvalues``, the
arithmetic of ``significance.boot_pvalue`` on boot means, and ``significance.holm``): 4,000
families of 12 probes per case, every probe of every boot drawing its own effect (the
probes' p-values independent: the hardest case for a family-wise guarantee). A family gives
a false verdict when any Holm-adjusted p is below 0.05. Above 0.0605 (the 99.9% point of
Binomial(4000, 0.05) / 4000) fails; so does a share of the 48,000 raw p-values below 0.5
outside [0.40, 0.60], which a p-value halved (all of them below 0.5) or forced to 0 breaks,
where the family-wise rate alone would let a halved p pass at 2 and 3 boots (its 0.03-0.06).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from vmtax.stats import boots, intervals, significance

pytestmark = pytest.mark.fast

ALPHA = 0.05
PROBES = 12
TRIALS = 4000
MAX_FAMILIES = stats.binom.ppf(0.999, TRIALS, ALPHA) / TRIALS
HALF_BAND = (0.40, 0.60)
BOOTS = (2, 3, 5)
RUNS_PER_BOOT = (2, 3, 10)
#: (boot effect sd, run sd) of log run means: boots dominating, runs dominating, no boot effect.
MIXES = ((0.02, 0.01), (0.005, 0.03), (0.0, 0.02))


def boot_means(rng, trials, n_boots, per_boot, boot_sd, run_sd, effect=1.0, boot_t3=False):
    """(trials, probes, 2, boots) boot means of two configurations: set=a, then set=b whose
    probe 0 is ``effect`` times slower. ``boot_t3``: boot effects from a t(3), scaled to sd."""
    shape = (trials, PROBES, 2, n_boots, 1)
    if boot_t3:
        b = boot_sd * rng.standard_t(3, shape) / math.sqrt(3)
    else:
        b = boot_sd * rng.standard_normal(shape)
    runs = 100 * np.exp(b + run_sd * rng.standard_normal((*shape[:-1], per_boot)))
    runs[:, 0, 1] *= effect
    return runs.mean(-1)


def welch(bm: np.ndarray) -> np.ndarray:
    """(trials, probes) p-values of set=b against set=a: what compare gives boot-level sides."""
    return intervals.ratio_pvalues(bm[:, :, 1], bm[:, :, 0])


def exact_permutation(bm: np.ndarray) -> np.ndarray:
    """The exact permutation test of the difference of boot means, which compare used before
    (scipy's, vectorised over every split of the 2n boot means; for the comparison only)."""
    n = bm.shape[-1]
    both = np.concatenate([bm[:, :, 1], bm[:, :, 0]], -1)
    splits = np.zeros((math.comb(2 * n, n), 2 * n))
    for i, pick in enumerate(itertools.combinations(range(2 * n), n)):
        splits[i, list(pick)] = 1.0
    first = both @ splits.T / n
    diff = 2 * first - both.sum(-1, keepdims=True) / n
    observed = np.abs(both[..., :n].mean(-1) - both[..., n:].mean(-1))[..., None]
    return np.mean(np.abs(diff) >= observed * (1 - 1e-12), -1)


def false_families(p: np.ndarray) -> float:
    return float(np.mean((significance.holm(p) < ALPHA).any(-1)))


def found(p: np.ndarray) -> float:
    """Share of families whose probe 0 (the real effect) is significant under Holm."""
    return float(np.mean(significance.holm(p)[:, 0] < ALPHA))


def _checks(p: np.ndarray) -> tuple[bool, bool]:
    below_half = float(np.mean(p < 0.5))
    return false_families(p) <= MAX_FAMILIES, HALF_BAND[0] <= below_half <= HALF_BAND[1]


@pytest.mark.parametrize("n_boots", BOOTS)
def test_aa_false_verdicts_stay_under_alpha_per_family(n_boots):
    rng = np.random.default_rng(90 + n_boots)
    for per_boot in RUNS_PER_BOOT:
        for mix in MIXES:
            p = welch(boot_means(rng, TRIALS, n_boots, per_boot, *mix))
            assert np.isfinite(p).all()
            family_ok, calibrated = _checks(p)
            assert family_ok and calibrated, (n_boots, per_boot, mix, false_families(p))
    # Heavy-tailed boot effects (a rare slow boot): still within.
    p = welch(boot_means(rng, TRIALS, n_boots, 3, 0.02, 0.01, boot_t3=True))
    assert all(_checks(p)), false_families(p)


@pytest.mark.parametrize("n_boots", BOOTS)
def test_the_checks_fail_on_a_halved_or_zero_p_value(n_boots):
    p = welch(boot_means(np.random.default_rng(95), TRIALS, n_boots, 3, 0.02, 0.01))
    assert all(_checks(p))
    assert not _checks(p / 2)[1]
    assert _checks(0 * p) == (False, False)


def test_runs_as_the_unit_fail_the_family_wise_check():
    # The boots forgotten: each side's 9 runs as independent units.
    rng = np.random.default_rng(96)
    shape = (TRIALS, PROBES, 2, 3, 1)
    runs = 100 * np.exp(0.02 * rng.standard_normal(shape))
    runs = runs * np.exp(0.01 * rng.standard_normal((*shape[:-1], 3)))
    flat = runs.reshape(TRIALS, PROBES, 2, 9)
    p = intervals.ratio_pvalues(flat[:, :, 1], flat[:, :, 0])
    assert false_families(p) > 0.5


def test_the_test_is_the_intervals_dual_and_the_scalar_path_agrees():
    rng = np.random.default_rng(97)
    bm = boot_means(rng, 200, 3, 3, 0.02, 0.01, effect=1.06)
    p = welch(bm)
    _, low, high = intervals.ratio_intervals(bm[:, :, 1], bm[:, :, 0])
    assert ((p < ALPHA) == ((low > 1) | (high < 1))).all()
    assert 0 < np.mean(p < ALPHA) < 1  # both outcomes occur
    ids = np.repeat(["x", "y", "z"], 2)
    for t, k in ((0, 0), (5, 3), (17, 0)):
        cfg = boots.units(np.repeat(bm[t, k, 1], 2), ids)
        base = boots.units(np.repeat(bm[t, k, 0], 2), ids)
        assert cfg.boot_level and base.boot_level
        assert significance.boot_pvalue(cfg, base) == pytest.approx(p[t, k])


def test_welch_gives_verdicts_where_permuting_3_boots_against_3_cannot():
    # A real 10% effect on one probe of 12, 3 boots of 3 runs a side (2% boot effects): the
    # exact permutation of 3 boot means against 3 stops at p = 0.1, 1.2 after Holm.
    rng = np.random.default_rng(98)
    bm = boot_means(rng, 2000, 3, 3, 0.02, 0.01, effect=1.10)
    assert significance.min_pvalue(3, 3, "permutation") * PROBES > 1
    assert found(exact_permutation(bm)) == 0
    assert found(welch(bm)) > 0.3


def test_the_permutation_helper_is_scipys_exact_test():
    rng = np.random.default_rng(99)
    bm = boot_means(rng, 3, 3, 3, 0.02, 0.01)
    mine = exact_permutation(bm)
    for t, k in ((0, 0), (1, 4), (2, 11)):
        theirs = stats.permutation_test(
            (bm[t, k, 1], bm[t, k, 0]),
            lambda x, y: np.mean(x) - np.mean(y),
            permutation_type="independent",
        ).pvalue
        assert mine[t, k] == pytest.approx(theirs)


def mixedlm_pvalues(rng, trials, n_boots, per_boot, boot_sd, run_sd, effect=1.0) -> np.ndarray:
    """(trials, probes) p-values of statsmodels' MixedLM (a boot random intercept, REML, the
    Wald test of the set): the two-level model the issue offered. About 30 ms a fit, so only
    for the table in docs/statistics.md, not for CI."""
    import pandas as pd
    import statsmodels.formula.api as smf

    side = np.repeat([0, 1], n_boots * per_boot)
    group = np.repeat(np.arange(2 * n_boots), per_boot)
    out = np.full((trials, PROBES), np.nan)
    for t in range(trials):
        for k in range(PROBES):
            y = np.repeat(boot_sd * rng.standard_normal(2 * n_boots), per_boot)
            y = (
                y
                + run_sd * rng.standard_normal(y.size)
                + (side * math.log(effect) if k == 0 else 0)
            )
            frame = pd.DataFrame({"y": y, "side": side, "g": group})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    fit = smf.mixedlm("y ~ side", frame, groups="g").fit(reml=True)
                    out[t, k] = float(fit.pvalues["side"])
                except (ValueError, np.linalg.LinAlgError):
                    pass  # a singular fit: no p-value, counted as not significant
    return np.nan_to_num(out, nan=1.0)


def boot_test_table() -> dict[tuple[int, int, tuple], dict]:
    """(boots, runs per boot, mix) -> {method: (false-verdict families, power at 5%)}: the
    table in docs/statistics.md (``python -c 'from tests.test_boots_aa import ...'``)."""
    out = {}
    for b in (2, 3, 5, 6):
        for r in (3, 10):
            for mix in MIXES[:2]:
                rng = np.random.default_rng(7)
                null = boot_means(rng, TRIALS, b, r, *mix)
                real = boot_means(rng, TRIALS, b, r, *mix, effect=1.05)
                out[b, r, mix] = {
                    name: (false_families(test(null)), found(test(real)))
                    for name, test in (("permutation", exact_permutation), ("welch", welch))
                }
    return out


def mixedlm_table(trials: int = 40) -> dict[int, tuple[float, float, float]]:
    """boots -> (false-verdict families, share of raw p below 0.05, power at 5%) of MixedLM,
    3 runs per boot, 2% boot and 1% run effects: the MixedLM column of docs/statistics.md
    (a few hundred fits per cell: minutes, where the vectorised tests take seconds)."""
    out = {}
    for b in (2, 3, 5):
        rng = np.random.default_rng(8)
        null = mixedlm_pvalues(rng, trials, b, 3, 0.02, 0.01)
        real = mixedlm_pvalues(rng, trials, b, 3, 0.02, 0.01, effect=1.05)
        out[b] = (false_families(null), float(np.mean(null < ALPHA)), found(real))
    return out
