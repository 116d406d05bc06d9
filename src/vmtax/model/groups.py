"""κ per exit group: what one exit of each group, taken at the VM level, adds one level deeper
(docs/model.md, "κ per exit group").

The out-of-sample model charges every exit one κ: ``D_k = c_nested(k) − c_vm(k) = κ · N_k``.
Exits differ by kind (on hardware an unshadowed VMCS field adds about 1,000 cycles per nested
exit, a nested page fault walks two dimensions, a halt or an IPI goes through the
scheduler), so here each group g has its own cost,

    D_k = Σ_g κ_g · N_kg        (N_kg: probe k's exits of group g per operation at the VM level)

fitted on the probes that isolate the groups, and validated on composite probes (io, timer,
http) that were not fitted.

- **Groups** (``KAPPA_GROUP``) from study E's grouping of KVM's counters and traced reasons
  (vmtax.hostprof.groups): trap (CPUID, MSR, CR, other instructions), nested page fault or
  MMIO, interrupt, halt, port I/O.
- **Relative weights.** Each probe's equation is weighted by ``1 / D_k²``: a probe's error
  counts as a share of its own increment, so the probe with the most exits per operation
  does not set every group's κ (the single κ through the origin is weighted by ``W²``).
- **Non-negative** coefficients: ``scipy.optimize.lsq_linear`` with bounds ``[0, ∞)``.
- **Pooled toward one common κ** where a group's data are thin: a ridge toward the common
  κ̄ (the relatively weighted single-κ fit), ``λ · Σ_g (κ_g − κ̄)²`` added to the weighted sum of
  squares. ``λ`` comes from the data: the value on a grid (scaled by the groups' mean
  information ``Σ_k w_k N_kg²``) whose leave-one-probe-out |log error| is least. A group
  that no fitted probe takes is κ̄ itself.
- **Intervals**: of the unpooled κ (λ = 0), by the delta method over the independent units of
  each probe's levels (boots where the experiment has several, else runs;
  vmtax.model.intervals), on the closed-form fit; none where the fit is on its bound 0. A
  pooled estimate leans toward κ̄ by design, and an interval around it does not cover the
  group's own cost. (The percentile bootstrap covered 0.75–0.81 at 3 units, 0.83–0.91 at 6.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from vmtax.errors import UsageError
from vmtax.hostprof.perop import per_reason
from vmtax.model.intervals import interval, linearise
from vmtax.model.nested import EXTRAPOLATED, HELD_OUT, abs_log_ratio, error_pct
from vmtax.model.sources import boot_count, boot_means, level_number, ns_per_op

#: Study E's group (vmtax.hostprof.groups) -> the group κ is fitted for.
KAPPA_GROUP = {
    "Instruction emulation": "trap",
    "CR access": "trap",
    "MMU": "trap",
    "Page fault": "trap",
    "Other": "trap",
    "MMIO": "nested page fault / MMIO",
    "Interrupt": "interrupt",
    "Halt": "halt",
    "I/O": "port I/O",
}
KAPPA_GROUPS = ("trap", "nested page fault / MMIO", "interrupt", "halt", "port I/O")
#: The agent's probe made to isolate each group (plan/suites/dvh-micro.toml runs them all):
#: most of its exits per operation are of that group. Which probes *did* isolate a group in
#: an experiment is read from its profiles (``GroupFit.isolated_by``); this says which probe
#: to run for a group no probe took. mmio takes the group's MMIO half; no probe takes
#: genuine nested page faults (a guest's page faults in once a boot), which share its κ.
ISOLATING_PROBES = {
    "trap": "cpuid",  # CPUID: an unconditional exit
    "nested page fault / MMIO": "mmio",  # a read of the PCI test device's register (root)
    "interrupt": "timer.spin",  # a timer waited for by polling: its interrupt, no halt
    "halt": "halt",  # an idle loop of sleeps: a HLT exit per sleep
    "port I/O": "portio",  # an outb to an unused port (root): an I/O instruction exit
}
#: λ's grid, in units of the groups' mean information; 0 is no pooling, inf one κ.
POOL_GRID = (0.0, 0.01, 0.1, 1.0, 10.0, 100.0, np.inf)


@dataclass(frozen=True)
class GroupProbe:
    """One probe's independent units (boots, else runs): its time per operation at the VM
    level (n,), its exits per operation by group there (n, G), and at the nested level (m,)
    (empty when it was not measured there)."""

    probe: str
    vm: np.ndarray
    exits: np.ndarray
    nested: np.ndarray
    #: With boots as units: each unit's boot at the VM level and at the nested level.
    vm_boots: tuple[str, ...] = ()
    nested_boots: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupFit:
    """κ per group (pooled: what predictions use), the unpooled κ with its 95% interval, the
    common κ̄, the pooling λ (in units of the groups' mean information; inf: one κ) and which
    probes isolate each group."""

    groups: tuple[str, ...]
    kappa: np.ndarray
    low: np.ndarray
    high: np.ndarray
    common: float
    pool: float
    isolated_by: dict[str, list[str]]
    #: The groups some fitted probe took exits of (the others' κ is the ridge's κ̄ alone).
    taken: tuple[str, ...] = ()
    #: κ unpooled (λ = 0), the estimate ``low`` and ``high`` are the 95% interval of.
    unpooled: np.ndarray | None = None
    #: Per taken group, the fitted probe whose exits are most of that group, and that share.
    most_in: dict[str, tuple[str, float]] = field(default_factory=dict)

    def predict(self, probe: GroupProbe, *, single: bool = False) -> float:
        """The probe's nested time: its VM time plus its exits' costs one level deeper."""
        n = probe.exits.mean(axis=0)
        extra = self.common * n.sum() if single else float(n @ self.kappa)
        return float(probe.vm.mean()) + extra


def _increments(probes: Sequence[GroupProbe]) -> tuple[np.ndarray, np.ndarray]:
    d = np.array([float(np.mean(p.nested) - np.mean(p.vm)) for p in probes])
    n = np.array([p.exits.mean(axis=0) for p in probes])
    return d, n


def _common(d: np.ndarray, n: np.ndarray) -> float:
    """The single κ with relative weights 1/D²: Σ (W/D) / Σ (W/D)² (non-negative)."""
    x = n.sum(axis=1) / d
    return max(float(np.sum(x) / np.sum(x * x)), 0.0)


def _solve(d: np.ndarray, n: np.ndarray, pool: float) -> tuple[np.ndarray, float]:
    """κ per group (non-negative, relative weights, ridge ``pool`` toward the common κ̄)."""
    common = _common(d, n)
    groups = n.shape[1]
    if np.isinf(pool):
        return np.full(groups, common), common
    a = n / d[:, None]  # rows weighted by 1/D: the error as a share of the increment
    b = np.ones(len(d))
    info = float(np.mean(np.sum(a * a, axis=0))) or 1.0
    lam = np.sqrt(pool * info)
    a = np.vstack([a, lam * np.eye(groups)])
    b = np.concatenate([b, np.full(groups, lam * common)])
    # A group no probe takes has no equation but the ridge: it is κ̄ (pool 0: κ̄ too).
    untaken = ~(n.sum(axis=0) > 0)
    if pool == 0.0 and untaken.any():
        a = np.vstack([a, np.eye(groups)[untaken]])
        b = np.concatenate([b, np.full(int(untaken.sum()), common)])
    got = lsq_linear(a, b, bounds=(0.0, np.inf), method="bvls")
    return np.asarray(got.x, dtype=np.float64), common


def _choose_pool(probes: Sequence[GroupProbe]) -> float:
    """λ on POOL_GRID with the least leave-one-probe-out median |log error|."""
    if len(probes) < 3:
        return float(np.inf)  # too few probes to hold one out: one κ
    best, best_err = float(np.inf), np.inf
    for pool in POOL_GRID:
        errs = []
        for i, out in enumerate(probes):
            rest = [p for j, p in enumerate(probes) if j != i]
            d, n = _increments(rest)
            kappa, common = _solve(d, n, pool)
            fit = GroupFit(KAPPA_GROUPS[: n.shape[1]], kappa, kappa, kappa, common, pool, {})
            pred, real = fit.predict(out), float(np.mean(out.nested))
            errs.append(abs(np.log(pred / real)) if pred > 0 and real > 0 else np.inf)
        err = float(np.median(errs))
        if err < best_err - 1e-12:
            best, best_err = float(pool), err
    return best


def fit_groups(
    probes: Sequence[GroupProbe],
    groups: Sequence[str] = KAPPA_GROUPS,
    *,
    pool: float | None = None,
    intervals: bool = True,
) -> GroupFit:
    """κ per group from ``probes`` (each measured at both levels, its exits in ``groups``'
    columns); ``pool``: λ (None: chosen by leave-one-probe-out); ``inf``: one κ."""
    fitted = [p for p in probes if len(p.nested)]
    d, n = _increments(fitted)
    if len(fitted) < 2 or not (d > 0).all():
        raise UsageError(
            "κ per exit group needs two or more probes measured at both levels, each slower "
            "one level deeper"
        )
    lam = _choose_pool(fitted) if pool is None else float(pool)
    kappa, common = _solve(d, n, lam)
    raw = np.full(len(kappa), np.nan)
    low = high = raw
    if intervals:
        # The interval is of the unpooled κ (λ = 0): a ridge's estimate leans toward κ̄ by
        # design, and an interval around it does not cover the group's own cost (simulated:
        # 0.00-0.24 at λ = 1). Where the unpooled fit is on its bound, none.
        raw, low, high = (x[0] for x in kappa_intervals(group_units(fitted), len(fitted), 0.0))
        bound = ~(_solve(d, n, 0.0)[0] > 0)
        low, high = np.where(bound, np.nan, low), np.where(bound, np.nan, high)
    share = n / np.maximum(n.sum(axis=1, keepdims=True), 1e-300)
    isolated = {
        g: [p.probe for p, s in zip(fitted, share[:, j], strict=True) if s >= 0.5]
        for j, g in enumerate(groups)
    }
    taken = tuple(g for j, g in enumerate(groups) if n[:, j].sum() > 0)
    most_in = {
        g: (fitted[int(np.argmax(share[:, j]))].probe, float(share[:, j].max()))
        for j, g in enumerate(groups)
        if g in taken
    }
    return GroupFit(tuple(groups), kappa, low, high, common, lam, isolated, taken, raw, most_in)


def group_units(probes: Sequence[GroupProbe]) -> dict[str, np.ndarray]:
    """The independent groups of units, each (1, units, k): per probe its VM level (time and
    exits by group, paired by unit) and its nested level; or, where every probe was measured
    in the same boots at each level (one boot runs them all), two groups of boots, every
    probe's columns side by side (``vm_boot``, ``nested_boot``), so a boot's effect on all
    probes counts once, with the covariance between probes in it."""
    out: dict[str, np.ndarray] = {}
    for i, p in enumerate(probes):
        out[f"vm{i}"] = np.column_stack([p.vm, p.exits])[None]
        out[f"nested{i}"] = np.asarray(p.nested, dtype=np.float64)[None, :, None]
    same = (
        len({p.vm_boots for p in probes}) == 1
        and len({p.nested_boots for p in probes}) == 1
        and len(probes[0].vm_boots) >= 2
        and len(probes[0].nested_boots) >= 2
    )
    return pair_by_boot(out, len(probes)) if same else out


def pair_by_boot(groups: dict[str, np.ndarray], probes: int) -> dict[str, np.ndarray]:
    """``group_units``' per-probe groups (the same boots at each level) as two groups of
    boots."""
    vm = np.concatenate([groups[f"vm{i}"] for i in range(probes)], axis=2)
    nested = np.concatenate([groups[f"nested{i}"] for i in range(probes)], axis=2)
    return {"vm_boot": vm, "nested_boot": nested}


def _per_probe(m: dict[str, np.ndarray], probes: int) -> dict[str, np.ndarray]:
    if "vm_boot" not in m:
        return m
    vm, nested = m["vm_boot"], m["nested_boot"]
    nested = nested[:, None] if nested.ndim == 1 else nested
    k = vm.shape[1] // probes
    out = {}
    for i in range(probes):
        out[f"vm{i}"] = vm[:, k * i : k * (i + 1)]
        out[f"nested{i}"] = nested[:, i]
    return out


def _ridge(probes: int, pool: float) -> Callable[[dict[str, np.ndarray]], dict]:
    """κ per group from the groups' means, vectorised over trials: the ridge toward κ̄ in
    closed form, ``(AᵀA + Λ) κ = Aᵀ1 + Λ κ̄`` (A = N / D), the same solution as ``_solve``
    wherever no bound is active."""

    def evaluate(m: dict[str, np.ndarray]) -> dict:
        m = _per_probe(m, probes)
        vm = np.stack([m[f"vm{i}"] for i in range(probes)], axis=1)  # (T, P, 1 + G)
        nested = np.stack([m[f"nested{i}"] for i in range(probes)], axis=1)  # (T, P)
        d = nested - vm[:, :, 0]
        a = vm[:, :, 1:] / d[:, :, None]
        x = a.sum(axis=2)
        common = x.sum(axis=1) / (x * x).sum(axis=1)
        groups = a.shape[2]
        info = np.mean((a * a).sum(axis=1), axis=1)
        taken = vm[:, :, 1:].sum(axis=1)
        # A group no probe takes (a central difference's 1e-18 step is still none of it).
        untaken = ~(taken > 1e-9 * taken.sum(axis=1, keepdims=True))
        scale = 0.0 if np.isinf(pool) else pool
        lam = scale * info[:, None] + np.where(untaken, info[:, None], 0.0)
        if np.isinf(pool):
            kappa = np.repeat(common[:, None], groups, axis=1)
        else:
            lhs = np.einsum("tpg,tph->tgh", a, a) + lam[:, :, None] * np.eye(groups)
            rhs = a.sum(axis=1) + lam * common[:, None]
            kappa = np.linalg.solve(lhs, rhs[:, :, None])[:, :, 0]
        out: dict = {"common": common}
        for g in range(groups):
            out[f"kappa{g}"] = kappa[:, g]
        return out

    return evaluate


def kappa_intervals(
    groups: dict[str, np.ndarray], probes: int, pool: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(κ, low, high), each (trials, G): 95% confidence intervals of κ per group by the delta
    method over each probe's units at each level (vmtax.model.intervals: t at
    Welch–Satterthwaite's degrees of freedom), λ held at ``pool``. ``groups`` as
    ``group_units`` gives them, with a trials axis (the coverage simulation runs this)."""
    lin = linearise(_ridge(probes, pool), groups)
    keys = sorted((k for k in lin.estimate if k.startswith("kappa")), key=lambda k: int(k[5:]))
    spans = [interval(lin, k) for k in keys]
    est, low, high = (np.stack([sp[i] for sp in spans], axis=1) for i in range(3))
    return est, low, high


def exits_by_group(reasons: dict[str, float]) -> np.ndarray:
    """A probe's exits per operation by κ group, from its exits per operation by study E
    group (``Instruction emulation``: 1.04, ...)."""
    out = np.zeros(len(KAPPA_GROUPS))
    for group, n in reasons.items():
        out[KAPPA_GROUPS.index(KAPPA_GROUP.get(group, "trap"))] += float(n)
    return out


# -- from the store's runs and profiles ---------------------------------------------------


def group_probes(
    runs: pd.DataFrame,
    profiles: pd.DataFrame,
    tsc_hz: dict[int, float],
    vm_level: int,
    statistic: str = "mean",
) -> list[GroupProbe]:
    """Each probe's GroupProbe from completed runs (``Store.runs`` columns) and the exit
    profiles recorded one level below the VM level: per run at the VM level its time and its
    exits per operation by κ group; its runs' times one level deeper."""
    level = runs["level"].map(level_number)
    reasons = per_reason(profiles, f"L{vm_level - 1}") if len(profiles) else None
    if reasons is None or reasons.empty:
        return []
    reasons = reasons.assign(kgroup=reasons["group"].map(lambda g: KAPPA_GROUP.get(g, "trap")))
    by_run = reasons.pivot_table(
        index="run_id", columns="kgroup", values="exits_per_op", aggfunc="sum", fill_value=0.0
    ).reindex(columns=list(KAPPA_GROUPS), fill_value=0.0)
    out = []
    for probe, g in runs.groupby("probe", sort=True):
        at_vm = g[(level[g.index] == vm_level) & g["run_id"].isin(by_run.index)]
        deeper = g[level[g.index] == vm_level + 1]
        if at_vm.empty:
            continue
        exits = by_run.loc[at_vm["run_id"]].to_numpy(np.float64)
        nested = ns_per_op(deeper, tsc_hz, statistic) if len(deeper) else np.zeros(0)
        vm = ns_per_op(at_vm, tsc_hz, statistic)
        if boot_count(at_vm) >= 2 and boot_count(deeper) >= 2:
            # Several boots at both levels: the boot is the unit (its runs' mean).
            both, vm_ids = boot_means(np.column_stack([vm, exits]), at_vm["boot"].to_numpy())
            deep, nested_ids = boot_means(nested[:, None], deeper["boot"].to_numpy())
            out.append(GroupProbe(str(probe), both[:, 0], both[:, 1:], deep[:, 0],
                                  vm_ids, nested_ids))  # fmt: skip
            continue
        out.append(GroupProbe(str(probe), vm, exits, nested))
    return out


def predict(
    probes: Sequence[GroupProbe], *, nested_level: int, unit: str = "ns"
) -> tuple[pd.DataFrame, GroupFit | None]:
    """Each probe's nested level from κ per group fitted on the *other* probes (never on the
    one predicted), the single κ of the same fit beside it; and the fit on every probe
    measured at both levels (the κ per group to report), or None with fewer than two."""
    measured = [p for p in probes if len(p.nested) and np.mean(p.nested) > np.mean(p.vm)]
    rows = []
    for target in probes:
        cal = [p for p in measured if p.probe != target.probe]
        if len(cal) < 2:
            continue
        got = fit_groups(cal, intervals=False)
        est, single = got.predict(target), got.predict(target, single=True)
        real = float(np.mean(target.nested)) if len(target.nested) else None
        ratio = float(np.exp(np.mean([np.log(np.mean(c.nested) / np.mean(c.vm)) for c in cal])))
        base = float(np.mean(target.vm)) * ratio
        rows.append(
            {
                "benchmark": target.probe, "level": nested_level, "dvh": False,
                "weights": "exit groups" if np.isfinite(got.pool) else "exit groups (one κ)",
                "calibrated_on": ", ".join(c.probe for c in cal), "predicted": est,
                "low": None, "high": None, "unit": unit, "measured": real,
                "error_pct": error_pct(est, real), "kappa": got.common, "kind": "prediction",
                "scope": HELD_OUT if real else EXTRAPOLATED, "log_ratio": abs_log_ratio(est, real),
                "baseline": base, "baseline_error_pct": error_pct(base, real),
                "baseline_log_ratio": abs_log_ratio(base, real),
                "single_kappa": single, "single_kappa_error_pct": error_pct(single, real),
            }
        )  # fmt: skip
    whole = fit_groups(measured) if len(measured) >= 2 else None
    return pd.DataFrame(rows), whole


def kappa_lines(found: GroupFit, unit: str = "ns") -> list[str]:
    """One line per group: κ with its 95% bootstrap interval and the probes that isolate it."""
    pool = "one κ" if np.isinf(found.pool) else f"λ = {found.pool:g}"
    # At λ = 0 nothing is pooled: each group's κ is its own fit, κ̄ only stands beside it.
    pooled = found.pool > 0
    toward = "pooled toward" if pooled else "not pooled (λ = 0); common"
    how = f", {pool}" if pooled else ""
    lines = [f"κ per exit group (relative weights, non-negative, {toward} κ̄ = "
             f"{found.common:.4g} {unit} per exit{how}):"]  # fmt: skip
    untaken = []
    raw = found.unpooled if found.unpooled is not None else np.full(len(found.kappa), np.nan)
    for g, k, r, lo, hi in zip(found.groups, found.kappa, raw, found.low, found.high, strict=True):
        if g not in found.taken:
            untaken.append(g)
            continue
        alone = "no probe (pooled toward κ̄)" if pooled else "no probe"
        if g in found.most_in:  # what comes closest: a group shared with others is still fitted
            probe, part = found.most_in[g]
            alone += f"; most in {probe} ({part:.0%} of its exits)"
        who = ", ".join(found.isolated_by.get(g, [])) or alone
        span = f"{r:.4g} [{lo:.4g}, {hi:.4g}]" if lo == lo else "no interval (on its bound 0)"
        lines.append(f"  κ {g}: {k:.4g} {unit} per exit (unpooled {span}, 95%); isolated by {who}")
    if untaken:
        lines.append(f"  no probe took {', '.join(untaken)} exits: their κ is not measured (κ̄)")
        runnable = [f"{ISOLATING_PROBES[g]} ({g})" for g in untaken if g in ISOLATING_PROBES]
        if runnable:
            lines.append(f"  probes that isolate them: {', '.join(runnable)}")
    return lines
