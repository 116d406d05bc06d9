"""Experiments as use cases, between the CLI (or the notebook API) and the runner.

``run.run(RunRequest(...))`` validates once, plans, opens the store, sizes runs and executes;
``resume(ref, db=...)`` finishes an interrupted one. ``run_sweep(SweepRequest(...))`` and
``resume_sweep(exp, db=...)`` do the same for an overcommitment sweep (``vmtax.sweep``), and
``importing.import_files(paths, ...)`` stores saved agent streams as one experiment.
The CLI parses and renders, nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vmtax.experiment.command import command_line
    from vmtax.experiment.lookup import experiment_id, reconcile
    from vmtax.experiment.request import RunRequest, parse_labels
    from vmtax.experiment.run import Finished, resume
    from vmtax.experiment.sweep import (
        SweepRequest,
        SweepResult,
        resume_sweep,
        run_sweep,
        stored_sweep,
        sweep_id,
        sweep_summary,
    )

__all__ = [
    "Finished",
    "RunRequest",
    "SweepRequest",
    "SweepResult",
    "command_line",
    "experiment_id",
    "parse_labels",
    "reconcile",
    "resume",
    "resume_sweep",
    "run_sweep",
    "stored_sweep",
    "sweep_id",
    "sweep_summary",
]


def __getattr__(name: str) -> object:
    # Each use case loads the store, pandas and the runner: only when one is used, so that a
    # command's module (and its --help) can name this package without paying for them all.
    # (``run`` is reached as ``experiment.run.run``: the module of that name, once loaded,
    # is what the package's attribute ``run`` holds.)
    if name in ("experiment_id", "reconcile"):
        from vmtax.experiment import lookup  # heavy: the store and pandas, when first used

        return getattr(lookup, name)
    if name == "command_line":
        from vmtax.experiment.command import command_line  # light: keeps the package face lazy

        return command_line
    if name in ("RunRequest", "parse_labels"):
        from vmtax.experiment import request  # heavy: the plan and pydantic, when first used

        return getattr(request, name)
    if name in ("Finished", "resume"):
        from vmtax.experiment import run  # heavy: the runner and the store, when first used

        return getattr(run, name)
    if name in __all__:
        from vmtax.experiment import sweep  # heavy: the sweep and the store, when first used

        return getattr(sweep, name)
    raise AttributeError(f"module 'vmtax.experiment' has no attribute {name!r}")
