"""Adaptive sampling of a guest measured in boots stops on the interval `compare` prints: the
boot-level t interval of the mean of boot means. Played through the sampler's own loop
(``AdaptiveSampler.__call__``, its looks, ``_decide`` and the boot plan) with a simulated
measurement source in place of a guest (none can boot here at this rate): each step the
sampler hands out is 'run' at once, its run mean drawn from its boot's effect and run noise,
and stored in the frame the sampler reads back. A boot costs 60 s, a run 1 s, the target is
±3% (95%).

Two claims are checked per design (boot effect sd 0-5%, run noise 2% or 5%, lognormal):
- **coverage**: the precision claimed, the true mean (the expected boot mean) within ±3% of
  the estimate, holds in at least 0.93 of the plays; the interval stated at the stop (its
  half-width at most 3%, often less) covers at least 0.90 (0.905-0.963 measured over eight
  designs: with large boot effects the stop comes on looks whose spread came out small, the
  optional-stopping loss the run-level rule has too; docs/statistics.md gives the table);
- **cost**: the mean seconds spent (60 a boot, 1 a run) are at most 1.25 times the optimum that
  knows the true components: the fixed design of B boots of k runs, B >= 2, of least cost
  whose expected interval, ``t(B − 1) · sqrt((between + within / k) / B)``, is within 3%
  (Kalibera and Jones' problem, solved by enumeration).

With 400 plays a design, a coverage of 0.95 has a standard error of 0.011: a design covering
0.93 or more passes with high probability, and the old run-level rule (0.61-0.78 with boot
effects of 2-5%, as issue 44 measured) fails by far; so does the half-width halved
(``test_the_coverage_check_fails_a_halved_interval``).
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
MIN_COVERAGE, MIN_STATED, MAX_COST_RATIO = 0.93, 0.90, 1.25
#: (boot effect sd, run noise sd) of log run means.
#: The designs of the table in docs/statistics.md; CI plays CI_DESIGNS (400 plays each take
#: about 10-25 s of CPU here).
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
        rows: list[dict] = []
        ended: dict = {}

        def store_call(fn, _rows=rows, _ended=ended, _sampler=sampler, **kwargs):
            if fn == _sampler._runs_of:
                # object columns, as the store's frame has them (and quicker to compare)
                return pd.DataFrame(
                    {k: pd.Series([r[k] for r in _rows], dtype=object) for k in COLS}
                ).astype({"mean": float, "plan_index": int, "wall_s": float})
            if fn == _sampler._record_outcomes:
                _ended.update(kwargs["decisions"])
            return None  # looks: not kept here

        for step in sampler(0, 1, None, plan.steps_for(0), store_call):
            effect = effects.setdefault(step.boot, rng.normal(0, boot_sd))
            rows.append(
                {
                    "probe": step.entry,
                    "status": "ok",
                    "mean": math.exp(5 + effect + rng.normal(0, run_sd)),
                    "plan_index": step.index,
                    "boot_id": f"boot-{step.boot}",
                    "wall_s": RUN_S,
                }
            )
        d = ended["cpuid"]
        assert d["status"] == "precise", d
        frame = pd.DataFrame(rows)
        look = boot_design.boot_look(frame["mean"], frame["boot_id"], None, TARGET)
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
    assert got["coverage"] >= MIN_STATED, got
    assert got["cost_ratio"] <= MAX_COST_RATIO, got
    # The checks can fail: half the claimed precision does not cover.
    if boot_sd > 0:
        halved = [abs(math.log(p.mean / truth)) <= TARGET / 2 for p in plays]
        assert float(np.mean(halved)) < MIN_COVERAGE


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
