"""Sweep steps and samples in the results store (tables ``sweep_steps`` / ``sweep_samples``).

A sweep is an experiment (``suite = "sweep"``, its spec in ``plan``, its step order's seed
in ``seed``); each unit (one step of one replicate) is written with all its samples in one
transaction when it ends, so a unit is either committed whole or absent, and ``--resume``
redoes exactly the units without an ``ok`` row. Column ``step_index`` holds the unit's index,
replicate x steps + step (``SweepSpec.unit``): a sweep of one replicate, as every sweep
stored before replicates, keeps its steps' own indices, so the schema did not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from vmtax.store import Store

SAMPLE_FIELDS = (
    "phase", "t_s", "throughput", "transactions", "resp_mean_s", "resp_p95_s", "host_util",
    "guest_util", "steal", "vcpu_wait", "rss_mb", "major_faults", "memory", "per_guest",
)  # fmt: skip


def add_step(
    store: Store,
    experiment_id: int,
    *,
    step_index: int,
    ratio: float,
    axis: str,
    status: str,
    guests: int,
    vcpus: int,
    guest_memory_mb: int,
    host_cpus: int,
    host_memory_mb: int | None,
    started_at: datetime,
    detail: dict[str, Any] | None = None,
    error: str | None = None,
    samples: Sequence[dict[str, Any]] = (),
) -> int:
    """Write one step and its samples atomically; returns the step's id."""
    if status not in ("ok", "failed"):
        raise ValueError(f"step status must be ok or failed, not {status!r}")
    values = {
        "experiment_id": experiment_id,
        "step_index": step_index,
        "ratio": float(ratio),
        "axis": axis,
        "status": status,
        "guests": guests,
        "vcpus": vcpus,
        "guest_memory_mb": guest_memory_mb,
        "host_cpus": host_cpus,
        "host_memory_mb": host_memory_mb,
        "detail": detail,
        "error": error,
        "started_at": started_at,
        "ended_at": datetime.now(UTC),
    }
    rows = [{k: s.get(k) for k in SAMPLE_FIELDS} for s in samples]
    return store.sweeps.add_step(values, rows)


def committed_steps(store: Store, experiment_id: int) -> set[int]:
    """Indices of the steps already stored as ``ok``."""
    return store.sweeps.committed_steps(experiment_id)


def steps(store: Store, experiment_id: int) -> pd.DataFrame:
    """Every stored step of a sweep (ok and failed), in step order."""
    return store.sweeps.steps(experiment_id)


def samples(store: Store, step_ids: Sequence[int]) -> pd.DataFrame:
    """The samples of the given steps, in order."""
    return store.sweeps.samples(step_ids)
