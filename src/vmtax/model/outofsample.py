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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.perop import per_reason
from vmtax.model.intervals import future_run, interval, linearise
from vmtax.model.sources import level_number, ns_per_op

WEIGHTS = ("exits", "exit time")
CALIBRATIONS = ("cpuid", "others")
COLUMNS = [
    "benchmark", "level", "dvh", "weights", "calibrated_on", "predicted", "low", "high", "unit",
    "measured", "error_pct", "kappa", "kind",
]  # fmt: skip


@dataclass
class ProbeLoad:
    """One probe's runs: at the VM level, (runs, 3) of time, exits and exit time per op
    (ns); at the nested level, its run times (empty when it was not measured there)."""

    probe: str
    vm: np.ndarray
    nested: np.ndarray

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


def _model(col: int, calibrated: int) -> Callable[[dict[str, np.ndarray]], dict]:
    """κ through the origin on the calibration probes, and the target's nested time, from
    the groups' means (vectorised over trials)."""

    def evaluate(means: dict[str, np.ndarray]) -> dict:
        num = sum((means[f"nested{i}"] - means[f"vm{i}"][:, 0]) * means[f"vm{i}"][:, col]
                  for i in range(calibrated))  # fmt: skip
        den = sum(means[f"vm{i}"][:, col] ** 2 for i in range(calibrated))
        kappa = num / den
        return {
            "kappa": kappa,
            "predicted": means["target"][:, 0] + kappa * means["target"][:, col],
        }

    return evaluate


def prediction_intervals(
    groups: dict[str, np.ndarray], calibrated: int, weights: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(prediction, low, high, κ), each (trials,), from ``load_groups``' groups (with a trials
    axis, so the coverage simulation in CI runs this code): on the log scale, with one future
    run whose spread is the target's VM-level runs'."""
    col = 1 if weights == "exits" else 2
    lin = linearise(_model(col, calibrated), groups)
    est, low, high = interval(lin, "predicted", log=True, future=future_run("target", groups))
    return est, low, high, lin.estimate["kappa"]


def predict_one(
    target: ProbeLoad, calibration: Sequence[ProbeLoad], weights: str
) -> tuple[float, float, float, float]:
    """(prediction, low, high, κ) of ``target`` at the nested level; NaN bounds when a sample
    has one run or the prediction is not a positive time."""
    got = prediction_intervals(load_groups(target, calibration), len(calibration), weights)
    est, low, high, kappa = (float(x[0]) for x in got)
    return est, low, high, kappa


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
            real = float(target.nested.mean()) if len(target.nested) else None
            rows.append(
                {
                    "benchmark": target.probe, "level": nested_level, "dvh": False,
                    "weights": weights,
                    "calibrated_on": ", ".join(c.probe for c in cal), "predicted": est,
                    "low": low, "high": high, "unit": unit, "measured": real,
                    "error_pct": 100.0 * (est - real) / real if real else None,
                    "kappa": kappa, "kind": "prediction",
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
    for probe, g in ok.groupby("probe", sort=True):
        at_vm = g[(level[g.index] == vm_level) & g["run_id"].isin(per_run.index)]
        deeper = g[level[g.index] == vm_level + 1]
        if at_vm.empty:
            continue
        t = ns_per_op(at_vm, tsc_hz, statistic)
        load = per_run.loc[at_vm["run_id"]].to_numpy(np.float64)
        vm_rows[str(probe)] = np.column_stack([t, load[:, 0], load[:, 1]])
        nested[str(probe)] = ns_per_op(deeper, tsc_hz, statistic) if len(deeper) else np.zeros(0)
    if "cpuid" not in vm_rows:
        raise UsageError(
            f"the round trip of an exit needs cpuid's profiled runs at L{vm_level}; run "
            "--probe cpuid --exits there"
        )
    c = vm_rows["cpuid"].mean(axis=0)
    e = float((c[0] - c[2]) / c[1])
    loads = []
    for probe, rows in vm_rows.items():
        # Column 2 becomes the exit time: handling (halts none) + a round trip per exit.
        rows = rows.copy()
        rows[:, 2] = rows[:, 2] + e * rows[:, 1]
        loads.append(ProbeLoad(probe, rows, nested[probe]))
    return loads, e
