"""Synthetic runs with known effects, in the ``Store.runs()`` layout: for tests, benchmarks and
trying the statistics without a machine to measure. Nothing here is used on real data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass
class Config:
    level: str
    labels: dict[str, str] = field(default_factory=dict)
    factor: float = 1.0  # multiplies every iteration: 1.10 is a planted 10% slowdown

    @property
    def key(self) -> str:
        return " ".join([self.level, *(f"{k}={v}" for k, v in sorted(self.labels.items()))])


def run_statistics(values: np.ndarray) -> dict[str, Any]:
    """The statistics a ``run_summary`` carries, computed as the agent does (n-1 standard
    deviation, linearly interpolated percentiles)."""
    return {
        "n": int(values.size),
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "stddev": float(values.std(ddof=1)),
        "min": float(values.min()),
        "max": float(values.max()),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
    }


def runs_frame(
    configs: Sequence[Config],
    *,
    probes: Sequence[str] = ("syscall",),
    runs: int = 10,
    iterations: int = 1000,
    base: float = 100.0,
    sigma: float = 0.05,
    run_sigma: float = 0.01,
    seed: int = 0,
    experiment_id: int = 1,
) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """Runs (lognormal iterations, a per-run level jitter) and their raw samples by run id."""
    rng = np.random.default_rng(seed)
    rows, samples = [], {}
    run_id = 0
    for probe in probes:
        for cfg_index, cfg in enumerate(configs):
            for r in range(runs):
                run_id += 1
                level = base * cfg.factor * rng.lognormal(0.0, run_sigma)
                v = level * rng.lognormal(0.0, sigma, iterations)
                samples[run_id] = v
                rows.append(
                    {
                        "run_id": run_id,
                        "experiment_id": experiment_id,
                        "configuration_id": cfg_index + 1,
                        "config": cfg.key,
                        "level": cfg.level,
                        "labels": dict(cfg.labels),
                        "target": "synthetic",
                        "hypervisor": "none",
                        "probe": probe,
                        "unit": "ns",
                        "better": "lower",
                        "throughput_unit": None,
                        "plan_index": 0,
                        "run_index": r,
                        "status": "ok",
                        **run_statistics(v),
                        "wall_s": float(v.sum() * 1e-9),
                        "ops_per_sec": float(1e9 / v.mean()),
                        "throughput": None,
                        "steal_ticks": 0,
                        "error": None,
                    }
                )
    return pd.DataFrame(rows), samples
