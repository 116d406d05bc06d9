"""Synthetic experiments written into a store through the real Store API, with boots and
environment fingerprints chosen by the caller: for the tests of what reads a store (compare's
gate, the OpenMetrics export, the history). The numbers are made up (no probe ran);
everything downstream of the agent is the real code."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vmtax.testing.runs import Config, run_statistics
from vmtax.version import __version__

if TYPE_CHECKING:
    from vmtax.store import Store

Fingerprint = Mapping[str, Any] | Callable[[Config], Mapping[str, Any]]


def fingerprint(
    *,
    kernel: str = "6.1.0-26-amd64",
    qemu: str | None = None,
    microcode: str | None = None,
    hypervisor: str | None = None,
    cpu: str = "Synthetic CPU",
) -> dict[str, Any]:
    """An environment fingerprint in the agent's shape, with the fields that change between
    experiments (kernel, QEMU, CPU microcode, hypervisor) chosen by the caller."""
    fp: dict[str, Any] = {
        "arch": "x86_64",
        "kernel": kernel,
        "cpu": {"model": cpu, "vendor": "GenuineIntel", "logical_cpus": 2},
        "hypervisor": {
            "detected": hypervisor is not None,
            "vendor": hypervisor,
            "signature": None,
            "evidence": [],
        },
    }
    if microcode is not None:
        fp["cpu"]["microcode"] = microcode
    if qemu is not None:
        fp["qemu"] = {"version": qemu}
    return fp


def store_experiment(
    store: Store,
    configs: Sequence[Config],
    *,
    probes: Sequence[str] = ("syscall",),
    runs: int = 6,
    boots: int = 1,
    iterations: int = 200,
    base: float = 100.0,
    sigma: float = 0.05,
    run_sigma: float = 0.01,
    boot_sigma: float = 0.0,
    seed: int = 0,
    fingerprint: Fingerprint | None = None,
    suite: str = "synthetic",
) -> int:
    """One finished experiment: ``runs`` runs of each probe in each of ``boots`` boots of
    every guest configuration (L0 has one boot, the machine's), each run's iterations
    lognormal around ``base × factor`` times a boot effect (``boot_sigma``) and a run effect
    (``run_sigma``). Returns the experiment's id."""
    rng = np.random.default_rng(seed)
    exp = store.create_experiment(
        command=["synthetic"],
        suite=suite,
        seed=seed,
        plan={},
        vmtax_version=__version__,
        agent_version=None,
    )
    for cfg in configs:
        fp = fingerprint(cfg) if callable(fingerprint) else dict(fingerprint or {})
        cfg_id = store.configuration(
            experiment_id=exp,
            level=cfg.level,
            labels=cfg.labels,
            fingerprint=dict(fp),
            target="synthetic",
            provenance={},
        )
        for plan_index, probe in enumerate(probes):
            for boot in range(boots if cfg.level != "L0" else 1):
                boot_effect = rng.lognormal(0.0, boot_sigma) if boot_sigma else 1.0
                boot_id = f"e{exp}-{cfg.key}-b{boot}"[:64]
                for r in range(runs):
                    level = base * cfg.factor * boot_effect * rng.lognormal(0.0, run_sigma)
                    values = level * rng.lognormal(0.0, sigma, iterations)
                    wall = float(values.sum()) / 1e9
                    store.add_run(
                        experiment_id=exp,
                        configuration_id=cfg_id,
                        probe=probe,
                        plan_index=plan_index,
                        run_index=boot * runs + r,
                        header={"unit": "ns", "better": "lower", "boot_id": boot_id},
                        summary={
                            **run_statistics(values),
                            "wall_s": wall,
                            "ops_per_sec": values.size / wall,
                        },
                        values=values,
                        warmup_values=np.empty(0),
                        status="ok",
                    )
    store.finish_experiment(exp, "ok")
    return exp
