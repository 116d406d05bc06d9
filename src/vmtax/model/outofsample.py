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
positive), over the independent samples of runs used (stats.delta) plus one future run's
spread (the predicted probe's coefficient of variation
at the VM level, scaled to the prediction); tests/test_outofsample_coverage.py simulates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.perop import per_reason
from vmtax.model.sources import level_number, ns_per_op
from vmtax.stats.delta import delta_interval

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


def _kappa(pairs: Sequence[tuple[np.ndarray, np.ndarray]], col: int) -> float:
    """κ through the origin from (vm means, nested mean) of the calibration probes."""
    num = sum((float(nested[0]) - float(vm[0])) * float(vm[col]) for vm, nested in pairs)
    den = sum(float(vm[col]) ** 2 for vm, _ in pairs)
    return num / den


def predict_one(
    target: ProbeLoad, calibration: Sequence[ProbeLoad], weights: str
) -> tuple[float, float, float, float]:
    """(prediction, low, high, κ) of ``target`` at the nested level; NaN bounds when a sample
    has one run."""
    col = target.weight(weights)

    def fn(means: Sequence[np.ndarray]) -> float:
        pairs = [(means[1 + 2 * i], means[2 + 2 * i]) for i in range(len(calibration))]
        return float(means[0][0] + _kappa(pairs, col) * means[0][col])

    def log_fn(means: Sequence[np.ndarray]) -> float:
        value = fn(means)
        return float(np.log(value)) if value > 0 else float("nan")

    groups: list[np.ndarray] = [target.vm]
    for c in calibration:
        groups += [c.vm, c.nested]
    means = [np.atleast_1d(g.mean(axis=0)) for g in groups]
    pairs = [(means[1 + 2 * i], means[2 + 2 * i]) for i in range(len(calibration))]
    point, kappa = fn(means), _kappa(pairs, col)
    if not point > 0:
        return point, float("nan"), float("nan"), kappa
    times = target.vm[:, 0]
    extra = None
    if len(times) >= 2 and times.mean() > 0:
        # One future run's own spread, lognormal with the runs' coefficient of variation.
        cv = float(times.std(ddof=1) / times.mean())
        extra = (float(np.log1p(cv * cv)), float(len(times) - 1))
    # On the log scale: a time's interval stays positive, and spreads are relative.
    got = delta_interval(log_fn, groups, extra=extra)
    return point, float(np.exp(got.low)), float(np.exp(got.high)), kappa


def predict(loads: Sequence[ProbeLoad], *, nested_level: int, unit: str = "ns") -> pd.DataFrame:
    """Every probe's nested level, both weightings, both calibrations where they exist."""
    rows = []
    measured = {p.probe: p for p in loads if len(p.nested)}
    for target in loads:
        for how in CALIBRATIONS:
            if how == "cpuid":
                cal = [measured["cpuid"]] if "cpuid" in measured and target.probe != "cpuid" else []
            else:
                cal = [p for name, p in measured.items() if name != target.probe]
            if not cal:
                continue
            for weights in WEIGHTS:
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


def loads_from(
    runs: pd.DataFrame,
    profiles: pd.DataFrame,
    tsc_hz: dict[int, float],
    vm_level: int,
) -> tuple[list[ProbeLoad], float]:
    """Each probe's ProbeLoad from stored runs and profiles (the VM level's, recorded by the
    hypervisor below it), and the VM level's round trip e (ns) from cpuid's profiled runs."""
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
        t = ns_per_op(at_vm, tsc_hz)
        load = per_run.loc[at_vm["run_id"]].to_numpy(np.float64)
        vm_rows[str(probe)] = np.column_stack([t, load[:, 0], load[:, 1]])
        nested[str(probe)] = ns_per_op(deeper, tsc_hz) if len(deeper) else np.zeros(0)
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
