"""Adaptive sampling of a guest measured in boots stops on the interval `compare` prints: the
boot-level t interval of the mean of boot means. Played through the sampler's own loop
(``AdaptiveSampler.__call__``, its looks, ``_decide`` and the boot plan) with a simulated
measurement source in place of a guest (none can boot here at this rate): each step the
sampler hands out is 'run' at once, its run mean drawn from its boot's effect and run noise,
and stored in the frame the sampler reads back. A boot costs 60 s, a run 1 s, the target is
±3% (95%).

Two claims are checked per design (boot effect sd 0-5%, run noise 2% or 5%, lognormal):
- **coverage**: the precision claimed, the true mean (the expected boot mean) within ±3% of
  the estimate, holds in at least 0.93 of the plays. The interval stated at the stop (its
  half-width at most 3%, often less) covers as well as it does for the rule that knows the
  true components and stops at the first boot, from the third, whose interval is within the
  target (``known_rule_coverage``: 0.95 without a boot effect, 0.94, 0.92 and 0.90 with boot
  effects of 2%, 3% and 5%), less simulation error. Below 0.95 that is the loss of stopping
  when the interval happens to be narrow (optional stopping), which knowing the components
  does not remove; docs/statistics.md shows why no stopping rule on this interval gets 0.93
  with boot effects of 3-5% within the cost below, and gives the table;
- **cost**: the mean seconds spent (60 a boot, 1 a run) are at most 1.25 times the optimum that
  knows the true components: the fixed design of B boots of k runs, B >= 2, of least cost
  whose expected interval, ``t(B − 1) · sqrt((between + within / k) / B)``, is within 3%
  (Kalibera and Jones' problem, solved by enumeration).

With 400 plays a design, a coverage of 0.90 has a standard error of 0.015 (0.011 at 0.95): the
stated interval may fall 2.33 of them (one-sided 1%) below the known rule's coverage. The old
run-level rule (0.61-0.78 with boot effects of 2-5%, as issue 44 measured) fails by far; so
does half the claimed precision (checked in the same test).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import parse_suite
from vmtax.sampling import boot_design
from vmtax.sampling.adaptive import AdaptiveSampler

pytestmark = pytest.mark.slow

BOOT_S, RUN_S, TARGET = 60.0, 1.0, 0.03
PLAYS = 400
MIN_COVERAGE, MAX_COST_RATIO = 0.93, 1.25
#: The stated interval may cover this many standard errors of PLAYS plays (one-sided 1%) less
#: than it does for the rule that knows the components (``known_rule_coverage``).
STATED_Z = 2.33
#: (boot effect sd, run noise sd) of log run means.
#: The designs of the table in docs/statistics.md; CI plays CI_DESIGNS (400 plays each take
#: about 10-20 s of CPU here).
DESIGNS = (
    (0.0, 0.02),
    (0.01, 0.02),
    (0.02, 0.02),
    (0.03, 0.02),
    (0.05, 0.02),
    (0.0, 0.05),
    (0.02, 0.05),
    (0.05, 0.05),
)

CI_DESIGNS = ((0.0, 0.02), (0.02, 0.02), (0.05, 0.02), (0.0, 0.05))

SUITE = """
name = "boots"
precision = "3%"
min_runs = {min_runs}
[defaults]
timeout = 30
[[probes]]
probe = "cpuid"
"""


COLS = ("probe", "status", "mean", "plan_index", "boot_id", "wall_s")
DTYPES = {"probe": object, "status": object, "mean": float, "plan_index": np.int64,
          "boot_id": object, "wall_s": float}  # fmt: skip


@dataclass(frozen=True)
class Play:
    boots: int
    runs: int
    seconds: float
    mean: float
    half_width: float
    covered: bool  # by the interval stated at the stop (half-width <= the target)
    claimed: bool  # by the precision claimed: the estimate within ±target of the truth


def optimum(between: float, within: float, target: float = TARGET) -> tuple[int, int, float]:
    """(boots, runs per boot, seconds) of the cheapest fixed design that knows the true
    components: Kalibera and Jones' problem with the t quantile of B boots."""
    best = (0, 0, math.inf)
    for b in range(2, 400):
        q = stats.t.ppf(0.975, b - 1)
        for k in range(1, 401):
            if q * math.sqrt((between + within / k) / b) <= target:
                cost = b * (BOOT_S + k * RUN_S)
                if cost < best[2]:
                    best = (b, k, cost)
                break
    return best


def known_rule_coverage(
    between: float, within: float, first: int = boot_design.BOOT_FLOOR, plays: int = 10_000
) -> float:
    """The coverage of the interval stated at the stop for the rule that knows the components:
    each boot gets the optimum's runs, and it stops at the first boot, from ``first`` on, whose
    interval (t with B − 1 degrees of freedom on the boot means) is within the target. What it
    loses below 0.95 is the optional-stopping loss, which no knowledge of the components
    removes at that floor."""
    _, k, _ = optimum(between, within)
    most = 200
    rng = np.random.default_rng(0)
    y = rng.normal(0.0, math.sqrt(between + within / k), (plays, most))
    n = np.arange(1, most + 1)
    mean = np.cumsum(y, axis=1) / n
    var = (np.cumsum(y * y, axis=1) - n * mean**2) / np.maximum(n - 1, 1)
    half = stats.t.ppf(0.975, np.maximum(n - 1, 1)) * np.sqrt(np.maximum(var, 0.0) / n)
    within_target = (half <= TARGET) & (n >= first)
    assert within_target.any(axis=1).all()
    stop = within_target.argmax(axis=1)
    rows = np.arange(plays)
    return float(np.mean(np.abs(mean[rows, stop]) <= half[rows, stop]))


def stated_floor(boot_sd: float, run_sd: float) -> float:
    """The least coverage the interval stated at the stop may show in PLAYS plays."""
    ref = known_rule_coverage(boot_sd**2, run_sd**2)
    return ref - STATED_Z * math.sqrt(ref * (1 - ref) / PLAYS)


def play_many(store, boot_sd: float, run_sd: float, plays: int, seed: int, min_runs: int = 6):
    """``plays`` experiments of one guest probe (3 planned boots of ``min_runs`` runs in all)
    through the sampler's loop; returns the plays."""
    specs = [{"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": 3}]
    plan = build_plan(
        parse_suite(SUITE.format(min_runs=min_runs), "s.toml"), source="s", seed=seed,
        targets=specs,
    )  # fmt: skip
    plan.sampling["boot_cost_s"] = BOOT_S
    plan.sampling["budget_s"] = None
    exp = store.create_experiment(
        command=["vmtax"], suite="s", seed=seed, plan=plan.to_dict(),
        vmtax_version="test", agent_version=None,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    truth = math.exp(5 + (boot_sd**2 + run_sd**2) / 2)
    out = []
    for _ in range(plays):
        sampler = AdaptiveSampler(store, plan, exp, sample_noise=lambda target: {})
        effects: dict[int, float] = {}
        cols: dict[str, list] = {k: [] for k in COLS}
        ended: dict = {}

        def store_call(fn, _cols=cols, _ended=ended, _sampler=sampler, **kwargs):
            if fn == _sampler._runs_of:
                # the dtypes the store's frame has (object, float, int)
                return pd.DataFrame(
                    {k: np.array(v, dtype=DTYPES[k]) for k, v in _cols.items()}, copy=False
                )
            if fn == _sampler._record_outcomes:
                _ended.update(kwargs["decisions"])
            return None  # looks: not kept here

        for step in sampler(0, 1, None, plan.steps_for(0), store_call):
            effect = effects.setdefault(step.boot, rng.normal(0, boot_sd))
            for k, v in zip(
                COLS,
                (step.entry, "ok", math.exp(5 + effect + rng.normal(0, run_sd)), step.index,
                 f"boot-{step.boot}", RUN_S),
                strict=True,
            ):  # fmt: skip
                cols[k].append(v)
        d = ended["cpuid"]
        assert d["status"] == "precise", d
        look = boot_design.boot_look(np.array(cols["mean"]), cols["boot_id"], None, TARGET)
        assert look.half_width == pytest.approx(d["half_width"]) and look.half_width <= TARGET
        lo, hi = look.mean * math.exp(-look.half_width), look.mean * math.exp(look.half_width)
        out.append(
            Play(
                boots=look.boots,
                runs=look.n,
                seconds=look.boots * BOOT_S + look.n * RUN_S,
                mean=look.mean,
                half_width=look.half_width,
                covered=lo <= truth <= hi,
                claimed=abs(math.log(look.mean / truth)) <= TARGET,
            )
        )
    return out, truth


def summary(plays: list[Play], boot_sd: float, run_sd: float) -> dict[str, float]:
    b, k, best = optimum(boot_sd**2, run_sd**2)
    return {
        "coverage": float(np.mean([p.covered for p in plays])),
        "claimed": float(np.mean([p.claimed for p in plays])),
        "boots": float(np.median([p.boots for p in plays])),
        "runs": float(np.median([p.runs for p in plays])),
        "seconds": float(np.mean([p.seconds for p in plays])),
        "optimum_boots": b,
        "optimum_k": k,
        "optimum_seconds": best,
        "cost_ratio": float(np.mean([p.seconds for p in plays])) / best,
    }


@pytest.mark.parametrize(("boot_sd", "run_sd"), CI_DESIGNS)
def test_the_claimed_precision_covers_and_costs_near_the_optimum(store, boot_sd, run_sd):
    plays, truth = play_many(store, boot_sd, run_sd, PLAYS, seed=int(1000 * boot_sd + 7 * run_sd))
    got = summary(plays, boot_sd, run_sd)
    assert got["claimed"] >= MIN_COVERAGE, got
    assert got["coverage"] >= stated_floor(boot_sd, run_sd), got
    assert got["cost_ratio"] <= MAX_COST_RATIO, got
    # The checks can fail: half the claimed precision does not cover.
    if boot_sd > 0:
        halved = [abs(math.log(p.mean / truth)) <= TARGET / 2 for p in plays]
        assert float(np.mean(halved)) < MIN_COVERAGE


def test_knowing_the_components_leaves_the_optional_stopping_loss_of_three_boots():
    # The reference of the stated interval: with no boot effect it covers 0.95; with a 5% boot
    # effect, stopping from the third boot on loses 5 points however well the components are
    # known, and only a floor near the optimum's boots (14) gets them back.
    assert known_rule_coverage(0.0, 0.02**2) >= 0.94
    assert known_rule_coverage(0.05**2, 0.02**2) < 0.92
    assert known_rule_coverage(0.05**2, 0.02**2, first=12) >= 0.94


def test_the_optimum_is_kalibera_and_jones_k_for_many_boots():
    # From scratch and with many boots, the enumeration's k is the paper's closed form.
    between, within = 0.01**2, 0.05**2
    b, k, _ = optimum(between, within, target=0.005)
    assert b > 20
    assert abs(k - math.sqrt(BOOT_S / RUN_S * within / between)) <= 1.5


def table(store, plays: int = PLAYS) -> list[tuple]:
    """The table of docs/statistics.md: one row per design."""
    rows = []
    for boot_sd, run_sd in DESIGNS:
        got = summary(play_many(store, boot_sd, run_sd, plays, seed=3)[0], boot_sd, run_sd)
        rows.append((boot_sd, run_sd, got))
    return rows
