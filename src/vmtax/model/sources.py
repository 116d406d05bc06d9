"""Where the model's calibration comes from: a reference dataset (study C's VM and nested-VM
columns) or the store (measured levels, with exit profiles where they were recorded)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.perop import HALT_REASONS
from vmtax.model.mechanisms import MECHANISMS, mechanism
from vmtax.model.nested import Series
from vmtax.refs import datasets
from vmtax.store.reader import TSC_UNIT  # the contract's, without its pydantic models

if TYPE_CHECKING:
    from vmtax.store import Store

DATASET_COLUMNS = ("benchmark", "config", "cycles")
VM, NESTED, NESTED_DVH = "VM", "nested VM", "nested VM + DVH"
#: A deeper level a dataset may carry (``L3 VM``, ``L4 VM + DVH``): scored, never fitted.
DEEPER = re.compile(r"^L(\d+) VM( \+ DVH)?$")
PROFILE_COLUMNS = ("run_id", "count", "time_ns", "iterations", "complete")
TO_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


# -- a dataset ------------------------------------------------------------------------------


def _dataset_frame(name: str) -> pd.DataFrame:
    df = datasets.load(name)
    missing = [c for c in DATASET_COLUMNS if c not in df.columns]
    if missing:
        raise UsageError(
            f"dataset {name!r} lacks column(s) {', '.join(missing)}; the model needs "
            f"{', '.join(DATASET_COLUMNS)} (like dvh2020_micro)"
        )
    return df


def _number(name: str, row: pd.Series) -> float:
    try:
        return float(str(row["cycles"]).replace(",", ""))
    except ValueError:
        raise UsageError(
            f"dataset {name!r}: {row['benchmark']} / {row['config']}: cycles is not a number: "
            f"{row['cycles']!r}"
        ) from None


def from_dataset(name: str) -> list[Series]:
    """One series per benchmark from the VM and nested-VM columns (never a deeper column: the
    model must stand on those two). A nested VM + DVH column, where there is one, calibrates
    only the DVH what-if beyond depth 2 (x_k); the depth-2 DVH value stays from structure.
    Deeper rows (``L3 VM``, ``L3 VM + DVH``, ...) are kept as measurements to score the
    predictions against, never fitted."""
    df = _dataset_frame(name)
    out = []
    for bench, group in df.groupby("benchmark", sort=False):
        mechanism(str(bench))
        cells = {str(r["config"]): _number(name, r) for _, r in group.iterrows()}
        for config in (VM, NESTED):
            if config not in cells:
                raise UsageError(
                    f"dataset {name!r}: {bench} has no {config!r} row; calibration needs two "
                    "levels (the VM and the nested VM)"
                )
        deeper: dict[bool, dict[int, np.ndarray]] = {False: {}, True: {}}
        for config, value in cells.items():
            if (hit := DEEPER.match(config)) and int(hit.group(1)) >= 3:
                # Study C's VM is L1, so level n is depth n: only compared with.
                deeper[bool(hit.group(2))][int(hit.group(1))] = np.array([value])
        out.append(
            Series(
                str(bench),
                "cycles",
                np.array([cells[VM]]),
                np.array([cells[NESTED]]),
                measured=deeper[False],
                dvh_nested=np.array([cells[NESTED_DVH]]) if NESTED_DVH in cells else None,
                measured_dvh=deeper[True],
            )
        )
    if not out:
        raise UsageError(f"dataset {name!r} has no rows")
    return out


def published_dvh(name: str) -> dict[str, float]:
    """The dataset's published nested VM + DVH column (shown beside the prediction only)."""
    df = _dataset_frame(name)
    rows = df[df["config"] == NESTED_DVH]
    return {str(r["benchmark"]): _number(name, r) for _, r in rows.iterrows()}


# -- the store ------------------------------------------------------------------------------


@dataclass
class Measured:
    """What ``from_store`` found: the series, the VM level's number and notes to print."""

    series: list[Series]
    vm_level: int
    notes: list[str] = field(default_factory=list)


def level_number(level: str) -> int:
    text = str(level).strip().upper()
    if not (text.startswith("L") and text[1:].isdigit()):
        raise UsageError(f"bad level {level!r}: use L0, L1, L2, ...")
    return int(text[1:])


def default_vm_level(runs: pd.DataFrame) -> int:
    """The level that plays "the VM": the lowest level run under a hardware(-emulated) KVM
    (where an exit is an exit); without one, the lowest level present."""
    kvm = [
        level_number(lv)
        for lv, labels in zip(runs["level"], runs["labels"], strict=True)
        if str((labels or {}).get("accel", "")).lower() == "kvm"
    ]
    if kvm:
        return min(kvm)
    return min(level_number(lv) for lv in runs["level"])


def _require_hardware_nesting(runs: pd.DataFrame, vm: int) -> None:
    """The model multiplies VM exits: a nested level emulated by TCG has none to multiply
    (its costs are translation's, not exits'), so calibrating on it gives numbers that mean
    nothing. Refused, in one line."""
    for lv, labels in zip(runs["level"], runs["labels"], strict=True):
        accel = str((labels or {}).get("accel", "")).lower()
        if level_number(lv) == vm + 1 and accel == "tcg":
            raise UsageError(
                f"the nested-cost model needs the nested VM (L{vm + 1}) under KVM: it ran "
                "under TCG, whose emulation has no VM exits to multiply (measure the levels "
                "with --inner-accel kvm, or on a host where KVM runs guests)"
            )


def exit_profiles_function() -> Callable[[Store, int], pd.DataFrame] | None:
    """``vmtax.hostprof.store.exit_profiles`` when the exit-profile package is installed."""
    try:
        module = importlib.import_module("vmtax.hostprof.store")
    except ImportError:
        return None
    return getattr(module, "exit_profiles", None)


def profile_per_run(profiles: pd.DataFrame, recorded_at: str | None = None) -> pd.DataFrame:
    """Per run with a complete profile: exits per iteration and handling ns per iteration.

    A run may be profiled at several levels. The model needs the hypervisor that owns the
    (emulated) hardware support, the one below the VM level: ``recorded_at`` (e.g. ``L1``)
    when a run has a profile recorded there, else the recording that saw the most exits
    (every exit of every level above passes through that hypervisor first). The handling time
    of a reason is ``time_ns / timed`` per exit (only ``timed`` exits were timed); reasons
    without a timing take the run's mean per timed exit; a run with no timing at all has
    handling NaN.
    """
    missing = [c for c in PROFILE_COLUMNS if c not in profiles.columns]
    if missing:
        raise UsageError(f"exit profiles lack column(s) {', '.join(missing)}")
    done = profiles[profiles["complete"].astype(bool)].copy()
    if "recorded_at" not in done.columns:
        done["recorded_at"] = ""
    if "timed" not in done.columns:
        done["timed"] = done["count"]
    rows = []
    for run_id, run in done.groupby(done["run_id"].astype(int)):
        keys = run["recorded_at"].map(lambda x: "" if x is None or x != x else str(x))
        where = {str(k): g for k, g in run.groupby(keys)}
        if recorded_at in where:
            one = where[recorded_at]
        else:
            one = max(where.values(), key=lambda g: float(g["count"].sum()))
        iterations = float(one["iterations"].max())
        if iterations <= 0:
            continue
        count = one["count"].to_numpy(dtype=np.float64)
        timed = one["timed"].to_numpy(dtype=np.float64)
        # A halt's "handling time" is the time the vCPU slept: waiting, not the cost of an
        # exit. Its round trip counts (in N); its time does not.
        time_ns = np.where(_halts(one), 0.0, one["time_ns"].to_numpy(dtype=np.float64))
        has = timed > 0
        if has.any():
            per_exit = np.where(has, time_ns / np.where(has, timed, 1.0), 0.0)
            fallback = time_ns[has].sum() / timed[has].sum()
            handling = float(np.sum(count * np.where(has, per_exit, fallback)))
        else:
            handling = np.nan
        rows.append([int(run_id), count.sum() / iterations, handling / iterations])
    return pd.DataFrame(rows, columns=["run_id", "exits", "handling_ns"])


def _halts(rows: pd.DataFrame) -> np.ndarray:
    group = rows["group"] if "group" in rows.columns else pd.Series("", index=rows.index)
    reason = rows["reason"] if "reason" in rows.columns else pd.Series("", index=rows.index)
    return np.array(
        [
            str(g) == "Halt" or str(r).lower() in HALT_REASONS
            for g, r in zip(group, reason, strict=True)
        ]
    )


def from_runs(
    runs: pd.DataFrame,
    *,
    vm_level: int | None = None,
    probes: Sequence[str] = (),
    profiles: pd.DataFrame | None = None,
    tsc_hz: dict[int, float] | None = None,
) -> Measured:
    """Series from a runs frame (``Store.runs`` columns) and optional exit profiles.

    ``tsc_hz`` maps configuration ids to their TSC rate, to put cycles (cpuid) and ns on one
    scale when the probes' units differ or profiles (ns) are used.
    """
    for p in probes:
        mechanism(p)
    ok = runs[runs["status"] == "ok"] if len(runs) else runs
    if ok.empty:
        raise UsageError("no completed runs match the selectors")
    chosen = ok[ok["probe"].isin(probes or list(MECHANISMS))]
    if chosen.empty:
        found = ", ".join(sorted(set(ok["probe"])))
        raise UsageError(
            f"no probe with an exit mechanism in the selection (found {found}); the model "
            f"needs {', '.join(MECHANISMS)}"
        )
    vm = vm_level if vm_level is not None else default_vm_level(chosen)
    _require_hardware_nesting(chosen, vm)
    per_run = None
    if profiles is not None and len(profiles):
        per_run = profile_per_run(profiles, f"L{vm - 1}")
    units = set(chosen["unit"])
    to_ns = len(units) > 1 or per_run is not None
    notes: list[str] = []
    series = []
    for probe, group in chosen.groupby("probe", sort=True):
        levels = {level_number(lv): g for lv, g in group.groupby(group["level"].astype(str))}
        if vm not in levels or vm + 1 not in levels:
            have = ", ".join(f"L{n}" for n in sorted(levels))
            notes.append(
                f"{probe}: calibration needs two levels (the VM L{vm} and the nested VM "
                f"L{vm + 1}); it has {have}"
            )
            continue
        values: dict[int, np.ndarray] = {}
        prof: dict[int, np.ndarray | None] = {}
        for n, g in levels.items():
            if g["config"].nunique() > 1:
                raise UsageError(
                    f"{probe}: several configurations at L{n} "
                    f"({'; '.join(sorted(g['config'].unique()))}): select one with a selector"
                )
            scale = ns_scale(str(g["unit"].iloc[0]), g, tsc_hz or {}) if to_ns else 1.0
            values[n] = g["mean"].to_numpy(dtype=np.float64) * scale
            prof[n] = None
            if per_run is not None:
                mine = per_run[per_run["run_id"].isin(g["run_id"].astype(int))]
                if len(mine):
                    prof[n] = mine[["exits", "handling_ns"]].to_numpy(dtype=np.float64)
            if "boot" in g and g["boot"].nunique() >= 2:
                # Several boots: the boot is the unit that varies (its runs' mean), so runs
                # inside one boot are not counted as independent, and a prediction interval
                # is for the next boot's mean (docs/model.md, Uncertainty).
                boot_of = dict(zip(g["run_id"].astype(int), g["boot"].astype(str), strict=True))
                values[n] = boot_means(values[n], g["boot"].astype(str).to_numpy())[0]
                own = prof[n]
                if own is not None:
                    boots = mine["run_id"].map(boot_of).to_numpy()
                    own = boot_means(own, boots)[0]
                    # A boot without a complete profile: the levels are not paired by boot.
                    prof[n] = own if len(own) == len(values[n]) else None
        series.append(
            Series(
                str(probe),
                "ns" if to_ns else str(group["unit"].iloc[0]),
                values[vm],
                values[vm + 1],
                measured={n - vm + 1: v for n, v in values.items() if n > vm + 1},
                vm_profile=prof[vm],
                nested_profile=prof[vm + 1],
            )
        )
    if not series:
        raise UsageError(notes[0] if len(notes) == 1 else "; ".join(notes))
    return Measured(series, vm, notes)


def boot_count(runs: pd.DataFrame) -> int:
    """How many boots ``runs`` (``Store.runs`` rows) were measured in; 0 without boots."""
    return int(runs["boot"].nunique()) if "boot" in runs and len(runs) else 0


def boot_means(values: np.ndarray, boots: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each boot's mean of ``values`` (one row per run; ``boots`` its boot), and the boots,
    sorted: the boot is the unit that varies, so its runs enter through their mean."""
    order = tuple(sorted({str(b) for b in boots}))
    keys = np.asarray(boots).astype(str)
    return np.array([values[keys == b].mean(axis=0) for b in order]), order


def ns_scale(unit: str, runs: pd.DataFrame, tsc_hz: dict[int, float]) -> float:
    if unit in TO_NS:
        return TO_NS[unit]
    if unit == TSC_UNIT:
        hz = tsc_hz.get(int(runs["configuration_id"].iloc[0]))
        if hz:
            return 1e9 / hz
        raise UsageError(
            f"{runs['probe'].iloc[0]} at {runs['level'].iloc[0]} is in cycles and its "
            "configuration records no TSC rate, so it cannot be put on the ns scale of the "
            "other probes or of the exit profiles; select it alone"
        )
    raise UsageError(f"{runs['probe'].iloc[0]}: unit {unit!r} cannot be converted to ns")


def ns_per_op(runs: pd.DataFrame, tsc_hz: dict[int, float], statistic: str = "mean") -> np.ndarray:
    """The run means (or another per-run statistic of the runs table, such as the median) of
    one probe and configuration in ns (per operation)."""
    scale = ns_scale(str(runs["unit"].iloc[0]), runs, tsc_hz)
    return runs[statistic].to_numpy(dtype=np.float64) * scale


class ConfigurationSource(Protocol):
    """What :func:`tsc_rates` reads: a ``Store``, or the read-only ``store.reader.StoreReader``."""

    def configurations(self, configuration_ids: Iterable[int] | None = None) -> pd.DataFrame: ...


def tsc_rates(store: ConfigurationSource, runs: pd.DataFrame) -> dict[int, float]:
    """The TSC rate (Hz) of every configuration of ``runs`` whose fingerprint records one."""
    configs = store.configurations(sorted({int(c) for c in runs["configuration_id"]}))
    return {
        int(cid): float(hz)
        for cid, fp in zip(configs["configuration_id"], configs["fingerprint"], strict=True)
        if (hz := ((fp or {}).get("cpu") or {}).get("tsc_hz"))
    }


def from_store(
    store: Store,
    selectors: Sequence[str],
    *,
    vm_level: int | None = None,
    probes: Sequence[str] = (),
) -> Measured:
    """Series from the runs the selectors pick, with exit profiles where they exist."""
    runs = store.runs(list(selectors) or ["exp=latest"])
    if runs.empty:
        raise UsageError(f"no runs match {' '.join(selectors) or 'exp=latest'}")
    tsc = tsc_rates(store, runs)
    profiles = None
    fn = exit_profiles_function()
    if fn is not None:
        frames = [fn(store, int(e)) for e in sorted(set(runs["experiment_id"]))]
        frames = [f for f in frames if f is not None and len(f)]
        if frames:
            profiles = pd.concat(frames, ignore_index=True)
            profiles = profiles[profiles["run_id"].isin(runs["run_id"])]
    return from_runs(runs, vm_level=vm_level, probes=probes, profiles=profiles, tsc_hz=tsc)
