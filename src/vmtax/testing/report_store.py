"""Synthetic results with known timing artifacts, written through the real Store API.

For demonstrations, the report's tests and its benchmark: the numbers are made up (no probe
ran), but everything downstream of the agent (store, statistics, report) is the real code.
Each level multiplies the cost; every ``period``-th iteration is twice as slow (study D's
"horizontal lines"), and one run carries a 4x burst.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vmtax.testing.runs import run_statistics
from vmtax.version import __version__

if TYPE_CHECKING:
    from vmtax.store import Store

BASE_COST = {"cpuid": 100.0, "syscall": 300.0, "timer": 1_000.0, "pagefault": 2_000.0}
LEVEL_FACTOR = {"L0": 1.0, "L1": 30.0, "L2": 400.0, "L3": 4_000.0}


def _fingerprint(level: str, hostname: str) -> dict[str, Any]:
    virtual = level != "L0"
    return {
        "agent_version": "0.1.0",
        "arch": "x86_64",
        "hostname": hostname if not virtual else f"{hostname}-{level.lower()}",
        "hypervisor": {
            "detected": virtual,
            "vendor": "KVM" if virtual else None,
            "signature": "KVMKVMKVM" if virtual else None,
            "evidence": ["cpuid 0x40000000"] if virtual else [],
        },
        "nesting": {
            "depth": int(level[1:]),
            "basis": "synthetic",
            "confidence": "high",
            "cpuid_cycles": None,
        },
        "cpu": {
            "model": "Synthetic CPU",
            "vendor": "GenuineIntel",
            "logical_cpus": 2,
            "tsc_hz": 2.1e9,
            "tsc_invariant": True,
            "virt_flags": ["hypervisor"] if virtual else ["vmx"],
        },
        "memory_bytes": 2**33 if virtual else 2**34,
        "kernel": "6.1.0-26-amd64",
        "clocksource": "kvm-clock" if virtual else "tsc",
        "thp": "madvise",
        "steal_ticks": 0,
    }


def _summary(values: np.ndarray) -> dict[str, Any]:
    wall = float(values.sum()) / 1e9
    return {
        **run_statistics(values),
        "wall_s": wall,
        "ops_per_sec": values.size / wall,
        "throughput": values.size / wall,
        "throughput_unit": "ops/s",
        "cpus": [0],
        "stopped_by": "iterations",
    }


def populate(
    store: Store,
    *,
    levels: Sequence[str] = ("L0", "L1", "L2"),  # noqa: ANN401
    probes: Sequence[str] = ("cpuid", "syscall"),
    runs: int = 10,
    iterations: int = 2_000,
    period: int = 97,
    seed: int = 1,
    labels: dict[str, str] | None = None,
    hostname: str = "host-a",
) -> int:
    """Write one experiment of synthetic runs into ``store``; returns its id."""
    rng = np.random.default_rng(seed)
    exp = store.create_experiment(
        command=["vmtax", "run", "--levels", ",".join(levels), "--probes", ",".join(probes)],
        suite="synthetic",
        seed=seed,
        plan={
            "probes": list(probes),
            "levels": list(levels),
            "runs": runs,
            "iterations": iterations,
        },
        vmtax_version=__version__,
        agent_version="0.1.0",
    )
    for i, level in enumerate(levels):
        cfg_labels = {"vcpus": "2", **({"accel": "tcg"} if level != "L0" else {}), **(labels or {})}
        cfg = store.configuration(
            experiment_id=exp,
            level=level,
            labels=cfg_labels,
            fingerprint=_fingerprint(level, hostname),
            target="local" if level == "L0" else f"qemu:{level}",
            provenance={"command": ["vmtax-probe", "run", "--runs", str(runs)]}
            if level == "L0"
            else {"qemu": ["qemu-system-x86_64", "-accel", "tcg", "-smp", "2", "-m", "2048"]},
        )
        for plan_index, probe in enumerate(probes):
            header = {
                "unit": "ns",
                "better": "lower",
                "throughput_unit": "ops/s",
                "probe": probe,
                "env": _fingerprint(level, hostname),
            }
            for run in range(runs):
                cost = BASE_COST.get(probe, 500.0) * LEVEL_FACTOR.get(level, 1.0)
                values = cost * rng.lognormal(0.0, 0.08 + 0.04 * i, iterations)
                values[::period] *= 2.0
                if run == runs // 3:
                    burst = iterations // 4
                    values[burst : burst + max(1, iterations // 100)] *= 4.0
                store.add_run(
                    experiment_id=exp,
                    configuration_id=cfg,
                    probe=probe,
                    plan_index=plan_index,
                    run_index=run,
                    header=header,
                    summary=_summary(values),
                    values=values,
                    warmup_values=values[:5] * 1.5,
                    status="ok",
                )
    store.finish_experiment(exp, "ok")
    return exp
