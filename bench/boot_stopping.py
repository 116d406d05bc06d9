"""Stopping rules for a guest measured in boots: what the interval stated at the stop covers,
and what each rule costs against the optimum that knows the variance components.

The interval stated at the stop is the one `vmtax compare` prints for the side: Student's t
with B − 1 degrees of freedom on the boot means. Adaptive sampling stops when it is within
the target (docs/statistics.md, "Guests in boots"). This bench weighs other stopping rules on
a model of that loop, fast enough to play thousands of experiments a rule: log boot means
``b + mean of k run noises`` (boot effect sd ``between``, run noise sd ``within``), three
planned boots filled to the first-stage runs (``boot_design.first_stage_runs``), then looks
that plan new boots as ``boot_design.plan_boots`` does (the cheapest m boots of k runs whose
predicted interval is within MARGIN of the target, at most GROWTH times the boots a look
has). The model takes the boot means with equal weights and B − 1 degrees of freedom where
the loop uses Satterthwaite's; its "current" row is within simulation error of the loop's own
figures (tests/test_sampling_boots.py). A boot costs 60 s, a run 1 s, the target is ±3%.

Rules:
- current: stop at the first look, from 3 boots, whose interval is within the target;
- planned: a look may stop only once its boots reach what the look before planned in full
  (not at a look the growth cap cut short);
- stein: the boots are planned from the first look's spread and taken at once, with no look
  in between (Stein's two stages, the interval stated still compare's);
- margin 0.70: ``planned`` with plans aiming at 0.70 of the target;
- floor 4: no stop before 4 boots;
- strict early: a look at B boots stops only within ``c(B)`` of the target, c rising from 0.6
  at 3 boots to 1 at 10, the first boots' runs sized for 0.42 of the target, ``planned``;
- variance bound: ``planned`` with plans from the spread's 50% upper confidence bound;
- detected: once the F test detects a boot effect (5%), no stop before twice the boots of
  that look;
- known, from B0: knows the components, runs the optimum's runs per boot and stops at the
  first boot from B0 on whose interval is within the target.

Example:
    python bench/boot_stopping.py --plays 1000
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np
from scipy import stats

from vmtax.sampling import boot_design
from vmtax.stats.boots import MAX_RUNS_PER_BOOT

TARGET, BOOT_S, RUN_S = 0.03, 60.0, 1.0
DESIGNS = ((0.0, 0.02), (0.0, 0.05), (0.05, 0.02), (0.05, 0.05))
_TQ = stats.t.ppf(0.975, np.arange(1, 3000))
KS = np.arange(1, MAX_RUNS_PER_BOOT + 1)  # the runs per boot a plan may choose


def tq(dof):
    return _TQ[np.maximum(np.asarray(dof, dtype=int), 1) - 1]


def optimum(between: float, within: float) -> float:
    """Seconds of the cheapest fixed design whose expected interval is within the target."""
    best = math.inf
    for b in range(2, 400):
        ok = np.flatnonzero(tq(b - 1) * np.sqrt((between + within / KS) / b) <= TARGET)
        if ok.size:
            best = min(best, b * (BOOT_S + KS[ok[0]] * RUN_S))
    return best


def plan(boots: int, log_var: float, between: float, within: float, margin: float, c):
    """(boots in the whole plan, boots this look takes, runs per boot): plan_boots' search."""
    best = None
    for m in range(1, boot_design.MAX_NEW_BOOTS + 1):
        n = boots + m
        half = tq(n - 1) * np.sqrt((boots * boots * log_var + m * (between + within / KS)) / n**2)
        ok = np.flatnonzero(half <= margin * c(n) * TARGET)
        if ok.size:
            cost = m * (BOOT_S + KS[ok[0]] * RUN_S)
            if best is None or cost < best[0]:
                best = (cost, m, int(KS[ok[0]]))
        if best is not None and m * BOOT_S > best[0]:
            break
    most = max(1, math.ceil(boot_design.GROWTH * boots) - boots)
    if best is None:
        k = boot_design.kalibera_jones(between, within, BOOT_S, RUN_S)
        return boot_design.MAX_NEW_BOOTS, most, k
    return best[1], min(best[1], most), best[2]


def play(rng, boot_sd: float, run_sd: float, rule: dict) -> tuple[bool, int, float]:
    """One experiment: (stated interval covers, boots, seconds)."""
    margin = rule.get("margin", boot_design.MARGIN)
    c: Callable[[int], float] = rule.get("c", lambda b: 1.0)
    mode = rule.get("mode", "current")
    floor = rule.get("floor", boot_design.BOOT_FLOOR)
    effects: list[float] = []
    runs: list[list[float]] = []

    def add(i: int, n: int) -> None:
        runs[i].extend(rng.normal(0, run_sd, n).tolist())

    def within() -> float:
        ss = sum(float(((np.array(r) - np.mean(r)) ** 2).sum()) for r in runs if len(r) > 1)
        dof = sum(len(r) - 1 for r in runs)
        return ss / dof if dof > 0 else math.nan

    share = rule.get("first_stage", boot_design.FIRST_STAGE_MARGIN)
    for b in range(floor):
        effects.append(rng.normal(0, boot_sd))
        runs.append([])
        add(b, 2)
        for _ in range(8):  # adaptive._FILL_LOOKS: at most doubling the boot's runs a look
            w = within()
            q = float(tq(floor - 1))
            need = math.ceil(q * q * w / (floor * (share * TARGET) ** 2)) if w > 0 else 0
            k1 = min(100, max(boot_design.FIRST_STAGE_MIN, need))
            more = min(k1 - len(runs[b]), max(len(runs[b]), 1))
            if more <= 0:
                break
            add(b, more)
    planned, detected = floor, None
    while True:
        boots = len(runs)
        means = np.array([e + np.mean(r) for e, r in zip(effects, runs, strict=True)])
        s2 = float(means.var(ddof=1))
        half = float(tq(boots - 1)) * math.sqrt(s2 / boots)
        w = within()
        sizes = np.array([len(r) for r in runs])
        precise = half <= c(boots) * TARGET
        if mode != "current" and boots < planned:
            precise = False
        if rule.get("detect"):
            f = float(np.mean(sizes)) * s2 / w if w > 0 else math.inf
            if detected is None and f > stats.f.ppf(0.95, boots - 1, int(sizes.sum()) - boots):
                detected = boots
            if detected is not None and boots < rule["detect"] * detected:
                precise = False
        if precise or boots >= 300:
            break
        inflate = 1.0
        if rule.get("bound"):
            inflate = (boots - 1) / stats.chi2.ppf(rule["bound"], boots - 1)
        between = max(0.0, s2 * inflate - w * float(np.mean(1 / sizes)))
        full, m, k = plan(boots, s2 * inflate / boots, between, w, margin, c)
        if mode in ("planned", "stein"):
            planned = boots + full
        if mode == "stein":
            m = full
        if len(runs[-1]) < k:  # the current boot is topped up to the new boots' runs
            add(boots - 1, k - len(runs[-1]))
        for _ in range(m):
            effects.append(rng.normal(0, boot_sd))
            runs.append([])
            add(len(runs) - 1, k)
    covered = abs(float(means.mean())) <= half
    return covered, len(runs), BOOT_S * len(runs) + RUN_S * sum(len(r) for r in runs)


def known(boot_sd: float, run_sd: float, first: int, plays: int, seed: int):
    """The rule that knows the components: (coverage, seconds / optimum)."""
    k = 1
    best = math.inf
    for b in range(2, 400):
        ok = np.flatnonzero(tq(b - 1) * np.sqrt((boot_sd**2 + run_sd**2 / KS) / b) <= TARGET)
        if ok.size and b * (BOOT_S + KS[ok[0]]) < best:
            best, k = b * (BOOT_S + KS[ok[0]]), int(KS[ok[0]])
    rng = np.random.default_rng(seed)
    y = rng.normal(0, math.sqrt(boot_sd**2 + run_sd**2 / k), (plays, 300))
    n = np.arange(1, 301)
    mean = np.cumsum(y, 1) / n
    var = (np.cumsum(y * y, 1) - n * mean**2) / np.maximum(n - 1, 1)
    half = tq(n - 1) * np.sqrt(np.maximum(var, 0) / n)
    stop = ((half <= TARGET) & (n >= first)).argmax(1)
    rows = np.arange(plays)
    covered = np.abs(mean[rows, stop]) <= half[rows, stop]
    return float(covered.mean()), float(((stop + 1) * (BOOT_S + k * RUN_S)).mean() / best)


def early(b: int) -> float:
    return 1.0 if b >= 10 else 0.6 + 0.4 * (b - 3) / 7


RULES = {
    "current": {},
    "planned": {"mode": "planned"},
    "stein": {"mode": "stein"},
    "margin 0.70": {"mode": "planned", "margin": 0.7},
    "floor 4": {"floor": 4},
    "strict early": {"mode": "planned", "c": early, "first_stage": 0.42},
    "variance bound": {"mode": "planned", "bound": 0.5},
    "detected": {"detect": 2.0},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plays", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--rules", default=",".join(RULES), help="comma-separated rule names")
    args = ap.parse_args()
    cols = [f"{b * 100:.0f}%/{r * 100:.0f}%" for b, r in DESIGNS]
    print(f"{'rule':<16}" + "".join(f"{c:>22}" for c in cols))
    print(f"{'':<16}" + "".join(f"{'stated  cost/optimum':>22}" for _ in cols))
    for name in args.rules.split(","):
        cells = []
        for boot_sd, run_sd in DESIGNS:
            rng = np.random.default_rng(args.seed)
            got = [play(rng, boot_sd, run_sd, RULES[name]) for _ in range(args.plays)]
            cover = np.mean([g[0] for g in got])
            ratio = np.mean([g[2] for g in got]) / optimum(boot_sd**2, run_sd**2)
            cells.append(f"{cover:>14.3f}  {ratio:>6.2f}")
        print(f"{name:<16}" + "".join(cells), flush=True)
    for first in (3, 4, 7, 12):
        cells = []
        for boot_sd, run_sd in DESIGNS:
            cover, ratio = known(boot_sd, run_sd, first, 20 * args.plays, args.seed)
            cells.append(f"{cover:>14.3f}  {ratio:>6.2f}")
        print(f"{f'known, from {first}':<16}" + "".join(cells))


if __name__ == "__main__":
    main()
