"""Which boot cost plans a guest's boots: the run's --boot-cost when given, else the guest's
own measured boots as they come, else the plan's (docs/statistics.md)."""

from __future__ import annotations

import threading

import pytest

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import parse_suite
from vmtax.sampling.adaptive import AdaptiveSampler
from vmtax.stats.compare_options import BOOT_COST_S
from vmtax.targets.levels import OneAtATime
from vmtax.targets.local import LocalTarget

pytestmark = pytest.mark.fast

SUITE = """
name = "boot-cost"
precision = "3%"
[[probes]]
probe = "cpuid"
"""


def _sampler(store, **sampling) -> AdaptiveSampler:
    specs = [{"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": 3}]
    plan = build_plan(parse_suite(SUITE, "s.toml"), source="s", seed=1, targets=specs)
    assert plan.sampling is not None
    plan.sampling.update(sampling)
    exp = store.create_experiment(
        command=["vmtax"], suite="s", seed=1, plan=plan.to_dict(),
        vmtax_version="test", agent_version=None,
    )  # fmt: skip
    return AdaptiveSampler(store, plan, exp, sample_noise=lambda target: {})


class Guest(LocalTarget):
    """Stands in for a QemuTarget, which cannot boot in a fast test: only its
    ``boot_seconds`` (the last boot's, power-on to the agent's ready line) is read."""

    boot_seconds: float | None = None


def test_the_guests_measured_boots_replace_the_default_as_they_come(store):
    sampler = _sampler(store, boot_cost_s=BOOT_COST_S, boot_cost_given=False)
    guest = Guest()
    assert sampler._boot_cost(0, guest) == (BOOT_COST_S, "default")
    guest.boot_seconds = 11.0
    assert sampler._boot_cost(0, guest) == (11.0, "measured over 1 boot")
    assert sampler._boot_cost(0, guest) == (11.0, "measured over 1 boot")  # the same boot
    guest.boot_seconds = 14.0
    assert sampler._boot_cost(0, guest) == (12.5, "measured over 2 boots")
    guest.boot_seconds = 30.0
    assert sampler._boot_cost(0, guest) == (14.0, "measured over 3 boots")  # the median
    # Through the wrapper that makes levels take turns, and per guest.
    other = OneAtATime(Guest(), threading.Lock())
    other.target.boot_seconds = 7.5  # type: ignore[attr-defined]
    assert sampler._boot_cost(1, other) == (7.5, "measured over 1 boot")


def test_a_given_boot_cost_is_used_as_given(store):
    sampler = _sampler(store, boot_cost_s=300.0, boot_cost_given=True)
    guest = Guest()
    guest.boot_seconds = 11.0
    assert sampler._boot_cost(0, guest) == (300.0, "--boot-cost")
