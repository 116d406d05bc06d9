"""Out-of-sample predictions of the nested level with the time-driven term (docs/model.md,
"The time-driven term" and "Out of sample").

The per-operation model (vmtax.model.outofsample) carries every exit a probe takes at the VM
level one level deeper at the cost κ · W. Some of those exits come with the guest's *time*
(its timer interrupts), not with its operations, and one level deeper an operation lasts
longer, so more of them land inside it, each costing more. Here each level's share of time
those exits take, its load ``r · c``, is calibrated at the level itself by the ``spin``
probe (exit-free work in short chunks: the median chunk is the work alone, the mean the work
plus what the time-driven exits took), and

- at the VM level, the probe's time without them is ``T_ops = t · (1 − load_vm)``, and its
  exit load per operation without them is ``W − w · t`` (``w``: the spin's exit load per ns
  of its time, from its own profile);
- κ is fitted through the origin on the other probes' operation parts:
  ``D_j = t_nested(j) · (1 − load_nested) − T_ops(j)`` against ``W_op(j)``;
- the target's nested time is ``T = (T_ops + κ · W_op) / (1 − load_nested)``, the solution
  of ``T = T_ops,nested + r · T · c`` (vmtax.model.timedriven). Where ``load ≥ 1`` the level
  never finishes an operation, and no number is given.

No run of the target at the nested level enters: the nested level's spin runs are
calibration of the level, like the other probes' nested runs. The interval is the delta
method over every group of runs used, on the log scale, with one future run like the
target's VM-level runs (vmtax.model.intervals).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vmtax.hostprof.perop import per_reason
from vmtax.model.intervals import future_run, interval, linearise
from vmtax.model.outofsample import COLUMNS, WEIGHTS, ProbeLoad, calibration_sets, scored
from vmtax.model.sources import level_number, ns_scale

#: The probe that calibrates the time-driven term at a level.
SPIN = "spin"
#: The ``weights`` of a time-driven row: the per-operation weighting it extends.
TIMED = {w: f"{w}, time-driven" for w in WEIGHTS}


@dataclass
class SpinLoad:
    """The spin probe's runs: at the VM level (runs, 4) of mean chunk ns, median chunk ns,
    exits per chunk and exit time per chunk (ns, a round trip e per exit included); at the
    nested level (runs, 2) of mean and median chunk ns."""

    vm: np.ndarray
    nested: np.ndarray


def _load(spin: np.ndarray) -> np.ndarray:
    """The share of time the time-driven exits take: 1 − work / (work + their time)."""
    return 1.0 - spin[:, 1] / spin[:, 0]


def _model(col: int, calibrated: int) -> Callable[[dict[str, np.ndarray]], dict]:
    def evaluate(m: dict[str, np.ndarray]) -> dict:
        load_vm, load_n = _load(m["spin_vm"]), _load(m["spin_nested"])
        per_ns = m["spin_vm"][:, col + 1] / m["spin_vm"][:, 0]  # exits or exit time per ns

        def op_part(vm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return vm[:, 0] * (1.0 - load_vm), vm[:, col] - per_ns * vm[:, 0]

        num = den = 0.0
        for i in range(calibrated):
            t_ops, w = op_part(m[f"vm{i}"])
            num = num + (m[f"nested{i}"] * (1.0 - load_n) - t_ops) * w
            den = den + w * w
        kappa = num / den
        t_ops, w = op_part(m["target"])
        t_ops_nested = t_ops + kappa * w
        return {
            "kappa": kappa,
            "load": load_n,
            "load_vm": load_vm,
            "w_op": w,
            "t_ops": t_ops_nested,
            "predicted": t_ops_nested / (1.0 - load_n),
        }

    return evaluate


def groups_for(
    target: ProbeLoad, calibration: Sequence[ProbeLoad], spin: SpinLoad
) -> dict[str, np.ndarray]:
    """The independent groups of runs, each (1, runs, k): the target's VM level, the spin's
    two levels, and each calibration probe's VM and nested levels."""
    groups = {
        "target": target.vm[None],
        "spin_vm": spin.vm[None],
        "spin_nested": spin.nested[None],
    }
    for i, c in enumerate(calibration):
        groups[f"vm{i}"] = c.vm[None]
        groups[f"nested{i}"] = np.asarray(c.nested, dtype=np.float64)[None, :, None]
    return groups


@dataclass(frozen=True)
class TimedPrediction:
    """(trials,) arrays: the nested time and its interval (NaN where ``never``), κ, the
    nested level's load ``r · c``, and whether the level never finishes an operation."""

    predicted: np.ndarray
    low: np.ndarray
    high: np.ndarray
    kappa: np.ndarray
    load: np.ndarray
    never: np.ndarray


def prediction_intervals(
    groups: dict[str, np.ndarray], calibrated: int, weights: str
) -> TimedPrediction:
    """The prediction from ``groups_for``' groups (with a trials axis, so the coverage
    simulation runs this code)."""
    col = 1 if weights == "exits" else 2
    lin = linearise(_model(col, calibrated), groups)
    est, low, high = interval(lin, "predicted", log=True, future=future_run("target", groups))
    load = lin.estimate["load"]
    never = ~(load < 1.0)
    nan = np.full(est.shape, np.nan)
    return TimedPrediction(
        np.where(never, nan, est), np.where(never, nan, low), np.where(never, nan, high),
        lin.estimate["kappa"], load, never,
    )  # fmt: skip


def predict(
    loads: Sequence[ProbeLoad],
    spin: SpinLoad,
    *,
    nested_level: int,
    unit: str = "ns",
    weightings: Sequence[str] = WEIGHTS,
) -> pd.DataFrame:
    """Every probe's nested level with the time-driven term, in each of ``weightings``, both
    calibrations where they exist; the columns of vmtax.model.outofsample plus ``load`` (the
    nested level's r · c) and ``note``."""
    rows = []
    for target, cal in calibration_sets(loads):
        for weights in weightings:
            got = prediction_intervals(groups_for(target, cal, spin), len(cal), weights)
            est, low, high, kappa, load = (
                float(x[0]) for x in (got.predicted, got.low, got.high, got.kappa, got.load)
            )
            never = bool(got.never[0])
            if not never and not est > 0:
                continue  # not a time (the calibration probes got faster one level down)
            score = scored(target, cal, None if never else est)
            rows.append(
                {
                    "benchmark": target.probe, "level": nested_level, "dvh": False,
                    "weights": TIMED[weights],
                    "calibrated_on": ", ".join([*(c.probe for c in cal), SPIN]),
                    "predicted": None if never else est,
                    "low": None if never else low, "high": None if never else high,
                    "unit": unit, **score,
                    "kappa": kappa, "kind": "prediction", "load": load,
                    "interval": "next run",
                    "note": f"r·c = {load:.3g} ≥ 1 at L{nested_level}: the time-driven "
                    "exits take all of its time, it never finishes an operation"
                    if never else "",
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=[*COLUMNS, "load", "note"])


def spin_from(
    runs: pd.DataFrame, profiles: pd.DataFrame, tsc_hz: dict[int, float], vm_level: int, e: float
) -> SpinLoad | None:
    """The spin probe's runs at the VM level (with the profile recorded below it) and at the
    nested level, or None when either is missing."""
    spin = runs[(runs["status"] == "ok") & (runs["probe"] == SPIN)]
    level = spin["level"].map(level_number)
    at_vm, deeper = spin[level == vm_level], spin[level == vm_level + 1]
    reasons = per_reason(profiles, f"L{vm_level - 1}") if len(profiles) else None
    if at_vm.empty or deeper.empty or reasons is None or reasons.empty:
        return None
    per_run = reasons.groupby("run_id")[["exits_per_op", "handling_ns"]].sum()
    at_vm = at_vm[at_vm["run_id"].isin(per_run.index)]
    if at_vm.empty:
        return None

    def times(g: pd.DataFrame) -> np.ndarray:
        scale = ns_scale(str(g["unit"].iloc[0]), g, tsc_hz)
        return g[["mean", "median"]].to_numpy(np.float64) * scale

    load = per_run.loc[at_vm["run_id"]].to_numpy(np.float64)
    vm = np.column_stack([times(at_vm), load[:, 0], load[:, 1] + e * load[:, 0]])
    return SpinLoad(vm, times(deeper))
