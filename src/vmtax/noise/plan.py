"""Designs from a noise profile: how many boots, and runs in each, reach a target precision
for the least time (Kalibera and Jones, "Rigorous benchmarking in reasonable time", ISMM 2013).

A configuration measured in ``k`` boots of ``r`` runs has a boot-level mean whose log has the
variance ``(between + within / r) / k`` and costs ``k (c_boot + r c_run)`` seconds. For a given
cost the variance is least at ``r* = sqrt(c_boot · within / (c_run · between))`` (Kalibera and
Jones' optimum); the boots are then the fewest whose 95% t interval (``k − 1`` degrees of
freedom, as the boot-level interval has) is at most the target:
``t(0.975, k − 1) · sqrt((between + within / r) / k) ≤ log(1 + target)``. Whole runs: the two
whole numbers on each side of ``r*`` and their neighbours are tried; whole boots overshoot the
target (most at the two or three boots a loose target needs, where ``t`` is large), so each
candidate's runs are then trimmed to the fewest that reach the target in its boots, and the
cheapest design that reaches the target is kept. ``tests/test_noise.py`` checks it against a
brute-force search over every ``(k, r)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The most runs per boot a design uses (no boot effect: the formula's infinity).
MAX_RUNS_PER_BOOT = 100
#: The most boots a design plans (`vmtax run --boots` takes up to 1000).
MAX_BOOTS = 1000
#: The fewest boots a boot-level interval can have.
MIN_BOOTS = 2
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Design:
    """``boots`` boots of ``runs_per_boot`` runs: ``seconds`` in all, and the relative
    half-width its boot-level interval is expected to reach (``reached``: at most the
    target, within :data:`MAX_BOOTS`)."""

    boots: int
    runs_per_boot: int
    seconds: float
    half_width: float
    reached: bool
    optimum_runs: float  # Kalibera and Jones' r*, before rounding (inf: no boot effect)


def optimum_runs(between: float, within: float, boot_cost_s: float, run_cost_s: float) -> float:
    """Kalibera and Jones' runs per boot, ``sqrt(c_boot · within / (c_run · between))``."""
    if not (boot_cost_s > 0 and run_cost_s > 0):
        raise ValueError(f"costs must be positive, got boot {boot_cost_s}, run {run_cost_s}")
    if not (between >= 0 and within >= 0):
        raise ValueError(f"variances must be at least 0, got {between}, {within}")
    if between == 0:
        return math.inf
    return math.sqrt(boot_cost_s * within / (run_cost_s * between))


def half_width(
    between: float, within: float, boots: int, runs: int, confidence: float = CONFIDENCE
) -> float:
    """The expected relative half-width of the boot-level interval of ``boots`` × ``runs``."""
    from scipy import stats  # heavy: scipy.stats, only where a profile's numbers are asked for

    t = float(stats.t.ppf(0.5 + confidence / 2, boots - 1))
    return math.expm1(t * math.sqrt((between + within / runs) / boots))


def _boots_needed(
    variances: np.ndarray, target: float, confidence: float, max_boots: int
) -> np.ndarray:
    """For each boot-mean variance, the fewest boots (>= 2) whose interval reaches the target,
    or ``max_boots + 1`` when none within ``max_boots`` does."""
    from scipy import stats  # heavy: scipy.stats, only where a profile's numbers are asked for

    k = np.arange(MIN_BOOTS, max_boots + 1)
    t = stats.t.ppf(0.5 + confidence / 2, k - 1)
    goal = math.log1p(target)
    ok = t[None, :] * np.sqrt(np.asarray(variances)[:, None] / k[None, :]) <= goal
    first = np.where(ok.any(axis=1), ok.argmax(axis=1) + MIN_BOOTS, max_boots + 1)
    return first.astype(int)


def _need(
    probes: Sequence[tuple[float, float, float]],
    rs: np.ndarray,
    target: float,
    confidence: float,
    max_boots: int,
) -> np.ndarray:
    """The boots each runs per boot in ``rs`` needs for every probe to reach the target."""
    need = np.zeros(rs.size, dtype=int)
    for b, w, _ in probes:
        need = np.maximum(need, _boots_needed(b + w / rs, target, confidence, max_boots))
    return need


def design(
    between: float,
    within: float,
    boot_cost_s: float,
    run_cost_s: float,
    target: float,
    *,
    confidence: float = CONFIDENCE,
    max_boots: int = MAX_BOOTS,
) -> Design:
    """Kalibera and Jones' design for one probe (see the module's docstring)."""
    return joint([(between, within, run_cost_s)], boot_cost_s, target, confidence=confidence,
                 max_boots=max_boots, candidates="optimum")  # fmt: skip


def joint(
    probes: Sequence[tuple[float, float, float]],
    boot_cost_s: float,
    target: float,
    *,
    confidence: float = CONFIDENCE,
    max_boots: int = MAX_BOOTS,
    candidates: str = "all",
) -> Design:
    """One design for several probes measured in the same boots (``probes``: their
    ``(between, within, run cost)``): a boot holds ``r`` runs of every probe, so it costs
    ``c_boot + r · Σ c_run``, and the boots are the most any probe needs.

    With several probes there is no closed form (each has its own ``r*``): every ``r`` from
    1 to :data:`MAX_RUNS_PER_BOOT` is tried (``candidates="all"``); for one probe
    (``"optimum"``) only the whole numbers around ``r*``."""
    if not probes:
        raise ValueError("a design needs at least one probe")
    if not (target > 0):
        raise ValueError(f"the target half-width must be positive, got {target}")
    run_cost = float(sum(c for _, _, c in probes))
    if candidates == "optimum":
        b, w, c = probes[0]
        best = optimum_runs(b, w, boot_cost_s, c)
        # r* beyond the most runs a boot may hold: the most it may hold is the best left
        base = MAX_RUNS_PER_BOOT if not math.isfinite(best) else min(best, MAX_RUNS_PER_BOOT)
        around = {math.floor(base) + d for d in (-1, 0, 1, 2)}
        rs = np.array(sorted(r for r in around if 1 <= r <= MAX_RUNS_PER_BOOT))
    else:
        rs = np.arange(1, MAX_RUNS_PER_BOOT + 1)
        best = math.nan
    need = _need(probes, rs, target, confidence, max_boots)
    # Whole boots overshoot: the boots r* needs may reach the target with fewer runs in
    # each (at the two or three boots a loose target needs, by far). Each candidate's boots
    # are kept and its runs trimmed to the fewest that still reach the target there.
    trimmed = []
    for r, k in zip(rs, need, strict=True):
        if k <= max_boots:
            fewer = np.arange(1, r + 1)
            ok = _need(probes, fewer, target, confidence, max_boots) <= k
            trimmed.append(int(fewer[ok.argmax()]) if ok.any() else int(r))
        else:
            trimmed.append(int(r))
    rs = np.array(sorted(set(rs.tolist()) | set(trimmed)))
    need = _need(probes, rs, target, confidence, max_boots)
    reached = need <= max_boots
    boots = np.minimum(need, max_boots)
    cost = boots * (boot_cost_s + rs * run_cost)
    # Among designs that reach the target the cheapest; if none does, the most precise at
    # the most boots.
    if reached.any():
        i = int(np.flatnonzero(reached)[np.argmin(cost[reached])])
    else:
        worst = [max(b + w / r for b, w, _ in probes) for r in rs]
        i = int(np.argmin(worst))
    r, k = int(rs[i]), int(boots[i])
    hw = max(half_width(b, w, k, r, confidence) for b, w, _ in probes)
    opt = best if len(probes) == 1 and candidates == "optimum" else math.nan
    return Design(k, r, float(cost[i]), hw, bool(reached[i]), opt)


def within_budget(
    probes: Sequence[tuple[float, float, float]],
    boot_cost_s: float,
    budget_s: float,
    *,
    configurations: int = 1,
    confidence: float = CONFIDENCE,
) -> Design | None:
    """The most precise design whose ``configurations`` guest configurations all fit in
    ``budget_s`` (a boot holds ``r`` runs of every probe), or None when not even
    :data:`MIN_BOOTS` boots of one run each fit. ``reached`` is False: it is what the budget
    allows, not a target met. Searched over every boot count (a few hundred at most), since
    the cost and the interval's t both change with it."""
    run_cost = float(sum(c for _, _, c in probes))
    best: Design | None = None
    per_configuration = budget_s / configurations
    for k in range(MIN_BOOTS, MAX_BOOTS + 1):
        r = min(MAX_RUNS_PER_BOOT, math.floor((per_configuration / k - boot_cost_s) / run_cost))
        if r < 1:
            break
        hw = max(half_width(b, w, k, r, confidence) for b, w, _ in probes)
        if best is None or hw < best.half_width:
            best = Design(k, r, k * (boot_cost_s + r * run_cost), hw, False, math.nan)
    return best
