"""Out-of-sample predictions of the nested level: a probe's time one level deeper from its
own VM-level runs and exit profile, and a nesting factor calibrated on *other* probes.

Each exit a probe takes at the VM level becomes, one level deeper, an exit the guest
hypervisor must handle: forwarded to it and back, and its handler runs one level up, where its
own privileged work exits in turn. So the nested level costs

    c_nested(k) = c_vm(k) + κ · W_k

with ``W_k`` the probe's exit load per operation at the VM level, from its profile, in one of
two weightings:

- ``exits``: exits per operation (every exit costs the same one level deeper);
- ``exit time``: Σ over reasons (exits × (handling time + round trip e)) per operation, so an
  exit whose handler does more at the VM level does proportionally more one level deeper.
  A halt's recorded time is waiting: it counts as a round trip only. ``e`` is the VM level's
  null-exit round trip outside its handler, ``(c_vm(cpuid) − T_vm(cpuid)) / N_vm(cpuid)``.

``κ`` is fitted through the origin on the probes used for calibration, never on the one
predicted: ``κ = Σ D_j W_j / Σ W_j²`` with ``D_j = c_nested(j) − c_vm(j)``. Two ways:
``cpuid`` (calibrated on the null exit alone, the issue's first example) and ``others``
(leave one probe out: every other probe with a nested level).

The 95% prediction interval is the delta method, on the log of the prediction (so it stays
positive), over the independent samples of runs used (vmtax.model.intervals, Welch–
Satterthwaite degrees of freedom) plus one future run's spread (the predicted probe's
coefficient of variation at the VM level); tests/test_model_coverage.py simulates it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.perop import per_reason
from vmtax.model.intervals import future_run, interval, linearise
from vmtax.model.nested import EXTRAPOLATED, HELD_OUT, abs_log_ratio, error_pct
from vmtax.model.sources import boot_count, boot_means, level_number, ns_per_op

WEIGHTS = ("exits", "exit time")
CALIBRATIONS = ("cpuid", "others")
COLUMNS = [
    "benchmark", "level", "dvh", "weights", "calibrated_on", "predicted", "low", "high", "unit",
    "measured", "error_pct", "kappa", "kind", "scope", "log_ratio", "baseline",
    "baseline_error_pct", "baseline_log_ratio", "interval",
]  # fmt: skip


def ratio_baseline(target: ProbeLoad, calibration: Sequence[ProbeLoad]) -> float | None:
    """The constant-ratio rule: the target's VM-level time × the geometric mean over the
    calibration probes of their nested/VM times (the ratio observed on the probes the model
    is calibrated on); None where a ratio is not positive."""
    logs = []
    for c in calibration:
        vm, nested = float(c.vm[:, 0].mean()), float(np.mean(c.nested))
        if not (vm > 0 and nested > 0):
            return None
        logs.append(np.log(nested / vm))
    return float(target.vm[:, 0].mean() * np.exp(np.mean(logs)))


def scored(target: ProbeLoad, calibration: Sequence[ProbeLoad], est: float | None) -> dict:
    """A row's measured value, scope, errors and the ratio baseline beside it."""
    real = float(target.nested.mean()) if len(target.nested) else None
    base = ratio_baseline(target, calibration)
    return {
        "measured": real,
        "error_pct": error_pct(est, real),
        "scope": HELD_OUT if real else EXTRAPOLATED,
        "log_ratio": abs_log_ratio(est, real),
        "baseline": base,
        "baseline_error_pct": error_pct(base, real),
        "baseline_log_ratio": abs_log_ratio(base, real),
    }


@dataclass
class ProbeLoad:
    """One probe's runs: at the VM level, (runs, 3) of time, exits and exit time per op
    (ns); at the nested level, its run times (empty when it was not measured there)."""

    probe: str
    vm: np.ndarray
    nested: np.ndarray
    #: What a row of ``vm`` and a value of ``nested`` is: a run, or a boot's mean of its runs
    #: (where a level was measured in several boots, the boot is the unit that varies).
    units: str = "runs"
    #: With boots as units: each row's boot, at the VM level and at the nested level.
    vm_boots: tuple[str, ...] = ()
    nested_boots: tuple[str, ...] = ()

    def weight(self, weights: str) -> int:
        """The column of ``vm`` that is W under ``weights``."""
        return 1 if weights == "exits" else 2


def load_groups(target: ProbeLoad, calibration: Sequence[ProbeLoad]) -> dict[str, np.ndarray]:
    """The independent groups of runs a prediction is computed from, each (1, runs, k): the
    target's VM level, and each calibration probe's VM and nested levels."""
    groups = {"target": target.vm[None]}
    for i, c in enumerate(calibration):
        groups[f"vm{i}"] = c.vm[None]
        groups[f"nested{i}"] = np.asarray(c.nested, dtype=np.float64)[None, :, None]
    return groups


def paired(target: ProbeLoad, calibration: Sequence[ProbeLoad]) -> bool:
    """True when every probe was measured in the same boots at each level (one boot runs
    them all), so that a boot's values of all probes are one unit: a boot's stalls slow
    every probe in it, and the probes' errors are correlated through it."""
    loads = [target, *calibration]
    return (
        all(p.units == "boots" for p in loads)
        and len({p.vm_boots for p in loads}) == 1
        and len({c.nested_boots for c in calibration}) == 1
        and len(target.vm_boots) >= 2
        and len(calibration[0].nested_boots) >= 2
    )


def pair_by_boot(groups: dict[str, np.ndarray], calibrated: int) -> dict[str, np.ndarray]:
    """``load_groups``' groups as two groups of boots: the VM level's (every probe's columns
    side by side) and the nested level's, so the delta method counts each boot once, with
    the covariance between probes in it."""
    vm = [groups["target"], *(groups[f"vm{i}"] for i in range(calibrated))]
    nested = [groups[f"nested{i}"] for i in range(calibrated)]
    return {"vm_boot": np.concatenate(vm, axis=2), "nested_boot": np.concatenate(nested, axis=2)}


def _unpaired(means: dict[str, np.ndarray], calibrated: int) -> dict[str, np.ndarray]:
    if "vm_boot" not in means:
        return means
    vm, nested = means["vm_boot"], means["nested_boot"]
    nested = nested[:, None] if nested.ndim == 1 else nested
    out = {"target": vm[:, 0:3]}
    for i in range(calibrated):
        out[f"vm{i}"] = vm[:, 3 + 3 * i : 6 + 3 * i]
        out[f"nested{i}"] = nested[:, i]
    return out


def _model(col: int, calibrated: int) -> Callable[[dict[str, np.ndarray]], dict]:
    """κ through the origin on the calibration probes, and the target's nested time, from
    the groups' means (vectorised over trials)."""

    def evaluate(means: dict[str, np.ndarray]) -> dict:
        means = _unpaired(means, calibrated)
        num = sum((means[f"nested{i}"] - means[f"vm{i}"][:, 0]) * means[f"vm{i}"][:, col]
                  for i in range(calibrated))  # fmt: skip
        den = sum(means[f"vm{i}"][:, col] ** 2 for i in range(calibrated))
        kappa = num / den
        return {
            "kappa": kappa,
            "predicted": means["target"][:, 0] + kappa * means["target"][:, col],
        }

    return evaluate


#: The future a prediction interval is for: one run like the target's VM-level runs, or the
#: next boot at the nested level (its mean over the same number of runs).
NEXT_RUN, NEXT_BOOT = "next run", "next boot"


def next_boot(groups: dict[str, np.ndarray], calibrated: int) -> tuple[str, np.ndarray, int]:
    """The spread of the next boot at the nested level, on the log scale: the calibration
    probes' nested boot means around each probe's own mean, pooled (a boot's stalls and
    placement slow a level's probes alike; the target's own nested boots are held out), with
    its degrees of freedom Σ (boots − 1). A separate variance part of the interval."""
    ss: np.ndarray | float = 0.0
    dof = 0
    if "nested_boot" in groups:
        # Paired by boot: the probes' deviations share each boot's effect, so they count as
        # the boots' degrees of freedom once, not once per probe.
        x = np.log(groups["nested_boot"])
        boots = x.shape[1]
        ss = ((x - x.mean(axis=1, keepdims=True)) ** 2).sum(axis=1).mean(axis=1)
        dof = boots - 1
        trials = x.shape[0]
        if dof == 0:
            return NEXT_BOOT, np.zeros(trials), 0
        return NEXT_BOOT, np.asarray(ss, dtype=np.float64) / dof, dof
    for i in range(calibrated):
        x = np.log(groups[f"nested{i}"][:, :, 0])
        if x.shape[1] < 2:
            continue
        ss = ss + ((x - x.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
        dof += x.shape[1] - 1
    trials = groups["target"].shape[0]
    if dof == 0:
        return NEXT_BOOT, np.zeros(trials), 0
    return NEXT_BOOT, np.broadcast_to(np.asarray(ss, dtype=np.float64) / dof, (trials,)), dof


def prediction_intervals(
    groups: dict[str, np.ndarray], calibrated: int, weights: str, future: str = NEXT_RUN
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(prediction, low, high, κ), each (trials,), from ``load_groups``' groups (with a trials
    axis, so the coverage simulation in CI runs this code): on the log scale, with one future
    run whose spread is the target's VM-level runs' (``NEXT_RUN``), or the next boot at the
    nested level, whose spread is the calibration probes' nested boots' (``NEXT_BOOT``)."""
    col = 1 if weights == "exits" else 2
    lin = linearise(_model(col, calibrated), groups)
    ahead = next_boot(groups, calibrated) if future == NEXT_BOOT else future_run("target", groups)
    est, low, high = interval(lin, "predicted", log=True, future=ahead)
    return est, low, high, lin.estimate["kappa"]


def predict_one(
    target: ProbeLoad, calibration: Sequence[ProbeLoad], weights: str
) -> tuple[float, float, float, float]:
    """(prediction, low, high, κ) of ``target`` at the nested level; NaN bounds when a sample
    has one run or the prediction is not a positive time."""
    groups = load_groups(target, calibration)
    if paired(target, calibration):
        groups = pair_by_boot(groups, len(calibration))
    got = prediction_intervals(groups, len(calibration), weights, future_of(calibration))
    est, low, high, kappa = (float(x[0]) for x in got)
    return est, low, high, kappa


def future_of(calibration: Sequence[ProbeLoad]) -> str:
    """The next boot where every calibration probe's nested level has two boots or more (its
    units are boots), else the next run."""
    ok = all(c.units == "boots" and len(c.nested) >= 2 for c in calibration)
    return NEXT_BOOT if calibration and ok else NEXT_RUN


def calibration_sets(
    loads: Sequence[ProbeLoad],
) -> Iterator[tuple[ProbeLoad, list[ProbeLoad]]]:
    """Each probe with each calibration that exists for it (CALIBRATIONS): the target and the
    other probes measured at the nested level it is calibrated on, never the target itself."""
    measured = {p.probe: p for p in loads if len(p.nested)}
    for target in loads:
        for how in CALIBRATIONS:
            if how == "cpuid":
                cal = [measured["cpuid"]] if "cpuid" in measured and target.probe != "cpuid" else []
            else:
                cal = [p for name, p in measured.items() if name != target.probe]
            if cal:
                yield target, cal


def predict(
    loads: Sequence[ProbeLoad],
    *,
    nested_level: int,
    unit: str = "ns",
    weightings: Sequence[str] = WEIGHTS,
) -> pd.DataFrame:
    """Every probe's nested level, in each of ``weightings``, both calibrations where they
    exist."""
    rows = []
    for target, cal in calibration_sets(loads):
        for weights in weightings:
            col = target.weight(weights)
            if any(float(c.vm[:, col].mean()) <= 0 for c in cal):
                continue
            est, low, high, kappa = predict_one(target, cal, weights)
            if not est > 0:
                continue  # not a time (the calibration probes got faster one level down)
            rows.append(
                {
                    "benchmark": target.probe, "level": nested_level, "dvh": False,
                    "weights": weights,
                    "calibrated_on": ", ".join(c.probe for c in cal), "predicted": est,
                    "low": low, "high": high, "unit": unit,
                    "kappa": kappa, "kind": "prediction", **scored(target, cal, est),
                    "interval": future_of(cal),
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def weightings(profiles: pd.DataFrame, vm_level: int) -> tuple[str, ...]:
    """The weightings the VM level's profiles support: exit time needs handling times
    (``--exits=trace``); KVM's counters (``--exits``) give counts only, and an exit time of
    a round trip per exit would be the exits weighting again, scaled."""
    reasons = per_reason(profiles, f"L{vm_level - 1}") if len(profiles) else None
    if reasons is None or not (reasons["basis"] == "timed").any():
        return ("exits",)
    return WEIGHTS


def round_trip_added(e: float) -> float:
    """The round trip an exit adds to its time: ``e``, or none where it is not positive (a
    handling time above CPUID's whole time, from a stalled profiled run), rather than taking
    time away from the exit time."""
    return e if math.isfinite(e) and e > 0 else 0.0


def loads_from(
    runs: pd.DataFrame,
    profiles: pd.DataFrame,
    tsc_hz: dict[int, float],
    vm_level: int,
    statistic: str = "mean",
) -> tuple[list[ProbeLoad], float]:
    """Each probe's ProbeLoad from stored runs and profiles (the VM level's, recorded by the
    hypervisor below it), and the VM level's round trip e (ns) from cpuid's profiled runs.
    A run's time per operation is its ``statistic`` (mean or median) at both levels, so the
    prediction and what it is compared with are the same statistic."""
    if vm_level < 1:
        # L0's exits are no hypervisor's to record: nothing runs below the machine itself.
        raise UsageError(
            "out-of-sample predictions need the VM level's exit profile, recorded by the "
            "hypervisor below it, and L0 has none below it: give a guest level as the VM "
            "(--vm-level L1, its runs with vmtax run --levels L1,L2 --exits)"
        )
    ok = runs[runs["status"] == "ok"]
    level = ok["level"].map(level_number)
    reasons = per_reason(profiles, f"L{vm_level - 1}") if len(profiles) else None
    if reasons is None or reasons.empty:
        raise UsageError(
            f"no complete exit profile of L{vm_level} recorded at L{vm_level - 1}: out-of-sample "
            "predictions need the VM level's profiles (vmtax run --exits)"
        )
    per_run = reasons.groupby("run_id")[["exits_per_op", "handling_ns"]].sum()
    vm_rows: dict[str, np.ndarray] = {}
    nested: dict[str, np.ndarray] = {}
    boots_of: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for probe, g in ok.groupby("probe", sort=True):
        at_vm = g[(level[g.index] == vm_level) & g["run_id"].isin(per_run.index)]
        deeper = g[level[g.index] == vm_level + 1]
        if at_vm.empty:
            continue
        t = ns_per_op(at_vm, tsc_hz, statistic)
        load = per_run.loc[at_vm["run_id"]].to_numpy(np.float64)
        rows_vm = np.column_stack([t, load[:, 0], load[:, 1]])
        deep = ns_per_op(deeper, tsc_hz, statistic) if len(deeper) else np.zeros(0)
        if boot_count(at_vm) >= 2 and boot_count(deeper) >= 2:
            # Several boots at both levels: the boot is the unit (its runs' mean), so runs
            # inside one boot are not counted as independent.
            rows_vm, vm_ids = boot_means(rows_vm, at_vm["boot"].to_numpy())
            deep_means, nested_ids = boot_means(deep[:, None], deeper["boot"].to_numpy())
            deep = deep_means[:, 0]
            boots_of[str(probe)] = (vm_ids, nested_ids)
        vm_rows[str(probe)] = rows_vm
        nested[str(probe)] = deep
    if "cpuid" not in vm_rows:
        raise UsageError(
            f"the round trip of an exit needs cpuid's profiled runs at L{vm_level}; run "
            "--probe cpuid --exits there"
        )
    c = vm_rows["cpuid"].mean(axis=0)
    e = float((c[0] - c[2]) / c[1])
    e_added = round_trip_added(e)
    loads = []
    for probe, rows in vm_rows.items():
        # Column 2 becomes the exit time: handling (halts none) + a round trip per exit.
        rows = rows.copy()
        rows[:, 2] = rows[:, 2] + e_added * rows[:, 1]
        if probe in boots_of:
            vm_ids, nested_ids = boots_of[probe]
            loads.append(ProbeLoad(probe, rows, nested[probe], "boots", vm_ids, nested_ids))
        else:
            loads.append(ProbeLoad(probe, rows, nested[probe]))
    return loads, e
