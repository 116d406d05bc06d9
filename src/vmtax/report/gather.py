"""The one step of a report that reads the store: everything the report shows, gathered
into a frozen ``ReportInput`` (``report/inputs.py``). The renderers (analysis, html,
markdown, sweep, exits, figures) take that value and never see a store.

It reads a ``Store`` or the read-only ``store.reader.StoreReader`` (`vmtax report`'s: a
SQLite store is read without SQLAlchemy), which answer alike; a sweep's summary is read
through the reader's ``Store``.

Example::

    from vmtax.store.reader import StoreReader
    from vmtax.report import gather, write_report
    with StoreReader.open(None) as store:
        data = gather.load(store, ["exp=latest"])
    write_report(data, Path("report.html"))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from vmtax.errors import VmtaxError
from vmtax.hostprof.store import ExitSource
from vmtax.hostprof.store import exit_profiles as stored_exit_profiles
from vmtax.model.sources import tsc_rates
from vmtax.report.inputs import ReportInput, configurations
from vmtax.sampling.outcome import imprecise
from vmtax.store.reader import StoreReader
from vmtax.store.select import parse, resolve

if TYPE_CHECKING:
    from vmtax.store import Store
    from vmtax.sweep.summary import SweepSummary


def load(
    store: Store | StoreReader,
    selectors: Sequence[str],
    baseline: str | None = None,
    command: Sequence[str] = (),
    by: str | None = None,
) -> ReportInput:
    """Read the runs the selectors pick (and the baseline's, scoped by the selectors as
    `vmtax compare` scopes it), their samples, configurations, experiments and exit
    profiles, and the sweeps the selectors name. ``by``: the label a pooled comparison
    compares (its baseline is one value of it, however many configurations)."""
    sweeps = _sweeps(store, selected_sweeps(store, selectors))
    if sweeps:
        picked = store.runs(list(selectors))
        if not (picked["status"] == "ok").any():
            # The selectors picked sweeps and no runs: the report is the sweeps alone.
            return _sweeps_alone(picked, sweeps, selectors, command)
    resolved = resolve(store, list(selectors), baseline, by)
    runs = resolved.runs
    ok_ids = [int(r) for r in runs.loc[runs["status"] == "ok", "run_id"]]
    samples = store.samples(ok_ids) if ok_ids else {}
    experiments = [
        store.experiment(int(e)) for e in dict.fromkeys(int(x) for x in runs["experiment_id"])
    ]
    profiles = exit_profiles(store, runs["experiment_id"])
    return ReportInput(
        runs=runs,
        samples=samples,
        configurations=configurations(runs, experiments),
        experiments=experiments,
        selectors=list(selectors),
        baseline=baseline,
        baseline_mask=resolved.baseline_mask,
        command=list(command),
        source=store.url_display,
        imprecise=frozenset(imprecise(store, runs)),
        exit_profiles=profiles,
        tsc_hz=tsc_rates(store, runs) if not profiles.empty and not runs.empty else {},
        sweeps=sweeps,
    )


def _sweeps(store: Store | StoreReader, experiment_ids: list[int]) -> tuple[SweepSummary, ...]:
    """The summaries of these sweep experiments (read through Store: its sweep repository)."""
    if not experiment_ids:
        return ()
    # heavy: the sweep summary's statistics, and SQLAlchemy under a reader, only for sweeps
    from vmtax.sweep.summary import summarise

    full = store.store() if isinstance(store, StoreReader) else store
    return tuple(summarise(full, e) for e in experiment_ids)


def _sweeps_alone(
    runs: pd.DataFrame,
    sweeps: tuple[SweepSummary, ...],
    selectors: Sequence[str],
    command: Sequence[str],
) -> ReportInput:
    return ReportInput(
        runs=runs,
        samples={},
        configurations=pd.DataFrame(),
        experiments=[],
        selectors=list(selectors),
        command=list(command),
        sweeps=sweeps,
    )


def exit_profiles(store: ExitSource, experiment_ids: Iterable[int]) -> pd.DataFrame:
    """The exit profiles of these experiments (``hostprof.store.exit_profiles``), one frame."""
    frames = [stored_exit_profiles(store, int(e)) for e in dict.fromkeys(experiment_ids)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def selected_sweeps(store: Store | StoreReader, selectors: Sequence[str]) -> list[int]:
    """The sweep experiments the selectors' ``exp=`` terms name (``latest``: the newest
    experiment, if it is a sweep)."""
    ids: list[int] = []
    for text in selectors:
        for term in parse(text).experiment_terms():
            if term == "latest":
                latest = store.latest_experiment_id()
                if latest is not None:
                    ids.append(int(latest))
            elif term.isdigit():
                ids.append(int(term))
    out = []
    for exp_id in dict.fromkeys(ids):
        try:
            plan = store.experiment(exp_id).get("plan") or {}
        except VmtaxError:
            continue
        if "sweep" in plan:
            out.append(exp_id)
    return out
