"""A small API for notebooks: tidy pandas frames straight from a store.

Example::

    import vmtax
    res = vmtax.open("sqlite:///results.db")    # or None for the default store
    runs = res.runs("exp=latest")               # one row per run
    s = res.samples("exp=latest,probe=cpuid")   # one row per iteration
    s.groupby(["config", "run_id"])["value"].median()

Start an experiment the way `vmtax run` does (same validation, plan, store and runner)::

    exp = vmtax.run(db="sqlite:///results.db", probes=["cpuid", "syscall"], runs=3)
    vmtax.open("sqlite:///results.db").runs(f"exp={exp}")

Start an overcommitment sweep the way `vmtax sweep` does (same checks, grid, seeded replicate
order and store)::

    from vmtax import api
    exp = api.sweep(db="sqlite:///results.db", level="L0", steps="0.5,1", replicates=2)
    s = api.sweep_summary(exp, db="sqlite:///results.db")
    print(s.knee, s.order_seed, [(f.ratio, f.throughput) for f in s.steps])

Compare, model and explain stored runs as the commands of those names do::

    from vmtax.stats.compare_options import CompareOptions
    comp = api.compare(["exp=latest"], "level=L0", CompareOptions(resamples=2000, seed=1))
    comp.rows[["probe", "config", "overhead", "ci_low", "ci_high", "verdict"]]
    api.model(dataset="dvh2020_micro").fit.predictions
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from vmtax.errors import VmtaxError
from vmtax.store import Store

# The tidy shapes live with the store (exports use them too); re-exported for notebooks.
from vmtax.store.tidy import LABEL_PREFIX as LABEL_PREFIX
from vmtax.store.tidy import SAMPLE_COLUMNS as SAMPLE_COLUMNS
from vmtax.store.tidy import tidy_runs, tidy_samples

if TYPE_CHECKING:
    from vmtax.experiment.model import DatasetModel, MeasuredModel, OutOfSample
    from vmtax.stats.compare import Comparison
    from vmtax.stats.compare_options import CompareOptions
    from vmtax.sweep.summary import SweepSummary


class Results:
    """Read-only access to a store, as tidy DataFrames."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def url(self) -> str:
        """The store URL, password redacted."""
        return self.store.url_display

    def experiments(self) -> pd.DataFrame:
        """One row per experiment."""
        return self.store.experiments()

    def runs(self, *selectors: str) -> pd.DataFrame:
        """One row per run, every label as its own ``label_<key>`` column.

        ``selectors`` follow ``vmtax.store.select`` (none = every run).
        """
        return tidy_runs(self.store.runs(_flatten(selectors)))

    def samples(self, *selectors: str, warmup: bool = False) -> pd.DataFrame:
        """One row per iteration of the selected runs.

        ``iteration`` counts measured iterations from 0; with ``warmup=True`` the warm-up
        iterations are included as well, numbered -w..-1 so that sorting by ``iteration``
        gives the order they ran in.
        """
        return tidy_samples(self.store, self.store.runs(_flatten(selectors)), warmup=warmup)

    def close(self) -> None:
        """Release the store's connections."""
        self.store.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(db_url: str | None = None) -> Results:  # noqa: A001 - the name the README promises
    """Open a store for reading: a URL, a SQLite path, or None for ``$VMTAX_DB``/the default.

    Nothing is created or upgraded: a missing file or an outdated schema is an error.
    """
    return Results(Store.open(db_url, read_only=True))


def run(db: str | None = None, **options: Any) -> int:
    """Run an experiment as `vmtax run` does and return its id.

    ``options`` are :class:`vmtax.experiment.RunRequest`'s fields (``suite``, ``probes``,
    ``runs``, ``levels``, ``labels``, ``precision``, ...). Bad input raises UsageError
    before anything starts; a target that fails as a whole raises VmtaxError after its runs
    are stored. The report `vmtax run` writes is written too, before this returns, to the
    same file (``$VMTAX_RUN_REPORT``, default ``vmtax-report-{store}-{id}.html``; ``none``
    for no report); a report that cannot be written is a warning, the runs stay stored.
    """
    # The runner pulls in the targets and workloads: load them only when a run is asked for.
    from vmtax.experiment.request import RunRequest
    from vmtax.experiment.run import run as run_experiment

    done = run_experiment(RunRequest(db=db, argv=["(vmtax.run)"], **options))
    if done.report is not None and done.report.problem is not None:
        warnings.warn(f"report not written: {done.report.problem}", stacklevel=2)
    if done.problem:
        raise VmtaxError(done.problem)
    return done.experiment_id


def sweep(db: str | None = None, **options: Any) -> int:
    """Run an overcommitment sweep as `vmtax sweep` does and return its experiment id.

    ``options`` are :class:`vmtax.experiment.SweepRequest`'s fields (``axis``, ``steps``,
    ``replicates``, ``order_seed``, ``level``, ``warmup``, ``window``, ``interval``, ...).
    Bad input raises UsageError before anything starts; a step that fails raises SweepError
    after the units before it are stored.
    """
    # The sweep boots guests through the targets: load them only when a sweep is asked for.
    from vmtax import experiment

    request = experiment.SweepRequest(db=db, argv=["(vmtax.api.sweep)"], **options)
    with experiment.run_sweep(request) as done:
        return done.experiment_id


def sweep_summary(experiment: int | str = "latest", db: str | None = None) -> SweepSummary:
    """A stored sweep's per step figures and analysis (knee, response-time rise, SLO)."""
    # The knee's statistics pull in scipy: loaded only when a sweep is asked for.
    from vmtax.experiment import stored_sweep

    return stored_sweep(str(experiment), db=db)


def compare(
    selectors: Sequence[str],
    baseline: str,
    options: CompareOptions | None = None,
    *,
    metric: Sequence[str] = ("auto",),
    db: str | None = None,
) -> Comparison:
    """Compare stored runs with a baseline as `vmtax compare` does: ``options`` is a
    :class:`vmtax.stats.compare_options.CompareOptions` (test, adjust, noise, resamples,
    seed, boot cost), the defaults when None; ``.rows`` holds the table, ``.to_json()`` the
    command's JSON."""
    # The comparison pulls in scipy and statsmodels: load it only when one is asked for.
    from vmtax.experiment.compare import measured
    from vmtax.stats.compare_options import CompareOptions

    how = options if options is not None else CompareOptions()
    return measured(_flatten(selectors), baseline, how, metric=list(metric), db=db)


def model(db: str | None = None, **options: Any) -> DatasetModel | MeasuredModel | OutOfSample:
    """Fit the nested-cost model as `vmtax model` does. ``options`` are
    :class:`vmtax.experiment.model.ModelRequest`'s fields (``dataset``, ``selectors``,
    ``vm_level``, ``probes``, ``exits_per_exit``, ``out_of_sample``); the result's
    ``fit.predictions`` (or ``predictions`` out of sample) is the table."""
    # The model package is only needed when a model is asked for.
    from vmtax.experiment.model import ModelRequest
    from vmtax.experiment.model import model as fit_model

    return fit_model(ModelRequest(db=db, **options))


def explain(*selectors: str, db: str | None = None, **options: Any) -> pd.DataFrame:
    """A level's overhead split by exit group, as `vmtax explain` prints it: ``options`` are
    ``config``, ``baseline``, ``probes`` and ``round_trip_probe``."""
    # The split's statistics pull in scipy: loaded only when one is asked for.
    from vmtax.experiment.explain import explain_overhead

    return explain_overhead(_flatten(selectors), db=db, **options).rows


def _flatten(selectors: Sequence[str]) -> list[str]:
    out: list[str] = []
    for s in selectors:
        if isinstance(s, list | tuple):
            out.extend(s)
        else:
            out.append(s)
    return out
