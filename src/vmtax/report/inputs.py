"""What a report is drawn from: the selected runs and their samples, configurations,
experiments, exit profiles and sweeps, as one frozen value. Built from a store by
``vmtax.report.gather.load`` (the only part of the report that reads a store); tests build it
directly from frames."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from vmtax.sweep.summary import SweepSummary


@dataclass(frozen=True)
class ReportInput:
    """Everything the report shows, before any statistics.

    ``runs``: the store's runs frame (see ``Store.runs``). ``samples``: run_id -> values in
    iteration order. ``configurations``: one row per configuration_id with config, level,
    labels, target, fingerprint (dict) and provenance (dict). ``experiments``: one dict per
    experiment (id, command, suite, seed, plan, vmtax_version, agent_version, host,
    started_at, ended_at, status). ``exit_profiles``: their exit profiles
    (``hostprof.store.exit_profiles``), empty when none were recorded. ``tsc_hz``: the TSC
    rate of each configuration whose fingerprint records one (read only when there are
    profiles: `vmtax explain`'s split needs it). ``sweeps``: the overcommitment sweeps the
    selectors' ``exp=`` terms name.
    """

    runs: pd.DataFrame
    samples: Mapping[int, np.ndarray]
    configurations: pd.DataFrame
    experiments: Sequence[Mapping[str, Any]]
    selectors: Sequence[str] = ()
    baseline: str | None = None
    #: Which runs form the baseline, as vmtax.store.select.resolve found them (None: the
    #: ``baseline`` selector is applied to ``runs`` as it is, or there is no baseline).
    baseline_mask: pd.Series | None = None
    command: Sequence[str] = ()
    source: str = ""
    #: (configuration_id, probe) pairs adaptive sampling left imprecise: no verdict for them.
    imprecise: frozenset[tuple[int, str]] = frozenset()
    exit_profiles: pd.DataFrame | None = None
    tsc_hz: Mapping[int, float] = field(default_factory=dict)
    sweeps: tuple[SweepSummary, ...] = ()

    @property
    def sweeps_only(self) -> bool:
        """The selectors picked sweeps and no completed runs: the report is the sweeps alone."""
        return bool(self.sweeps) and not (self.runs["status"] == "ok").any()


def configurations(runs: pd.DataFrame, experiments: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per selected configuration, with its fingerprint and provenance. A key that
    occurs in several experiments is named "#<exp> <key>", as vmtax.stats.compare does."""
    wanted = set(int(c) for c in runs["configuration_id"]) if len(runs) else set()
    rows: list[dict[str, Any]] = []
    for exp in experiments:
        for cfg in exp.get("configurations", []) or []:
            cid = int(cfg.get("id", cfg.get("configuration_id", -1)))
            if cid in wanted:
                rows.append({**cfg, "configuration_id": cid})
    frame = pd.DataFrame(rows)
    if frame.empty:
        # Fall back to what the runs frame knows: no fingerprint, but config/level/target.
        cols = ["configuration_id", "config", "level", "labels", "target"]
        frame = (
            runs[cols].drop_duplicates("configuration_id")
            if len(runs)
            else pd.DataFrame(columns=cols)
        )
        empty = pd.Series([{}] * len(frame), index=frame.index, dtype=object)
        frame = frame.assign(fingerprint=empty, provenance=empty.copy())
    if "config" not in frame and len(runs):
        names = runs.drop_duplicates("configuration_id").set_index("configuration_id")
        frame["config"] = frame["configuration_id"].map(names["config"])
    if "experiment_id" in frame and len(frame):
        clash = frame.groupby("config")["experiment_id"].transform("nunique") > 1
        frame.loc[clash, "config"] = (
            "#" + frame.loc[clash, "experiment_id"].astype(str) + " " + frame.loc[clash, "config"]
        )
    return frame.reset_index(drop=True)
