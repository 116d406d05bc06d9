"""Two-sample tests on run-level values and the multiple-comparison adjustments.

Runs are the independent unit, so every test here takes one value per run (usually the run's
mean), never pooled iterations. The tests are scipy's:

- ``permutation``: ``scipy.stats.permutation_test`` on the difference of the means, exact
  when the number of distinct relabellings is at most ``resamples``, randomised otherwise;
- ``welch``: ``scipy.stats.ttest_ind(equal_var=False)``;
- ``mannwhitney``: ``scipy.stats.mannwhitneyu`` (exact for small samples without ties).

Above runs, boots: :func:`boot_pvalue` is the test of a comparison with a side measured in two
boots or more, always the dual of its interval, so the verdict and the interval agree. Boot
means against one boot's runs (the two kinds of unit do not share a distribution under the
null, so they cannot be permuted): the Behrens–Fisher test. Boot means against boot means:
Welch's t on the log ratio. Permuting them instead, as vmtax did, has a floor the design
cannot clear: 3 boots against 3 have 20 arrangements, p >= 0.1, and under Holm over 12
probes no permutation test of fewer than 6 boots a side can give a verdict; simulated with
boot effects, Welch's t keeps the family-wise rate under 5% at 2, 3 and 5 boots a side
(docs/statistics.md, "The boot-level test").

The family adjustments: Benjamini-Hochberg (false discovery rate) is statsmodels'
``multipletests``; Holm's step-down (family-wise error rate) is computed here, and tested
against ``multipletests(method="holm")``, because statsmodels 0.14-0.15 runs ``gc.collect()``
on every Holm call: 170 ms each in a process holding a store's frames, and
:func:`best_adjusted` adjusts once per test of the family (2 s for a 12-probe comparison).
"""

from __future__ import annotations

import math

import numpy as np

from vmtax.stats import intervals
from vmtax.stats.boots import ExternalBetween, Units
from vmtax.stats.compare_options import ADJUSTMENTS as ADJUSTMENTS
from vmtax.stats.compare_options import TESTS as TESTS


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def pvalue(
    a: np.ndarray,
    b: np.ndarray,
    test: str = "permutation",
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> float:
    """Two-sided p-value for "a and b come from the same population"; NaN if undefined."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size < 1 or b.size < 1 or a.size + b.size < 3:
        return math.nan
    # heavy: scipy.stats (most of a second of CPU to import), only for a test on runs
    from scipy import stats

    if test == "permutation":
        if a.size < 2 or b.size < 2:
            # scipy refuses a one-run side; the test could not reach 0.05 below 39 runs on
            # the other side anyway (its floor is 2/(n+1)): no p-value, as for Welch.
            return math.nan
        res = stats.permutation_test(
            (a, b),
            _mean_diff,
            permutation_type="independent",
            vectorized=True,
            n_resamples=resamples,
            alternative="two-sided",
            rng=np.random.default_rng(seed),
        )
        return float(res.pvalue)
    if test == "welch":
        if a.size < 2 or b.size < 2:
            return math.nan
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    if test == "mannwhitney":
        return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    raise ValueError(f"unknown test {test!r} (choose from {', '.join(TESTS)})")


def boot_pvalue(
    cfg: Units,
    base: Units,
    *,
    cfg_external: ExternalBetween | None = None,
    base_external: ExternalBetween | None = None,
) -> float:
    """Two-sided p-value of "equal means" for two sides at least one of which was measured in
    two boots or more (or has a between-boot variance from outside): the test
    :func:`intervals.boot_ratio_interval` inverts (Welch's t on the log ratio of boot means
    against as many boot means, Behrens–Fisher against one boot's runs, unequal boots, or a
    side whose variance of a boot mean is pooled with a profile's: ``cfg_external`` and
    ``base_external`` as there, through :func:`intervals.side_log_variance`)."""
    return intervals.boot_ratio_pvalue(
        cfg, base, cfg_external=cfg_external, base_external=base_external
    )


def min_pvalue(n1: int, n2: int, test: str = "permutation", *, resamples: int = 10_000) -> float:
    """The smallest two-sided p-value the test can return with n1 and n2 runs, whatever the data.

    Rank and permutation tests have a floor: with all values separated, only 2 of the
    C(n1+n2, n1) relabellings are as extreme as the observed one. A randomised permutation
    test also cannot go below 2/(resamples+1) (scipy counts the observed labelling). Welch's
    test has no floor once both sides have two runs.
    """
    if n1 < 1 or n2 < 1 or n1 + n2 < 3:
        return 1.0
    if test in ("welch", "permutation") and (n1 < 2 or n2 < 2):
        return 1.0
    if test == "welch":
        return 0.0
    floor = min(1.0, 2.0 / math.comb(n1 + n2, n1))
    if test == "permutation" and math.comb(n1 + n2, n1) > resamples:
        floor = max(floor, min(1.0, 2.0 / (resamples + 1)))
    return floor


def significance_floor(
    family: int, *, alpha: float = 0.05, test: str = "permutation", resamples: int = 10_000
) -> int | None:
    """The fewest runs a side (n vs n) with which the comparison's smallest possible p-value,
    after Holm over ``family`` tests, is below ``alpha``; None when no n up to 1000 does.

    Holm's first step multiplies the smallest p by the family size, and an exact two-sided
    permutation test cannot go below 2 / C(2n, n): with 12 probes, 5 vs 5 runs give at best
    12 * 2/252 = 0.095, so no verdict is possible however large the tax; 6 vs 6 give 0.026.
    """
    if family < 1:
        return 2
    for n in range(2, 1001):
        if min_pvalue(n, n, test, resamples=resamples) * family < alpha:
            return n
    return None


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (controls the family-wise error rate); one family
    per row of the last axis, so simulations adjust thousands of families at once."""
    p = np.asarray(p, dtype=np.float64)
    m = p.shape[-1] if p.ndim else 0
    if m == 0:
        return p.copy()
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    stepped = np.maximum.accumulate((m - np.arange(m)) * ranked, axis=-1)
    out = np.empty_like(p)
    np.put_along_axis(out, order, np.minimum(stepped, 1.0), axis=-1)
    return out


def adjust(p: np.ndarray, method: str = "holm") -> np.ndarray:
    """Adjust a family of p-values; NaN entries stay NaN and do not count in the family."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    if not ok.any():
        return out
    if method == "holm":
        out[ok] = holm(p[ok])
    elif method == "bh":
        # heavy: statsmodels (a second of CPU to import), only for Benjamini-Hochberg
        from statsmodels.stats.multitest import multipletests

        out[ok] = multipletests(p[ok], method="fdr_bh")[1]
    elif method == "none":
        out[ok] = p[ok]
    else:
        raise ValueError(f"unknown adjustment {method!r} (choose from {', '.join(ADJUSTMENTS)})")
    return out


def best_adjusted(p: np.ndarray, floors: np.ndarray, method: str = "holm") -> np.ndarray:
    """For each test, the adjusted p-value it would get if its own raw p were at its floor.

    The other tests keep their observed p-values. If this best case is still above alpha,
    the test can never be significant in this family with these run counts.
    """
    p = np.asarray(p, dtype=np.float64)
    floors = np.asarray(floors, dtype=np.float64)
    out = np.full_like(p, np.nan)
    for i in range(p.size):
        if not np.isfinite(floors[i]):
            continue
        trial = p.copy()
        trial[i] = floors[i]
        out[i] = adjust(trial, method)[i]
    return out
