"""Finding an experiment by what a user types, and noticing experiments whose controller died."""

from __future__ import annotations

from vmtax import limits
from vmtax.errors import UsageError, VmtaxError
from vmtax.runner import controller_alive
from vmtax.store import Store


def experiment_id(store: Store, ref: str) -> int:
    """An experiment id from ``N`` or ``latest``; UsageError/VmtaxError when absent."""
    ref = ref.strip().lower()
    if ref == "latest":
        latest = store.latest_experiment_id()
        if latest is None:
            raise VmtaxError(f"no experiments in {store.url_display}")
        return int(latest)
    if not ref.isdigit():
        raise UsageError(f"experiment must be an id or 'latest', got {ref!r}")
    exp_id = limits.id_text(ref, "an experiment id")
    store.experiment(exp_id)  # raises VmtaxError when missing
    return exp_id


def reconcile(store: Store) -> list[int]:
    """Mark experiments whose controller died (same host, pid gone) as interrupted.

    A SIGKILLed or crashed `vmtax run` cannot mark its own experiment; the pid and its start
    time are stored with the plan, so any later command on the same host can tell.
    Experiments started on another host are left as they are.
    """
    fixed = []
    df = store.experiments()
    for exp_id in df.loc[df["status"] == "running", "experiment_id"]:
        plan = store.experiment(int(exp_id)).get("plan") or {}
        if controller_alive(plan.get("controller")) is False:
            store.finish_experiment(int(exp_id), "interrupted")
            fixed.append(int(exp_id))
    return fixed
