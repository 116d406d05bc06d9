"""Unequal boots a side, one boot a side, and the variance components' intervals.

- **Unequal boots.** Welch–Satterthwaite on boot means gives a side of 2 boots (1 degree of
  freedom) the degrees of freedom of the other side whenever its variance happens to come out
  small, so with 2 boots against 5 or 10 it gives more than 5% false verdicts per probe; the
  Behrens–Fisher quantile (vmtax's for unequal boots) stays under. Vectorised through vmtax's
  own functions: 20,000 A/A probes per design, and 4,000 families of 12 probes under Holm.
- **Unequal runs per boot** (what adaptive sampling makes): boot means of 2 runs beside boot
  means of 20 do not have one variance; Satterthwaite's degrees of freedom of their spread
  (``boots.boot_mean_dof``) keep the interval's coverage, B − 1 does not.
- **One boot a side**: no verdict at all in A/A with a boot effect (through ``compare``); with
  a between-boot variance from a stored profile (the ``between_boot`` hook), verdicts again,
  within alpha.
- **Variance components' intervals** (``boots.component_intervals``): coverage of the
  between-boot variance, the within-boot variance and the share, balanced and unbalanced.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from vmtax.stats import boots, intervals, significance
from vmtax.stats.compare import compare

# vectorised, but tens of thousands of simulated probes and a few hundred comparisons
pytestmark = pytest.mark.slow

ALPHA = 0.05
PROBES = 12
PER_PROBE = 20_000
FAMILIES = 4000
#: the 99.9% points of Binomial(n, 0.05) / n: a valid test stays under them
MAX_PER_PROBE = stats.binom.ppf(0.999, PER_PROBE, ALPHA) / PER_PROBE
MAX_FAMILIES = stats.binom.ppf(0.999, FAMILIES, ALPHA) / FAMILIES
MAX_PER_PROBE_48K = stats.binom.ppf(0.999, FAMILIES * PROBES, ALPHA) / (FAMILIES * PROBES)
#: (boots a side, boots on the other side)
UNEQUAL = ((2, 3), (2, 5), (2, 10), (3, 5), (3, 10), (5, 10))
#: (boot effect sd, run sd) of log run means; runs per boot 3
MIXES = ((0.02, 0.01), (0.005, 0.03), (0.0, 0.02))


def boot_means(rng, shape, n_boots, per_boot, boot_sd, run_sd):
    """(*shape, n_boots) boot means of lognormal boot effects and run noise (mean 100)."""
    b = boot_sd * rng.standard_normal((*shape, n_boots, 1))
    return (100 * np.exp(b + run_sd * rng.standard_normal((*shape, n_boots, per_boot)))).mean(-1)


def bf_pvalues(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Behrens–Fisher p-values compare gives unequal boots a side, vectorised."""
    mc, mb, vc, vb, nc, nb = intervals._log_parts(a, b)
    return intervals.behrens_fisher_pvalues(
        np.log(mc / mb), vc + vb, vc / (vc + vb), nc - 1, nb - 1
    )


def rates(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(per-probe false rate, family-wise rate of 12-probe families under Holm) of the
    Behrens–Fisher test, rows of ``a`` and ``b`` being A/A probes. A Holm family has a verdict
    exactly when its smallest p is below alpha / 12, so both rates come from the test's
    quantile (at 95% and at 1 − 0.05/12) instead of 48,000 integrated p-values."""
    mc, mb, vc, vb, nc, nb = intervals._log_parts(a, b)
    t = np.abs(np.log(mc / mb)) / np.sqrt(vc + vb)
    w = vc / (vc + vb)
    per_probe = float(np.mean(t > intervals.behrens_fisher_quantile(w, nc - 1, nb - 1)))
    q_first = intervals.behrens_fisher_quantile(w, nc - 1, nb - 1, 1 - ALPHA / PROBES)
    family = (t > q_first).reshape(-1, PROBES).any(-1)
    return per_probe, float(np.mean(family))


@pytest.mark.parametrize(("small", "large"), UNEQUAL)
def test_unequal_boots_a_side_stay_within_alpha_per_probe_and_family(small, large):
    rng = np.random.default_rng(small * 100 + large)
    for mix in MIXES:
        a = boot_means(rng, (FAMILIES * PROBES,), small, 3, *mix)
        b = boot_means(rng, (FAMILIES * PROBES,), large, 3, *mix)
        per_probe, family = rates(a, b)
        assert per_probe <= MAX_PER_PROBE_48K and family <= MAX_FAMILIES, (mix, per_probe, family)
        if small == 2 and mix == MIXES[0]:
            # the first Holm step is the whole family test: checked against the p-values
            p = bf_pvalues(a[:1200], b[:1200]).reshape(-1, PROBES)
            fam = (significance.holm(p) < ALPHA).any(-1)
            assert fam.mean() == pytest.approx(rates(a[:1200], b[:1200])[1], abs=1e-9)


def test_welch_satterthwaite_on_unequal_boots_is_anti_conservative():
    # The cause of issue 44's 0.063-0.066: at 2 boots against 10, Welch-Satterthwaite gives
    # 0.10 false verdicts per probe; the same data through Behrens-Fisher, under 0.03.
    rng = np.random.default_rng(7)
    a = boot_means(rng, (24_000,), 2, 3, 0.02, 0.01)
    b = boot_means(rng, (24_000,), 10, 3, 0.02, 0.01)
    welch = float(np.mean(intervals.ratio_pvalues(a, b) < ALPHA))
    assert welch > MAX_PER_PROBE
    assert rates(a, b)[0] < 0.03


@pytest.mark.parametrize(("small", "large"), UNEQUAL)
def test_the_unequal_boots_interval_covers(small, large):
    rng = np.random.default_rng(300 + small * 10 + large)
    a = boot_means(rng, (4000,), small, 3, 0.02, 0.01) * 1.1
    b = boot_means(rng, (4000,), large, 3, 0.02, 0.01)
    truth = 1.1  # both sides' expected boot means are alike but for the tax
    mc, mb, vc, vb, nc, nb = intervals._log_parts(a, b)
    total = vc + vb
    half = intervals.behrens_fisher_quantile(vc / total, nc - 1, nb - 1) * np.sqrt(total)
    est = np.log(mc / mb)
    cover = float(np.mean(np.abs(est - math.log(truth)) <= half))
    assert 0.93 <= cover <= 0.995, cover


def test_the_scalar_path_is_the_vectorised_one_and_the_test_is_the_intervals_dual():
    rng = np.random.default_rng(8)
    for t in range(20):
        a = boot_means(rng, (), 2, 3, 0.02, 0.01) * (1.0 + 0.05 * t)
        b = boot_means(rng, (), 5, 3, 0.02, 0.01)
        cu = boots.units(np.repeat(a, 3), np.repeat(np.arange(2), 3))
        bu = boots.units(np.repeat(b, 3), np.repeat(np.arange(5), 3))
        p = significance.boot_pvalue(cu, bu)
        assert p == pytest.approx(float(bf_pvalues(a[None], b[None])[0]), rel=1e-9)
        ci = intervals.boot_ratio_interval(cu, bu, "lower")
        assert (p < ALPHA) == (ci.low > 1 or ci.high < 1)
    # Equal boots a side keep Welch-Satterthwaite (0.94-0.98 coverage, tests/test_boots_aa.py).
    eq = boots.units(np.repeat(b[:3], 2), np.repeat(np.arange(3), 2))
    assert significance.boot_pvalue(eq, eq) == pytest.approx(1.0)


def test_unequal_runs_per_boot_take_satterthwaites_degrees_of_freedom():
    # 3 boots of 2, 2 and 20 runs a side, run noise only: the two small boots carry the spread.
    rng = np.random.default_rng(9)
    sizes = [2, 2, 20]
    ids = np.repeat(np.arange(3), sizes)
    dof = boots.boot_mean_dof(sizes, 0.0, 1.0)
    assert 1.0 < dof < 2.0
    hits_new = hits_old = 0
    trials = 1500
    for _ in range(trials):
        side = [100 * np.exp(0.03 * rng.standard_normal(ids.size)) for _ in range(2)]
        cu, bu = (boots.units(v, ids) for v in side)
        assert cu.dof < 2
        ci = intervals.boot_ratio_interval(cu, bu, "lower")
        truth = 1.0
        hits_new += ci.low <= truth <= ci.high
        old = intervals.ratio_interval(cu.values, bu.values, "lower")  # B - 1 each
        hits_old += old.low <= truth <= old.high
    assert hits_new / trials >= 0.93
    assert hits_old / trials < hits_new / trials


def one_boot_frame(rng, boots_a: int, boots_b: int, boot_sd=0.02, run_sd=0.01, runs=6):
    """An A/A frame of two guest configurations (L1 set a, b) with recorded boots, 12 probes;
    every boot, a single one too, draws its own effect."""
    rows = []
    for cid, n_boots in ((1, boots_a), (2, boots_b)):
        per = max(1, runs // n_boots)
        for k in range(PROBES):
            for b in range(n_boots):
                effect = boot_sd * rng.standard_normal()
                for r in range(per):
                    rows.append(
                        {
                            "probe": f"p{k:02d}", "config": f"L1 set={'ab'[cid - 1]}",
                            "level": "L1", "labels": {"set": "ab"[cid - 1]},
                            "boot": f"{cid}-{b}", "configuration_id": cid, "run_index": r,
                            "mean": 100 * math.exp(effect + run_sd * rng.standard_normal()),
                        }
                    )  # fmt: skip
    return pd.DataFrame(rows).assign(
        status="ok", experiment_id=1, better="lower", unit="ns", throughput_unit=None, wall_s=0.5
    )


@pytest.mark.parametrize(("boots_a", "boots_b"), [(1, 1), (1, 3), (3, 1)])
def test_one_boot_a_side_gives_no_verdict_at_all(boots_a, boots_b):
    rng = np.random.default_rng(10 + boots_a + 3 * boots_b)
    for _ in range(5):
        comp = compare(one_boot_frame(rng, boots_a, boots_b), "set=a", resamples=999)
        geo = comp.rows[comp.rows.probe == "geomean"]
        assert set(geo.verdict) == {"one boot"}  # the geomean over them is no verdict either
        rows = comp.rows[~comp.rows.is_baseline & (comp.rows.probe != "geomean")]
        assert set(rows.verdict) == {"one boot"}, rows.verdict.tolist()
        assert rows.p_value.isna().all()
        assert rows.warnings.str.contains("no verdict: .* measured in one boot").all()
        # What is known: the difference within this boot, an interval from its runs.
        assert np.isfinite(rows.ci_low.astype(float)).all()
    # The same frame with twice the boots a side gets verdicts where the tax is plain.
    frame = one_boot_frame(rng, 3, 3)
    frame.loc[frame.configuration_id == 2, "mean"] *= 1.3
    comp = compare(frame, "set=a", resamples=999)
    assert (comp.rows.verdict == "slower").sum() >= 6


def test_a_stored_between_boot_variance_lets_one_boot_a_side_give_verdicts_within_alpha():
    # The hook a noise profile plugs into: the true between-boot variance with many degrees
    # of freedom. A/A, 2% boot effects, one boot a side: per-probe false rate within alpha.
    rng = np.random.default_rng(12)
    known = boots.ExternalBetween(0.02**2, 200.0, "a test profile")
    false = total = 0
    for _ in range(8):
        comp = compare(
            one_boot_frame(rng, 1, 1), "set=a", resamples=999,
            between_boot=lambda probe, runs: known,
        )  # fmt: skip
        rows = comp.rows[~comp.rows.is_baseline & (comp.rows.probe != "geomean")]
        assert "one boot" not in set(rows.verdict)
        assert rows.warnings.str.contains("from a test profile").all()
        false += int((rows.p_value < ALPHA).sum())
        total += len(rows)
    assert false / total <= stats.binom.ppf(0.999, total, ALPHA) / total
    with pytest.raises(ValueError):
        boots.ExternalBetween(-1.0, 3.0)


def _component_coverage(rng, sizes, between, within, trials=1500):
    ids = np.repeat(np.arange(len(sizes)), sizes)
    hit = np.zeros(3)
    for _ in range(trials):
        y = np.repeat(math.sqrt(between) * rng.standard_normal(len(sizes)), sizes)
        y = y + math.sqrt(within) * rng.standard_normal(ids.size)
        ci = boots.component_intervals(y, ids)
        rho = between / (between + within)
        hit += [
            ci.between_low <= between <= ci.between_high,
            ci.within_low <= within <= ci.within_high,
            ci.share_low <= rho <= ci.share_high,
        ]
    return hit / trials


@pytest.mark.parametrize(
    "sizes",
    [[3, 3, 3], [5] * 5, [3] * 8, [2, 2, 20], [2, 3, 5, 8, 12]],
    ids=["3x3", "5x5", "8x3", "2-2-20", "2-3-5-8-12"],
)
def test_the_variance_components_intervals_cover(sizes):
    rng = np.random.default_rng(sum(sizes))
    for between, within in ((0.02**2, 0.02**2), (0.03**2, 0.01**2), (0.01**2, 0.03**2)):
        cover = _component_coverage(rng, sizes, between, within)
        assert (cover >= 0.92).all() and (cover <= 0.99).all(), (between, within, cover)


def test_a_component_interval_halved_fails_the_check():
    rng = np.random.default_rng(5)
    within = 0.02**2
    ids = np.repeat(np.arange(6), 4)
    hit = 0
    for _ in range(1500):
        y = np.repeat(0.02 * rng.standard_normal(6), 4) + 0.02 * rng.standard_normal(ids.size)
        ci = boots.component_intervals(y, ids)
        mid = (ci.within_low + ci.within_high) / 2
        quarter = (ci.within_high - ci.within_low) / 4
        hit += mid - quarter <= within <= mid + quarter
    assert hit / 1500 < 0.92


def component_table() -> dict:
    """The table of docs/statistics.md: coverage of (between, within, share) per design."""
    out = {}
    for sizes in ([3, 3, 3], [3] * 5, [3] * 8, [2, 2, 20], [2, 3, 5, 8, 12]):
        for mix in ((0.02**2, 0.02**2), (0.03**2, 0.01**2), (0.01**2, 0.03**2)):
            out[tuple(sizes), mix] = _component_coverage(
                np.random.default_rng(1), sizes, *mix, trials=4000
            )
    return out


def test_the_unrecorded_boot_prefix_is_the_stores():
    from vmtax.store.store import UNRECORDED_BOOT

    assert boots.UNRECORDED_BOOT == UNRECORDED_BOOT
