"""The stopping rule of a guest level measured in boots: precision at the unit that varies.

All the runs of one boot share its offset (memory layout, clock source, vCPU placement), so
the interval `vmtax compare` prints for such a side is built from its boot means
(:func:`vmtax.stats.boots.units`): Student's t with B − 1 degrees of freedom on the log of
the mean of B boot means, by the delta method (:func:`vmtax.stats.intervals.log_variance`).
Adaptive sampling judges precision with that very interval: a probe is precise when, with at
least :data:`BOOT_FLOOR` boots, its relative half-width is within the target. Runs of one boot
never make a probe precise, however many.

How many more boots, and how many runs in each: Kalibera and Jones ("Rigorous benchmarking in
reasonable time", ISMM 2013) minimise the cost ``B · (c_boot + k · c_run)`` of B boots of k
runs for a wanted variance ``(between + within / k) / B`` of the mean; from scratch and for
large B the answer is their ``k = sqrt(c_boot / c_run · within / between)``. Here the same
problem is solved from where the experiment stands, on the estimated components (one-way
random-effects ANOVA, :func:`vmtax.stats.boots.variance_components`): the boots already
measured keep their runs, the current boot may be topped up to k (it is paid for), and m new
boots of k runs each are added; the predicted half-width takes the t quantile of the boots
there will be (``B + m − 1`` degrees of freedom). Every entry of a target shares its boots, so
m is chosen for all of them at once (the boots' cost is paid once, each entry's runs by
itself), and each entry then takes the fewest runs per boot that reach its target with m new
boots. No closed form covers the boots already measured, the t quantile and the shared boots
together, so the few thousand (m, k) pairs are enumerated (numpy, microseconds).

Looks are planned, not taken after every boot: a look adds at most ``GROWTH`` times the boots
it has (at least one), and when the target cannot be reached within that it adds them all
with Kalibera and Jones' k, so that a short spell of similar boots has few chances to stop the
sampling (the optional-stopping bias of the run-level rule, docs/statistics.md). Coverage and
cost against the optimum that knows the true components are simulated through the sampler's
own loop in ``tests/test_sampling_boots.py``.

What the interval stated at the stop covers: 0.95 without a boot effect, 0.89-0.93 with boot
effects of 2-5%, as it does (within simulation error) for a rule that knows the components
and stops at the first boot, from the third, whose interval is within the target. The stop at
the third boot that a guest without a boot effect needs (its optimum is 3 boots) is also
taken, in about one play in twenty, by a guest with a 5% boot effect whose first boots agree,
and a rule that stops on this interval cannot tell the two apart there; docs/statistics.md
gives the rules weighed (``bench/boot_stopping.py``) and why none gets 0.93 with boot effects
of 3-5% for at most 1.25 times the optimum's cost.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from vmtax.stats.boots import MAX_RUNS_PER_BOOT, units, variance_components
from vmtax.stats.intervals import side_log_variance

#: No precision about a configuration from fewer boots (at 2, t has one degree of freedom).
BOOT_FLOOR = 3
#: A look adds at most this many times the boots it has (and at least one).
GROWTH = 1.5
#: Plans aim at this share of the target: a plan that only just reaches it on the estimates
#: stops on the looks whose spread came out small, which undercovers (optional stopping; with
#: plans at the target itself the stated interval covers 0.86 with a 5% boot effect, not 0.92).
MARGIN = 0.85
#: The first boots' runs aim at this share of the target: a run costs a second, a boot that
#: has to be added because the first ones hold too few runs a minute.
FIRST_STAGE_MARGIN = 0.85
#: The fewest runs a planned boot is left with: from fewer, the run noise that decides its
#: runs is too rough (one degree of freedom at two runs).
FIRST_STAGE_MIN = 4
#: The longest plan a look weighs, in new boots.
MAX_NEW_BOOTS = 400


@dataclass(frozen=True)
class BootLook:
    """What one look at an entry's runs, grouped by boot, says."""

    n: int  # ok runs
    boots: int
    mean: float  # the mean of the boot means (compare's estimate for the side)
    half_width: float  # relative (log scale) half-width of compare's interval; inf if none
    precise: bool
    log_var: float  # the variance of the log of ``mean`` from the boot means (NaN: unknown)
    between: float  # estimated between-boot variance of log run means (NaN: unknown)
    within: float  # estimated within-boot variance (NaN: unknown)
    boot_sizes: tuple[int, ...]  # ok runs per boot, the current boot last
    in_current_boot: int


def boot_look(
    means: np.ndarray,
    boot_ids: Sequence[object],
    current_boot: object,
    target: float,
    *,
    confidence: float = 0.95,
) -> BootLook:
    """The boot-level look at one entry's ok run means (``boot_ids``: each run's boot)."""
    if target <= 0:
        raise ValueError(f"the precision target must be positive, got {target}")
    x = np.asarray(means, dtype=np.float64)
    ids = np.array([b if isinstance(b, str) else "" for b in boot_ids], dtype=object)
    keep = np.isfinite(x)
    x, ids = x[keep], ids[keep]
    if x.size == 0:
        return BootLook(0, 0, math.nan, math.inf, False, math.nan, math.nan, math.nan, (), 0)
    codes, labels = pd.factorize(pd.Series(ids, dtype=object), sort=False)
    sizes = np.bincount(codes)
    bmeans = np.bincount(codes, weights=x) / sizes
    cur = "" if not isinstance(current_boot, str) else current_boot
    order = [i for i, lab in enumerate(labels) if lab != cur] + [
        i for i, lab in enumerate(labels) if lab == cur
    ]
    here = int(sizes[list(labels).index(cur)]) if cur in set(labels) else 0
    mean = float(bmeans.mean())
    half = log_var = math.inf
    # compare's boot-level side: its boot means, with Satterthwaite's degrees of freedom when
    # the boots hold unequal runs (vmtax.stats.boots.boot_mean_dof)
    side = units(x, list(ids))
    lv = side_log_variance(side) if side.boot_level else None
    if lv is not None:
        log_var = lv.var
        half = _t_quantile(confidence, float(lv.dof)) * math.sqrt(lv.var)
    between = within = math.nan
    if np.all(x > 0):
        comp = variance_components(np.log(x), list(ids))
        between, within = comp.between, comp.within
    return BootLook(
        n=int(x.size),
        boots=int(labels.size),
        mean=mean,
        half_width=half,
        log_var=log_var,
        precise=labels.size >= BOOT_FLOOR and half <= target,
        between=between,
        within=within,
        boot_sizes=tuple(int(sizes[i]) for i in order),
        in_current_boot=here,
    )


def first_stage_runs(
    means: np.ndarray,
    boot_ids: Sequence[object],
    target: float,
    boots: int,
    *,
    confidence: float = 0.95,
) -> int:
    """The runs each of the first ``boots`` boots should hold: the fewest with which the
    target could be reached in that many boots were there no boot effect,
    ``ceil(t(boots − 1)² · within / (boots · target²))``, from the within-boot variance the
    runs so far show (pooled over their boots), and at least FIRST_STAGE_MIN. With no boot
    effect this is Kalibera and Jones' optimum at the boot floor; with one, the boots the look
    adds later get their own k. A boot cannot be gone back to, so its runs are decided before
    it is left."""
    x = np.asarray(means, dtype=np.float64)
    ok = np.isfinite(x) & (x > 0)
    if ok.sum() < 2:
        return FIRST_STAGE_MIN
    ids = [b if isinstance(b, str) else "" for b, keep in zip(boot_ids, ok, strict=True) if keep]
    within = variance_components(np.log(x[ok]), ids).within
    if not (math.isfinite(within) and within > 0):
        return FIRST_STAGE_MIN
    q = _t_quantile(confidence, float(max(boots - 1, 1)))
    d = FIRST_STAGE_MARGIN * target
    k = math.ceil(q * q * within / (boots * d * d))
    return int(min(MAX_RUNS_PER_BOOT, max(FIRST_STAGE_MIN, k)))


@dataclass(frozen=True)
class BootPlan:
    """What the next look's runs are: ``top_up[e]`` more runs of entry e in the current boot,
    then ``new_boots`` boots with ``per_boot[e]`` runs of e in each."""

    new_boots: int
    top_up: dict[str, int]
    per_boot: dict[str, int]
    reachable: bool  # the plan is predicted to reach every entry's target


def _components(look: BootLook) -> tuple[float, float]:
    """(between, within) for planning new boots; a component not estimated yet is taken as 0
    (the next look, with more boots, estimates it)."""
    between = look.between if math.isfinite(look.between) else 0.0
    within = look.within if math.isfinite(look.within) else 0.0
    return max(between, 0.0), max(within, 0.0)


def kalibera_jones(between: float, within: float, boot_cost: float, run_cost: float) -> int:
    """Kalibera and Jones' runs per boot, bounded to 1..MAX_RUNS_PER_BOOT."""
    if between <= 0:
        return MAX_RUNS_PER_BOOT
    best = math.sqrt(boot_cost / run_cost * within / between)
    return int(min(MAX_RUNS_PER_BOOT, max(1, math.ceil(best))))


def predicted_half_width(
    look: BootLook, new_boots: np.ndarray, k: np.ndarray, confidence: float = 0.95
) -> np.ndarray:
    """The half-width the interval is predicted to have once ``new_boots`` boots of ``k`` runs
    are added (broadcast over both): the boots measured count with the spread their means
    show (what the interval will use), the new ones with ``between + within / k``."""
    between, within = _components(look)
    b = look.boots
    if b >= 2 and math.isfinite(look.log_var):
        old = b * b * look.log_var
    else:
        old = float(sum(between + within / n for n in look.boot_sizes))
    m = np.asarray(new_boots, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    boots = b + m
    var = (old + m * (between + within / k)) / np.maximum(boots, 1.0) ** 2
    dof, where = np.unique(np.maximum(boots - 1, 1), return_inverse=True)
    q = np.array([_t_quantile(confidence, float(d)) for d in dof])[where].reshape(boots.shape)
    return np.where(boots >= 2, q * np.sqrt(var), np.inf)


@functools.lru_cache(maxsize=4096)
def _t_quantile(confidence: float, dof: float) -> float:
    """The two-sided ``confidence`` quantile of Student's t (looks ask for the same few)."""
    return float(stats.t.ppf(0.5 + confidence / 2, dof))


def plan_boots(
    looks: Mapping[str, BootLook],
    target: float,
    boot_cost: float,
    run_costs: Mapping[str, float],
    *,
    confidence: float = 0.95,
    growth: float = GROWTH,
) -> BootPlan:
    """The cheapest next step for the entries in ``looks`` (those not precise yet); see the
    module's docstring. ``run_costs``: seconds a run of each entry takes."""
    if not looks:
        return BootPlan(0, {}, {}, True)
    boots_now = max(lk.boots for lk in looks.values())
    most = max(1, math.ceil(growth * boots_now) - boots_now)
    ks = np.arange(1, MAX_RUNS_PER_BOOT + 1)
    best: tuple[float, int, dict[str, int]] | None = None
    # The cheapest whole plan to the target (up to MAX_NEW_BOOTS more boots), of which this
    # look takes at most ``most`` boots: the next look re-plans from what they show.
    for m in range(1, MAX_NEW_BOOTS + 1):
        chosen: dict[str, int] = {}
        cost = float(m) * boot_cost
        for name, lk in looks.items():
            if lk.boots + m < BOOT_FLOOR:
                break
            half = predicted_half_width(lk, np.full(ks.shape, m), ks, confidence)
            ok = np.flatnonzero(half <= MARGIN * target)
            if not ok.size:
                break
            k = int(ks[ok[0]])  # the fewest runs per boot that reach the target
            chosen[name] = k
            cost += _cost(run_costs, name) * float(m) * k
        else:
            if best is None or cost < best[0]:
                best = (cost, m, chosen)
        if best is not None and m * boot_cost > best[0]:
            break  # more boots cost more than the best plan already
    if best is not None:
        _, m, per = best
        return BootPlan(min(m, most), _top_up(looks, per), per, m <= most)
    # Out of reach within this look: as many boots as it may add, Kalibera and Jones' k each.
    per = {}
    for name, lk in looks.items():
        between, within = _components(lk)
        per[name] = kalibera_jones(between, within, boot_cost, _cost(run_costs, name))
    return BootPlan(most, _top_up(looks, per), per, False)


def _cost(run_costs: Mapping[str, float], name: str) -> float:
    c = run_costs.get(name, math.nan)
    return c if math.isfinite(c) and c > 0 else 1.0


def _top_up(looks: Mapping[str, BootLook], per: Mapping[str, int]) -> dict[str, int]:
    """The current boot is paid for: it is filled to the runs per boot the new ones get."""
    top = {n: k - looks[n].in_current_boot for n, k in per.items()}
    return {n: t for n, t in top.items() if t > 0 and looks[n].in_current_boot > 0}
