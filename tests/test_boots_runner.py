"""The runner boots a target anew where the plan's boot changes, a resume starts a new boot
for what remains, and adaptive sampling adds a boot when boots differ more than runs do.

The agent is real and runs on this machine; a stand-in guest whose "boot" is a counter puts
its boot id into each header, as a guest's kernel would."""

from __future__ import annotations

import itertools
import json
import threading

import numpy as np
import pandas as pd
import pytest

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import parse_suite
from vmtax.runner import Runner
from vmtax.sampling.adaptive import AdaptiveSampler
from vmtax.targets.base import find_agent
from vmtax.targets.levels import OneAtATime
from vmtax.targets.local import LocalTarget

pytestmark = pytest.mark.fast

SUITE = """
name = "boots"
[defaults]
runs = 3
iterations = 200
duration = 0.02
warmup = 2
timeout = 30
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
"""
_IDS = itertools.count()


class Rebooting(LocalTarget):
    """This machine standing in for a guest: each boot (the first prepare, each reboot) has a
    new id, which the agent's header then carries."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.boot: str | None = None
        self.reboots = 0

    def prepare(self) -> None:
        super().prepare()
        if self.boot is None:
            self.boot = f"boot-{next(_IDS)}"

    def labels(self) -> dict[str, str]:
        return {"stand_in": "guest"}  # a configuration of its own, as a guest level has

    def reboot(self) -> None:
        self.reboots += 1
        self.boot = None
        self.prepare()

    def run_agent(self, args, timeout):
        for line in super().run_agent(args, timeout):
            if line.startswith('{"type":"header"'):
                line = json.dumps(json.loads(line) | {"boot_id": self.boot})
            yield line


def _execute(store, plan, done=frozenset()):
    agent = find_agent()
    lock = threading.Lock()
    guest = Rebooting(agent, name="guest")
    targets = [OneAtATime(LocalTarget(agent, name="host"), lock), OneAtATime(guest, lock)]
    exp = store.create_experiment(
        command=["vmtax"], suite="boots", seed=plan.seed, plan=plan.to_dict(),
        vmtax_version="test", agent_version=None,
    )  # fmt: skip
    assert Runner(store, plan, targets, max_workers=2).execute(exp, set(done)).status == "ok"
    runs = store.runs([f"exp={exp}"])
    boot_of_step = {s.index: s.boot for s in plan.steps}
    runs["planned_boot"] = runs["plan_index"].map(boot_of_step)
    return guest, runs[runs["target"] == "guest"], runs[runs["target"] == "host"]


def _plan(boots: int):
    # The second target stands in for a guest level: only a level's spec has boots.
    guest = {"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": boots}
    specs = [{"kind": "local", "level": "L0"}, guest]
    return build_plan(parse_suite(SUITE, "b.toml"), source="b.toml", seed=7, targets=specs)


def test_each_planned_boot_is_a_boot_of_its_own(store):
    guest, mine, host = _execute(store, _plan(3))
    assert guest.reboots == 2 and len(mine) == 6
    # One boot id per planned boot, and no boot id shared by two planned boots.
    pairs = set(zip(mine["planned_boot"], mine["boot"], strict=True))
    assert len(pairs) == 3 == mine["boot"].nunique()
    assert host["boot"].nunique() == 1


def test_a_resume_starts_a_new_boot_for_what_remains(store):
    plan = _plan(3)
    steps = plan.steps_for(1)
    # Interrupted in the middle of the guest's second boot: its first run there is stored.
    cut = next(i for i, s in enumerate(steps) if s.boot == 1) + 1
    done = {s.index for s in plan.steps if s.index <= steps[cut - 1].index}
    guest, mine, _ = _execute(store, plan, done)
    assert len(mine) == len(steps) - cut
    # What remained of boot 1 runs in the resumed controller's first boot, boot 2 in another.
    assert guest.reboots == 1
    assert mine.groupby("planned_boot")["boot"].nunique().to_dict() == {1: 1, 2: 1}
    assert mine["boot"].nunique() == 2


ADAPTIVE = """
name = "adaptive-boots"
precision = "0.1%"
budget = "1h"
min_runs = 6
[defaults]
timeout = 30
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
"""


def _next_boot(store, boot_offsets) -> tuple[int, int]:
    """(last planned boot, boot of the first step the look adds) when the stored run means of
    each planned boot b are exp(5 + boot_offsets[b] + run noise of 1%)."""
    specs = [{"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": 3}]
    plan = build_plan(parse_suite(ADAPTIVE, "a.toml"), source="a", seed=2, targets=specs)
    exp = store.create_experiment(
        command=["vmtax"], suite="a", seed=2, plan=plan.to_dict(),
        vmtax_version="test", agent_version=None,
    )  # fmt: skip
    sampler = AdaptiveSampler(store, plan, exp, sample_noise=lambda target: {})
    rng = np.random.default_rng(1)
    planned = plan.steps_for(0)
    runs = pd.DataFrame(
        {
            "probe": [s.entry for s in planned],
            "status": "ok",
            "mean": [np.exp(5 + boot_offsets[s.boot] + rng.normal(0, 0.01)) for s in planned],
            "plan_index": [s.index for s in planned],
            "boot_id": [f"boot-{s.boot}" for s in planned],
            "wall_s": 0.5,  # a run's cost, against a boot's 60 s
        }
    )

    # The first look after the planned boots (the sampler also tops each planned boot up
    # before leaving it; the stored runs here stay as they are): its first runs' boot.
    last = max(s.index for s in planned)
    decisions = sampler._decide(runs, by_boot=True, last_index=last)
    more = {n: d for n, d in decisions.items() if d["status"] == "more"}
    top = max(s.boot for s in planned)
    return top, sampler._boot_segments(more, top)[0][0]


def test_adaptive_sampling_adds_a_boot_when_boots_differ_more_than_runs(store):
    assert _next_boot(store, [0.0, 0.3, -0.2]) == (2, 3)
    # Boots alike: the look's runs stay in the current boot.
    assert _next_boot(store, [0.0, 0.0, 0.0]) == (2, 2)
