"""The model use case (`vmtax model`): the nested-cost model calibrated on a dataset's VM and
nested-VM columns or on measured levels, predicting deeper levels (docs/model.md).

A :class:`ModelRequest` is checked once when built; :func:`model` runs the case it asks for
and returns what the command renders: a :class:`DatasetModel`, a :class:`MeasuredModel` or
an :class:`OutOfSample`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.store import exit_profiles
from vmtax.stats.compare_options import RunStatistic
from vmtax.store import Store

#: The per-run statistics (columns of the runs table) an out-of-sample prediction can take a
#: run's time per operation from.
STATISTICS = tuple(s.value for s in RunStatistic)

if TYPE_CHECKING:
    from vmtax.model import Fit


@dataclass(frozen=True)
class ModelRequest:
    """What to calibrate on and how: a dataset, or selectors of measured runs (default
    ``exp=latest``) with the level that plays the VM, the probes, a hand count of exits per
    nested exit, or out-of-sample prediction of the runs' means or medians. The intervals are
    analytic (the delta method): nothing is resampled, so there is no seed."""

    selectors: tuple[str, ...] = ()
    dataset: str | None = None
    vm_level: str | None = None
    probes: tuple[str, ...] = ()
    exits_per_exit: float | None = None
    out_of_sample: bool = False
    statistic: str = "mean"
    db: str | None = None

    def __post_init__(self) -> None:
        if self.exits_per_exit is not None and not self.exits_per_exit >= 1:
            raise UsageError("--exits-per-exit counts the forwarded exit itself: it is at least 1")
        if self.out_of_sample and (self.dataset or self.exits_per_exit is not None):
            raise UsageError("--out-of-sample applies to measured levels with exit profiles")
        if self.statistic not in STATISTICS:
            raise UsageError(
                f"unknown statistic {self.statistic!r} (choose from {', '.join(STATISTICS)})"
            )
        if self.statistic != "mean" and not self.out_of_sample:
            raise UsageError("--statistic applies to --out-of-sample predictions")
        if self.dataset:
            if self.exits_per_exit is not None:
                raise UsageError("--exits-per-exit applies to measured levels, not to a dataset")
            if self.selectors:
                raise UsageError("give either --dataset or selectors of measured runs, not both")

    @property
    def runs(self) -> list[str]:
        """The selectors of the measured runs: those given, else the latest experiment."""
        return list(self.selectors or ("exp=latest",))


@dataclass(frozen=True)
class DatasetModel:
    """The model fitted on a dataset, and the dataset's published nested+DVH column (by
    benchmark; empty when it has none)."""

    name: str
    fit: Fit
    published: dict[str, float]
    #: The held-out cells scored (vmtax.model.score): one line per rule, then the bar.
    score: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MeasuredModel:
    """The model fitted on measured levels: ``vm_level`` plays the VM, the level above it the
    nested VM; ``notes`` say what the measurements lacked."""

    fit: Fit
    vm_level: int
    notes: list[str] = field(default_factory=list)
    #: The held-out cells scored (vmtax.model.score): one line per rule, then the bar.
    score: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OutOfSample:
    """Each probe's nested level predicted without its own nested runs (``predictions``),
    from the VM level ``vm_level``, with ``e`` the exit cost (ns) the factor was fitted at,
    and the runs' ``statistic`` (mean or median) predicted."""

    predictions: pd.DataFrame
    vm_level: int
    e: float
    statistic: str = "mean"
    #: The held-out cells scored (vmtax.model.score): one line per rule, then the bar.
    score: list[str] = field(default_factory=list)


def model(request: ModelRequest) -> DatasetModel | MeasuredModel | OutOfSample:
    """Run the case ``request`` asks for."""
    if request.dataset:
        return dataset_model(request)
    if request.out_of_sample:
        return out_of_sample(request)
    return measured_model(request)


def _vm_level(request: ModelRequest) -> int | None:
    # deferred: the model package (tens of ms to import), only for this command
    from vmtax.model.sources import level_number

    return level_number(request.vm_level) if request.vm_level else None


def dataset_model(request: ModelRequest) -> DatasetModel:
    """Calibrate on a dataset's VM and nested-VM columns."""
    # deferred: the model package (tens of ms to import), only for this command
    from vmtax.model import fit, from_dataset
    from vmtax.model.sources import published_dvh

    name = str(request.dataset)
    result = fit(from_dataset(name))
    return DatasetModel(name, result, published_dvh(name), score_lines(result.predictions, 2))


def score_lines(predictions: pd.DataFrame, nested_level: int) -> list[str]:
    """Each rule's median absolute error and worst cell, on its own held-out cells and on the
    cells every rule predicted, then the accuracy bar for hardware (vmtax.model.score)."""
    # deferred: the model package (tens of ms to import), only for this command
    from vmtax.model.score import bars, summarise

    own = summarise(predictions)
    same = summarise(predictions, common=True)
    lines = [s.line() for s in own]
    if len(same) > 1:
        n = same[0].cells
        lines.append(
            f"on the same {n} cell(s): "
            + "; ".join(f"{s.rule} {s.median_abs_error_pct:.1f}%" for s in same)
            + " median |error|"
        )
    if not own:
        lines.append("no held-out cell: nothing measured at a predicted level to score against")
    lines += [f"bar for hardware, {b.line()}" for b in bars(predictions, nested_level)]
    return lines


def measured_model(request: ModelRequest) -> MeasuredModel:
    """Calibrate on the VM level and the one above it; predict the rest, beside the measured
    level where there is one."""
    # deferred: the model package (tens of ms to import), only for this command
    from vmtax.model import fit
    from vmtax.model.sources import from_store

    vm_level = _vm_level(request)
    with Store.open(request.db, read_only=True) as store:
        found = from_store(store, request.runs, vm_level=vm_level, probes=list(request.probes))
    for s in found.series:
        if s.benchmark == "cpuid":
            s.assumed_exits = request.exits_per_exit
    result = fit(found.series, offset=found.vm_level - 1)
    score = score_lines(result.predictions, found.vm_level + 1)
    return MeasuredModel(result, found.vm_level, list(found.notes), score)


def out_of_sample(request: ModelRequest) -> OutOfSample:
    """Each probe's nested level from its VM-level runs and exit profile and a nesting factor
    fitted on other probes only."""
    # heavy: scipy, only for --out-of-sample
    from vmtax.model import groups
    from vmtax.model import outofsample_timed as timed
    from vmtax.model.outofsample import loads_from, predict, round_trip_added, weightings
    from vmtax.model.sources import default_vm_level, tsc_rates

    vm_level = _vm_level(request)
    selectors = request.runs
    with Store.open(request.db, read_only=True) as store:
        runs = store.runs(selectors)
        if runs.empty or not (runs["status"] == "ok").any():
            raise UsageError(f"no completed runs match {' '.join(selectors)}")
        tsc = tsc_rates(store, runs)
        frames = [exit_profiles(store, int(e)) for e in sorted(set(runs["experiment_id"]))]
    frames = [f for f in frames if len(f)]
    profiles = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(profiles):
        profiles = profiles[profiles["run_id"].isin(runs["run_id"])]
    ok = runs[runs["status"] == "ok"]
    vm = vm_level if vm_level is not None else default_vm_level(ok)
    loads, e = loads_from(ok, profiles, tsc, vm, request.statistic)
    # The spin probe calibrates the time-driven term; it is no exit mechanism to predict.
    loads = [p for p in loads if p.probe != timed.SPIN]
    weights = weightings(profiles, vm)
    preds = predict(loads, nested_level=vm + 1, weightings=weights)
    # The term's load is the spin's mean chunk over its median: the rare chunks an exit landed
    # in, which are what a median leaves out. Medians get the per-operation rows only.
    e_added = round_trip_added(e)  # as loads_from adds it
    spin = timed.spin_from(ok, profiles, tsc, vm, e_added) if request.statistic == "mean" else None
    if spin is not None and len(preds):
        preds = pd.concat(
            [preds, timed.predict(loads, spin, nested_level=vm + 1, weightings=weights)],
            ignore_index=True,
        ).fillna({"note": ""})
    if preds.empty:
        raise UsageError(
            f"no probe has an L{vm + 1} to calibrate on besides the one predicted: run two or "
            f"more probes at L{vm} and L{vm + 1}"
        )
    # κ per exit group, on the other probes (never the one predicted), with the single κ of
    # the same fit beside it; and the groups' κ fitted on every probe, with their intervals.
    probes = [
        p
        for p in groups.group_probes(ok, profiles, tsc, vm, request.statistic)
        if p.probe != timed.SPIN
    ]
    grouped, whole = groups.predict(probes, nested_level=vm + 1)
    if len(grouped):
        preds = pd.concat([preds, grouped], ignore_index=True)
        if "note" in preds:
            preds = preds.fillna({"note": ""})
    lines = groups.kappa_lines(whole) if whole is not None else []
    score = [*lines, *score_lines(preds, vm + 1)]
    return OutOfSample(preds, vm, float(e), request.statistic, score)
