"""Experiments as use cases, between the CLI (or the notebook API) and the runner.

``run(RunRequest(...))`` validates once, plans, opens the store, sizes runs and executes;
``resume(ref, db=...)`` finishes an interrupted one. The CLI parses and renders, nothing more.
"""

from vmtax.experiment.lookup import experiment_id, reconcile
from vmtax.experiment.request import RunRequest, command_line, parse_labels
from vmtax.experiment.run import Finished, resume, run

__all__ = [
    "Finished",
    "RunRequest",
    "command_line",
    "experiment_id",
    "parse_labels",
    "reconcile",
    "resume",
    "run",
]
