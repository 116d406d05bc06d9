"""Every overhead interval vmtax prints covers what it claims, at the run counts vmtax uses.

Vectorised simulations through vmtax's own interval functions: 4,000 comparisons per case,
n = 3, 5, 7, 10 and 20 runs a side, run means that are normal, lognormal or heavy-tailed
(Student t, 3 degrees of freedom), each made of a run-level random effect and the average of
the run's iterations. With 4,000 trials a true coverage of 0.95 has a standard error of
0.0034, so the accepted band [0.93, 0.985] is about 6 standard errors below 0.95 (no honest
method fails it by chance) and it still catches an interval that undercovers (the percentile
bootstrap vmtax used before: 0.87 at n = 5) or one inflated to be safe.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vmtax.stats import boots as boots_mod
from vmtax.stats import intervals

pytestmark = pytest.mark.fast

TRIALS = 4000
LOW, HIGH = 0.93, 0.985
TRUE_RATIO = 1.10
SHAPES = ("normal", "lognormal", "t3")


def run_means(shape: str, n: int, trials: int, mu: float, cv: float, rng) -> np.ndarray:
    """(trials, n) run means: mu x (a run-level effect) + the mean of 200 iterations' noise."""
    if shape == "normal":
        effect = 1 + cv * rng.standard_normal((trials, n))
    elif shape == "lognormal":
        s = np.sqrt(np.log1p(cv * cv))
        effect = np.exp(s * rng.standard_normal((trials, n)) - s * s / 2)
    else:
        effect = 1 + cv * rng.standard_t(3, (trials, n)) / np.sqrt(3)
    within = 0.05 * rng.standard_normal((trials, n)) / np.sqrt(200)
    return mu * (effect + within)


def coverage(low: np.ndarray, high: np.ndarray, truth: float) -> float:
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("n", [3, 5, 7, 10, 20])
def test_overhead_interval_covers(shape, n):
    rng = np.random.default_rng(n * 31 + SHAPES.index(shape))
    for cv_cfg in (0.05, 0.15):  # equal and unequal spreads
        cfg = run_means(shape, n, TRIALS, 100 * TRUE_RATIO, cv_cfg, rng)
        base = run_means(shape, n, TRIALS, 100, 0.05, rng)
        _, low, high = intervals.ratio_intervals(cfg, base)
        assert (low > 0).all()
        assert LOW <= coverage(low, high, TRUE_RATIO) <= HIGH, (shape, n, cv_cfg)


def test_the_scalar_and_vectorised_intervals_agree():
    rng = np.random.default_rng(9)
    cfg, base = (
        run_means("lognormal", 5, 20, 110, 0.05, rng),
        run_means("normal", 7, 20, 100, 0.05, rng),
    )
    est, low, high = intervals.ratio_intervals(cfg, base)
    for i in range(20):
        one = intervals.ratio_interval(cfg[i], base[i], "lower")
        assert (one.estimate, one.low, one.high) == pytest.approx((est[i], low[i], high[i]))


@pytest.mark.parametrize("n", [3, 5, 7, 10, 20])
def test_geomean_interval_covers(n):
    # Four probes with different overheads and spreads, no effect shared between them; the
    # truth is their geometric mean. Rounds as the unit, as compare computes it.
    rng = np.random.default_rng(100 + n)
    ratios = np.array([1.02, 1.10, 1.35, 2.0])
    cvs = [0.03, 0.05, 0.10, 0.08]
    truth = float(np.exp(np.log(ratios).mean()))
    cfg = np.stack(
        [
            run_means("lognormal", n, TRIALS, 100 * r, cv, rng)
            for r, cv in zip(ratios, cvs, strict=True)
        ],
        1,
    )
    base = np.stack([run_means("normal", n, TRIALS, 100, cv, rng) for cv in cvs], 1)
    _, low, high = intervals.geomean_intervals_by_round(cfg, base)
    assert LOW <= coverage(low, high, truth) <= HIGH


def _percentile_bootstrap(cfg: np.ndarray, base: np.ndarray, rng, resamples: int = 400):
    """The interval vmtax printed before: percentile bootstrap of the ratio of run means,
    each side resampled on its own (what scipy.stats.bootstrap did, vectorised here)."""
    t, n = cfg.shape
    pick_c = rng.integers(0, n, (t, resamples, n))
    pick_b = rng.integers(0, base.shape[1], (t, resamples, base.shape[1]))
    rows = np.arange(t)[:, None, None]
    ratio = cfg[rows, pick_c].mean(-1) / base[rows, pick_b].mean(-1)
    return np.percentile(ratio, 2.5, axis=1), np.percentile(ratio, 97.5, axis=1)


def test_the_old_percentile_bootstrap_fails_the_same_check():
    # The bound above is one that a real undercovering interval cannot pass.
    rng = np.random.default_rng(5)
    cfg = run_means("normal", 5, 2000, 100 * TRUE_RATIO, 0.05, rng)
    base = run_means("normal", 5, 2000, 100, 0.05, rng)
    low, high = _percentile_bootstrap(cfg, base, rng)
    assert coverage(low, high, TRUE_RATIO) < LOW


def test_an_inflated_interval_fails_the_upper_bound():
    rng = np.random.default_rng(6)
    cfg = run_means("normal", 7, TRIALS, 100 * TRUE_RATIO, 0.05, rng)
    base = run_means("normal", 7, TRIALS, 100, 0.05, rng)
    _, low, high = intervals.ratio_intervals(cfg, base, confidence=0.999)
    assert coverage(low, high, TRUE_RATIO) > HIGH


def coverage_table() -> dict[tuple[str, int], tuple[float, float]]:
    """(shape, n) -> (percentile bootstrap, t on the log ratio): the table in
    docs/statistics.md (python -c 'from tests.test_interval_coverage import ...')."""
    out = {}
    for shape in SHAPES:
        for n in (3, 5, 7, 10, 20):
            rng = np.random.default_rng(7)
            cfg = run_means(shape, n, 2000, 100 * TRUE_RATIO, 0.05, rng)
            base = run_means(shape, n, 2000, 100, 0.05, rng)
            old = coverage(*_percentile_bootstrap(cfg, base, rng), TRUE_RATIO)
            new = coverage(*intervals.ratio_intervals(cfg, base)[1:], TRUE_RATIO)
            out[shape, n] = (old, new)
    return out


def test_binomial_band_is_what_the_docstring_says():
    se = np.sqrt(0.95 * 0.05 / TRIALS)
    assert (0.95 - LOW) / se > 5.5
    assert stats.binom.cdf(LOW * TRIALS, TRIALS, 0.95) < 1e-6


# Boots: a guest level's runs share their boot's effect, so boots are the unit above runs.
BOOTS = (2, 3, 5)
RUNS_PER_BOOT = (3, 5, 7, 10)
#: (boot effect sd, run sd) of the guest's log run means: boots dominating, runs dominating.
BOOT_MIXES = ((0.02, 0.01), (0.005, 0.03))
L0_RUNS = 10


def booted(rng, trials: int, boots: int, per_boot: int, mu: float, boot_sd: float, run_sd: float):
    """(trials, boots, per_boot) run means: mu x a lognormal boot effect x lognormal run noise,
    and the true mean they are drawn around."""
    effect = np.exp(boot_sd * rng.standard_normal((trials, boots, 1)))
    runs = mu * effect * np.exp(run_sd * rng.standard_normal((trials, boots, per_boot)))
    return runs, mu * np.exp((boot_sd**2 + run_sd**2) / 2)


def _boot_case(boots, per_boot, mix, rng, trials=TRIALS):
    """A guest level in ``boots`` boots against L0's 10 runs of one boot (the truth is the
    guest's mean over boots against L0's mean in its boot)."""
    cfg, cfg_mean = booted(rng, trials, boots, per_boot, 100 * TRUE_RATIO, *mix)
    base, base_mean = booted(rng, trials, 1, L0_RUNS, 100, 0.0, 0.01)
    return cfg, base[:, 0], cfg_mean / base_mean


@pytest.mark.parametrize("boots", BOOTS)
def test_boot_level_interval_covers_with_boot_effects(boots):
    rng = np.random.default_rng(40 + boots)
    for per_boot in RUNS_PER_BOOT:
        for mix in BOOT_MIXES:
            cfg, base, truth = _boot_case(boots, per_boot, mix, rng)
            _, low, high = intervals.boot_ratio_intervals(cfg.mean(-1), base)
            assert LOW <= coverage(low, high, truth) <= HIGH, (boots, per_boot, mix)


@pytest.mark.parametrize("boots", BOOTS)
def test_boots_against_boots_interval_covers(boots):
    rng = np.random.default_rng(50 + boots)
    for per_boot in (3, 10):
        cfg, cfg_mean = booted(rng, TRIALS, boots, per_boot, 100 * TRUE_RATIO, 0.02, 0.01)
        base, base_mean = booted(rng, TRIALS, boots, per_boot, 100, 0.02, 0.01)
        # Boot means on both sides: Welch's t, as compare computes it for such a pair.
        ids = np.repeat(np.arange(boots), per_boot)
        one = intervals.boot_ratio_interval(
            boots_mod.units(cfg[0].ravel(), ids), boots_mod.units(base[0].ravel(), ids), "lower"
        )
        _, low, high = intervals.ratio_intervals(cfg.mean(-1), base.mean(-1))
        assert (one.low, one.high) == pytest.approx((low[0], high[0]))
        assert LOW <= coverage(low, high, cfg_mean / base_mean) <= HIGH, (boots, per_boot)


def test_boot_intervals_fail_halved_per_run_or_with_welch_degrees_of_freedom():
    # The band catches the intervals that ignore the boots, or their degrees of freedom.
    rng = np.random.default_rng(60)
    cfg, base, truth = _boot_case(2, 5, BOOT_MIXES[0], rng)
    est, low, high = intervals.boot_ratio_intervals(cfg.mean(-1), base)
    half = np.sqrt(high / low)  # half the log width
    assert coverage(est / np.sqrt(half), est * np.sqrt(half), truth) < LOW
    _, low, high = intervals.ratio_intervals(cfg.reshape(TRIALS, -1), base)  # runs as the unit
    assert coverage(low, high, truth) < 0.7
    _, low, high = intervals.ratio_intervals(cfg.mean(-1), base)  # Welch-Satterthwaite
    assert coverage(low, high, truth) < LOW


def test_the_scalar_and_vectorised_boot_intervals_agree():
    rng = np.random.default_rng(61)
    cfg, base, _ = _boot_case(3, 4, BOOT_MIXES[0], rng, trials=10)
    est, low, high = intervals.boot_ratio_intervals(cfg.mean(-1), base)
    for i in range(10):
        ids = np.repeat(["a", "b", "c"], 4)
        one = intervals.boot_ratio_interval(
            boots_mod.units(cfg[i].ravel(), ids), boots_mod.units(base[i], None), "lower"
        )
        assert (one.estimate, one.low, one.high) == pytest.approx((est[i], low[i], high[i]))


def boot_coverage_table() -> dict[tuple[int, int, tuple[float, float]], tuple[float, ...]]:
    """(boots, runs per boot, mix) -> (runs as the unit, boot means with Welch's degrees of
    freedom, boot means with the Behrens-Fisher quantile): the table in docs/statistics.md."""
    out = {}
    for b in BOOTS:
        for r in RUNS_PER_BOOT:
            for mix in BOOT_MIXES:
                cfg, base, truth = _boot_case(b, r, mix, np.random.default_rng(7))
                flat = intervals.ratio_intervals(cfg.reshape(TRIALS, -1), base)[1:]
                welch = intervals.ratio_intervals(cfg.mean(-1), base)[1:]
                bf = intervals.boot_ratio_intervals(cfg.mean(-1), base)[1:]
                out[b, r, mix] = tuple(coverage(*ci, truth) for ci in (flat, welch, bf))
    return out


# The geomean: the probes of a round (or a boot) share its effect.
ROUND_SD = 0.04


def shared_rounds(rng, trials: int, probes: int, rounds: int, round_sd: float = ROUND_SD):
    """(trials, probes, rounds) for the configuration and the baseline: a 4% effect per round
    on the configuration's side, shared by all its probes, and run noise of 3-10% per probe."""
    ratios = np.exp(np.linspace(np.log(1.02), np.log(2.0), probes))
    cvs = np.linspace(0.03, 0.10, probes)[None, :, None]
    shared = np.exp(round_sd * rng.standard_normal((trials, 1, rounds)))
    cfg = 100 * ratios[None, :, None] * shared * np.exp(cvs * rng.standard_normal(shared.shape))
    base = 100 * np.exp(cvs * rng.standard_normal((trials, probes, rounds)))
    truth_log = np.log(ratios) + round_sd**2 / 2  # the run noise is the same on both sides
    return cfg, base, float(np.exp(truth_log.mean()))


def independent_geomean(cfg: np.ndarray, base: np.ndarray):
    """The geomean interval compare printed before: the probes' log-ratio variances summed as
    if independent (Welch-Satterthwaite), vectorised."""
    n = cfg.shape[-1]
    mc, mb = cfg.mean(-1), base.mean(-1)
    k = cfg.shape[-2]
    vc = cfg.var(-1, ddof=1) / (n * mc * mc) / k**2
    vb = base.var(-1, ddof=1) / (n * mb * mb) / k**2
    total = (vc + vb).sum(-1)
    df = total**2 / ((vc**2 + vb**2) / (n - 1)).sum(-1)
    half = stats.t.ppf(0.975, df) * np.sqrt(total)
    log_est = np.log(mc / mb).mean(-1)
    return np.exp(log_est - half), np.exp(log_est + half)


@pytest.mark.parametrize("probes", [4, 12])
def test_geomean_covers_with_shared_round_effects(probes):
    rng = np.random.default_rng(70 + probes)
    for rounds in (3, 5, 10):
        cfg, base, truth = shared_rounds(rng, TRIALS, probes, rounds)
        est, low, high = intervals.geomean_intervals_by_round(cfg, base)
        assert LOW <= coverage(low, high, truth) <= HIGH, (probes, rounds)
        half = np.sqrt(np.sqrt(high / low))  # exp of half the log half-width
        assert coverage(est / half, est * half, truth) < LOW
        # The interval that took the probes as independent undercovers, more so with more
        # probes (their shared part does not average out).
        assert coverage(*independent_geomean(cfg, base), truth) < LOW


def test_geomean_covers_with_shared_boot_effects():
    # A guest in 3 boots whose effect (2%) every probe shares, against L0's 10 runs.
    rng = np.random.default_rng(80)
    probes, nboots, per_boot = 12, 3, 5
    ratios = np.exp(np.linspace(np.log(1.02), np.log(2.0), probes))[None, :, None, None]
    effect = np.exp(0.02 * rng.standard_normal((TRIALS, 1, nboots, 1)))
    cfg = (
        100
        * ratios
        * effect
        * np.exp(0.03 * rng.standard_normal((TRIALS, probes, nboots, per_boot)))
    )
    base = 100 * np.exp(0.03 * rng.standard_normal((TRIALS, probes, L0_RUNS)))
    truth = float(np.exp(np.log(ratios).mean() + 0.02**2 / 2))
    _, low, high = intervals.geomean_intervals_by_round(cfg.mean(-1), base, behrens_fisher=True)
    assert LOW <= coverage(low, high, truth) <= HIGH


def test_the_scalar_and_vectorised_geomeans_agree():
    rng = np.random.default_rng(81)
    cfg, base, _ = shared_rounds(rng, 5, 4, 6)
    est, low, high = intervals.geomean_intervals_by_round(cfg, base)
    rounds = np.arange(6)
    for i in range(5):
        logs = [np.log(c.mean() / b.mean()) for c, b in zip(cfg[i], base[i], strict=True)]
        one = intervals.geomean_clustered(
            logs, [(c, rounds) for c in cfg[i]], [(b, rounds) for b in base[i]]
        )
        assert (one.estimate, one.low, one.high) == pytest.approx((est[i], low[i], high[i]))


def geomean_coverage_table() -> dict[tuple[int, int], tuple[float, float]]:
    """(probes, rounds) -> (independent probes, rounds as the unit): docs/statistics.md."""
    out = {}
    for k in (4, 12):
        for r in (3, 5, 10):
            cfg, base, truth = shared_rounds(np.random.default_rng(7), TRIALS, k, r)
            old = coverage(*independent_geomean(cfg, base), truth)
            new = coverage(*intervals.geomean_intervals_by_round(cfg, base)[1:], truth)
            out[k, r] = (old, new)
    return out
