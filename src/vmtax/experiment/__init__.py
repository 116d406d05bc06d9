"""Experiments as use cases, between the CLI (or the notebook API) and the runner.

``run(RunRequest(...))`` validates once, plans, opens the store, sizes runs and executes;
``resume(ref, db=...)`` finishes an interrupted one. ``run_sweep(SweepRequest(...))`` and
``resume_sweep(exp, db=...)`` do the same for an overcommitment sweep (``vmtax.sweep``), and
``importing.import_files(paths, ...)`` stores saved agent streams as one experiment.
The CLI parses and renders, nothing more.
"""

from vmtax.experiment.lookup import experiment_id, reconcile
from vmtax.experiment.request import RunRequest, command_line, parse_labels
from vmtax.experiment.run import Finished, resume, run
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
    "run",
    "run_sweep",
    "stored_sweep",
    "sweep_id",
    "sweep_summary",
]
