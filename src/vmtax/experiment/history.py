"""The history use case (`vmtax history`): one configuration's overhead against a baseline in
every stored experiment that has both, in time order, with the interval `vmtax compare`
gives each, what changed in the fingerprints between consecutive experiments, and the steps
vmtax.history.steps finds in the boot-level values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.history import changes, steps
from vmtax.stats.compare import compare
from vmtax.stats.compare_options import CompareOptions, RunStatistic
from vmtax.store import Store

SCHEMA = "vmtax.history/1"


@dataclass(frozen=True)
class Point:
    """One experiment of one probe's history."""

    probe: str
    experiment_id: int
    started: str
    config: str
    overhead: float
    ci_low: float
    ci_high: float
    boots: int
    runs: int
    verdict: str
    #: What the fingerprints say changed since the previous experiment of this history.
    changes: tuple[str, ...]
    #: The boot-level log overheads the steps are found in.
    boot_values: tuple[float, ...]


@dataclass(frozen=True)
class Step:
    """A step tested in one probe's history, between two consecutive experiments."""

    probe: str
    before_id: int
    after_id: int
    ratio: float
    p_value: float
    p_adjusted: float
    found: bool
    changes: tuple[str, ...]


@dataclass(frozen=True)
class History:
    """Every probe's history, its tested steps, and what could not be done (notes)."""

    baseline: str
    selectors: list[str]
    min_size: int
    points: list[Point]
    steps: list[Step]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "schema": SCHEMA,
            "baseline": self.baseline,
            "selectors": self.selectors,
            "min_size": self.min_size,
            "alpha": steps.ALPHA,
            "points": [
                {
                    "probe": p.probe,
                    "experiment": p.experiment_id,
                    "started": p.started,
                    "config": p.config,
                    "overhead": num(p.overhead),
                    "ci_low": num(p.ci_low),
                    "ci_high": num(p.ci_high),
                    "boots": p.boots,
                    "runs": p.runs,
                    "verdict": p.verdict,
                    "changes": list(p.changes),
                }
                for p in self.points
            ],
            "steps": [
                {
                    "probe": s.probe,
                    "before": s.before_id,
                    "after": s.after_id,
                    "ratio": num(s.ratio),
                    "p_value": num(s.p_value),
                    "p_adjusted": num(s.p_adjusted),
                    "found": s.found,
                    "changes": list(s.changes),
                }
                for s in self.steps
            ],
            "notes": list(self.notes),
        }


def _log_values(group: pd.DataFrame, statistic: RunStatistic) -> pd.Series:
    values = pd.to_numeric(group[statistic.value], errors="coerce")
    return values[np.isfinite(values) & (values > 0)]


def _boot_values(
    cfg: pd.DataFrame, base: pd.DataFrame, better: str, statistic: RunStatistic = RunStatistic.MEAN
) -> tuple[float, ...]:
    """One log overhead per boot of the configuration: the log of its boot's mean run value
    over the baseline's mean run value, direction-aware (above 0: slower); a run's value is
    its ``statistic``."""
    base_vals = _log_values(base, statistic)
    if base_vals.empty:
        return ()
    sign = -1.0 if better == "higher" else 1.0
    out = []
    for _, boot in cfg.groupby("boot", sort=True):
        vals = _log_values(boot, statistic)
        if not vals.empty:
            out.append(sign * (math.log(vals.mean()) - math.log(base_vals.mean())))
    return tuple(out)


def history(
    selectors: Sequence[str],
    baseline: str = "level=L0",
    *,
    min_size: int = steps.MIN_SIZE,
    permutations: int = steps.PERMUTATIONS,
    seed: int = 0,
    statistic: RunStatistic = RunStatistic.MEAN,
    db: str | None = None,
) -> History:
    """The history of the configuration ``selectors`` choose (OR; e.g. ``level=L1,accel=kvm``
    and ``probe=cpuid``) against ``baseline`` in each experiment that has both, on each run's
    ``statistic``."""
    with Store.open(db, read_only=True) as store:
        chosen = store.runs(list(selectors))
        base_all = store.runs([baseline])
        exps = store.experiments()
        chosen = chosen[chosen["status"] == "ok"]
        base_all = base_all[base_all["status"] == "ok"]
        chosen = chosen[~chosen["run_id"].isin(set(base_all["run_id"]))]
        ids = set(chosen["configuration_id"]) | set(base_all["configuration_id"])
        configs = store.configurations(ids) if ids else None
        where = store.url_display
    if chosen.empty:
        raise UsageError(
            f"no completed runs match {' '.join(selectors) or 'the store'} outside the "
            f"baseline {baseline!r} in {where}"
        )
    fps = (
        dict(zip(configs["configuration_id"], configs["fingerprint"], strict=True))
        if configs is not None
        else {}
    )
    started = {
        int(e): (t.isoformat() if not pd.isna(t) else "")
        for e, t in zip(exps["experiment_id"], exps["started_at"], strict=True)
    }
    order = {int(e): i for i, e in enumerate(exps.sort_values(["started_at", "experiment_id"])
                                                 ["experiment_id"])}  # fmt: skip
    notes: list[str] = []
    options = CompareOptions(test="welch")
    points: dict[str, list[Point]] = {}
    prev_fp: dict[str, tuple[Any, Any, str, str]] = {}
    for exp_id in sorted(set(chosen["experiment_id"].astype(int)), key=lambda e: order[e]):
        mine = chosen[chosen["experiment_id"] == exp_id]
        base = base_all[base_all["experiment_id"] == exp_id]
        probes = sorted(set(mine["probe"].astype(str)))
        for probe in probes:
            if not (base["probe"] == probe).any():
                notes.append(f"experiment {exp_id}: probe {probe} has no baseline runs; left out")
            for side, what in (
                (mine[mine["probe"] == probe], "the selectors"),
                (base[base["probe"] == probe], f"baseline {baseline!r}"),
            ):
                if side["configuration_id"].nunique() > 1:
                    raise UsageError(
                        f"{what} match {side['config'].nunique()} configurations for probe "
                        f"{probe} in experiment {exp_id} ({'; '.join(sorted(set(side['config'])))}"
                        "); narrow them, e.g. with level= or a label"
                    )
        probes = [pr for pr in probes if (base["probe"] == pr).any()]
        if not probes:
            continue
        # One comparison per experiment, every probe in it (as `vmtax compare` would make it).
        both = pd.concat(
            [base[base["probe"].isin(probes)], mine[mine["probe"].isin(probes)]],
            ignore_index=True,
        )
        is_base = both["run_id"].isin(set(base["run_id"]))
        try:
            comp = compare(both, is_base, metric=[statistic.value], options=options, label=baseline)
        except UsageError as exc:  # e.g. no run of a probe on both sides: that experiment only
            notes.append(f"experiment {exp_id}: {exc.message}; left out")
            continue
        rows = {str(r["probe"]): r for r in comp.rows[~comp.rows["is_baseline"]].to_dict("records")}
        for probe in probes:
            if probe not in rows:
                continue
            row = rows[probe]
            cfg = mine[mine["probe"] == probe]
            b = base[base["probe"] == probe]
            better = str(row["better"])
            cfg_id = int(cfg["configuration_id"].iloc[0])
            base_id = int(b["configuration_id"].iloc[0])
            level, base_level = str(cfg["level"].iloc[0]), str(b["level"].iloc[0])
            seen = prev_fp.get(probe)
            what_changed: list[str] = []
            if seen is not None:
                what_changed = changes.changed(seen[0], fps.get(cfg_id), level) + changes.changed(
                    seen[1], fps.get(base_id), base_level
                )
            prev_fp[probe] = (fps.get(cfg_id), fps.get(base_id), level, base_level)
            points.setdefault(probe, []).append(
                Point(
                    probe=probe,
                    experiment_id=exp_id,
                    started=started.get(exp_id, ""),
                    config=str(cfg["config"].iloc[0]),
                    overhead=float(row["overhead"]),
                    ci_low=float(row["ci_low"]),
                    ci_high=float(row["ci_high"]),
                    boots=int(cfg["boot"].nunique()),
                    runs=len(cfg),
                    verdict=str(row["verdict"]),
                    changes=tuple(dict.fromkeys(what_changed)),
                    boot_values=_boot_values(cfg, b, better, statistic),
                )
            )
    histories: dict[str, list[steps.Point]] = {}
    for probe, pts in points.items():
        usable = [p for p in pts if p.boot_values]
        if len(usable) < steps.needed(min_size):
            notes.append(
                f"probe {probe}: {len(usable)} experiments; a step needs at least "
                f"{steps.needed(min_size)} ({min_size} on each side): no step tested"
            )
            continue
        histories[probe] = [steps.Point(p.experiment_id, np.array(p.boot_values)) for p in usable]
    found = steps.search(histories, min_size=min_size, permutations=permutations, seed=seed)
    by_exp = {(p.probe, p.experiment_id): p for pts in points.values() for p in pts}
    tested = [
        Step(
            probe=probe,
            before_id=s.before_id,
            after_id=s.after_id,
            ratio=s.ratio,
            p_value=s.p_value,
            p_adjusted=s.p_adjusted,
            found=s.found,
            changes=_changes_between(points[probe], s.before_id, s.after_id, by_exp, probe),
        )
        for probe, part in found.items()
        for s in part
    ]
    return History(
        baseline=baseline,
        selectors=list(selectors),
        min_size=min_size,
        points=[p for probe in sorted(points) for p in points[probe]],
        steps=tested,
        notes=notes,
    )


def _changes_between(
    pts: list[Point],
    before_id: int,
    after_id: int,
    by_exp: dict[tuple[str, int], Point],
    probe: str,
) -> tuple[str, ...]:
    """What changed from the experiment before a step to the one after it: the changes of
    every point after ``before_id`` up to ``after_id`` (experiments without boot values, left
    out of the search, lie between them)."""
    ids = [p.experiment_id for p in pts]
    lo, hi = ids.index(before_id), ids.index(after_id)
    out: list[str] = []
    for exp_id in ids[lo + 1 : hi + 1]:
        out += by_exp[(probe, exp_id)].changes
    return tuple(dict.fromkeys(out))
