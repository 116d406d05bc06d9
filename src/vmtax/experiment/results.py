"""Reading stored experiments for `vmtax results`, `vmtax import` and `vmtax run`: the list,
one experiment's study-A figures or its runs, and an export planned before it is written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vmtax.experiment.lookup import experiment_id, reconcile
from vmtax.store import Store
from vmtax.store import export as exporter

# The export's own ways of writing rows and sizes, for the commands that print them.
from vmtax.store.export import human_bytes as human_bytes
from vmtax.store.export import write_json as write_json


def open_store(db: str | None) -> Store:
    """A store to read: a mistyped --db says "no such file" and leaves none behind."""
    return Store.open(db, read_only=True)


def listing(store: Store) -> pd.DataFrame:
    """Every experiment, newest last, after marking those whose controller died."""
    reconcile(store)
    return store.experiments()


@dataclass(frozen=True)
class StudyA:
    """One experiment's study-A figures (``stats.describe``'s rows) and their title."""

    described: pd.DataFrame
    title: str


def study_a(store: Store, exp_id: int) -> StudyA:
    """The study-A figures of one experiment, with a title naming it, its suite and status."""
    # heavy: scipy, only when a table is printed
    from vmtax.stats.describe import describe

    runs = store.runs([f"exp={exp_id}"])
    described = describe(runs)
    exp = store.experiment(exp_id)
    bad = int((runs["status"] != "ok").sum()) if len(runs) else 0
    title = f"experiment {exp_id} · suite {exp['suite']} · {exp['status']}"
    configs = list(dict.fromkeys(described["config"]))
    if len(configs) == 1:
        title += f" · {configs[0]}"
    if bad:
        title += f" · {bad} runs failed or lost"
    return StudyA(described, title)


def find(store: Store, ref: str) -> int:
    """The experiment ``ref`` names (an id or ``latest``), after marking dead controllers'."""
    reconcile(store)
    return experiment_id(store, ref)


def executed_order(store: Store, exp_id: int) -> pd.DataFrame:
    """The runs of one experiment in the order they started, with their times."""
    return store.executed_order(exp_id)


def runs_with_times(store: Store, exp_id: int) -> pd.DataFrame:
    """The runs of one experiment in the tidy export shape, with start and end times."""
    return exporter.runs_with_times(store, store.runs([f"exp={exp_id}"]))


@dataclass(frozen=True)
class ExportPlan:
    """An export decided before anything is written: the experiment, whether its samples go
    too, and how many samples it holds with their estimated size in the format."""

    exp_id: int
    fmt: str
    with_samples: bool
    samples: int
    size: float

    def parquet_size(self) -> float:
        """The samples' estimated size as Parquet, the compact format."""
        return self.samples * exporter.BYTES_PER_SAMPLE["parquet"]


def plan_export(
    store: Store, ref: str, fmt: str, *, samples: bool | None, to_stdout: bool
) -> ExportPlan:
    """What an export of ``ref`` will write: samples with Parquet unless told otherwise, and
    never on stdout (which carries one table, the runs)."""
    exp_id = experiment_id(store, ref)
    with_samples = (fmt == "parquet" if samples is None else samples) and not to_stdout
    n, size = exporter.estimate(store, exp_id, fmt)
    return ExportPlan(exp_id, fmt, with_samples, n, size)


def export(
    store: Store,
    plan: ExportPlan,
    output: Path,
    progress: Callable[[int, int], None] | None = None,
) -> exporter.Exported:
    """Write the planned export (the runs and samples files appear whole, or not at all)."""
    return exporter.export(
        store, plan.exp_id, plan.fmt, output, samples=plan.with_samples, progress=progress
    )
