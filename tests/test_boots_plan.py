"""Boots in the plan: a guest level's runs spread over its boots, boot by boot, still taking
turns with the other levels run by run; --boots and --levels L1,L1 as the request reads them."""

from __future__ import annotations

import random
from itertools import groupby

import numpy as np
import pandas as pd
import pytest

from vmtax.errors import UsageError
from vmtax.experiment.request import DEFAULT_BOOTS, RunRequest, target_specs
from vmtax.plan.plan import Plan, boot_parts, build_plan, interleaved_steps
from vmtax.plan.suite import parse_suite
from vmtax.sampling.adaptive import between_share_of

pytestmark = pytest.mark.fast

SUITE = """
name = "three"
[defaults]
runs = 7
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
[[probes]]
probe = "write"
runs = 2
"""
L0 = {"kind": "level", "level": "L0", "preset": "seed-c", "accel": "tcg"}


def _plan(seed: int, boots: int = 3):
    specs = target_specs(
        levels="L0,L1", preset="seed-c", accel="tcg", ssh=[], fleet=None, boots=boots
    )
    return build_plan(parse_suite(SUITE, "three.toml"), source="s", seed=seed, targets=specs)


def test_each_guest_boot_gets_its_part_of_every_entry_boot_by_boot():
    plan = _plan(seed=11)
    l1 = plan.steps_for(1)
    # Boots come one after another: never back to an earlier boot.
    assert [s.boot for s in l1] == sorted(s.boot for s in l1)
    assert [b for b, _ in groupby(s.boot for s in l1)] == [0, 1, 2]
    for entry, runs in (("cpuid", 7), ("syscall", 7), ("write", 2)):
        got = {b: sorted(s.run for s in l1 if s.entry == entry and s.boot == b) for b in range(3)}
        assert got == {b: list(part) for b, part in enumerate(boot_parts(runs, 3))}, entry
    assert boot_parts(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert boot_parts(2, 3) == [range(0, 1), range(1, 2), range(2, 2)]
    # This machine has one boot, and its runs are spread over the guest's boots.
    assert {s.boot for s in plan.steps_for(0)} == {0}


def test_levels_still_take_turns_run_by_run_inside_each_boot():
    plan = _plan(seed=5)
    # Every entry's run is measured on both levels back to back (in a shuffled order).
    pairs = [plan.steps[i : i + 2] for i in range(0, len(plan.steps), 2)]
    for a, b in pairs:
        assert {a.target, b.target} == {0, 1} and (a.entry, a.run) == (b.entry, b.run)
    firsts = [a.target for a, _ in pairs]
    assert 0 < sum(firsts) < len(firsts)  # which level goes first is drawn, not fixed


def test_the_boot_order_is_seeded_and_stored():
    one, again, other = _plan(seed=3), _plan(seed=3), _plan(seed=4)
    assert one.steps == again.steps and one.steps != other.steps
    assert Plan.from_dict(one.to_dict()).steps == one.steps
    # A plan stored before boots lists [target, entry, run]: one boot everywhere.
    old = one.to_dict() | {"steps": [[t, e, r] for t, e, r, _ in one.to_dict()["steps"]]}
    assert {s.boot for s in Plan.from_dict(old).steps} == {0}


def test_one_boot_everywhere_is_the_plain_rounds_order():
    entries = {"a": {"runs": 5}, "b": {"runs": 3}}
    plain = interleaved_steps(entries, 2, random.Random(9))
    assert plain == interleaved_steps(entries, 2, random.Random(9), [1, 1])
    assert [s.run for s in plain] == sorted(s.run for s in plain)


def test_default_boots_apply_to_guest_levels_only():
    specs = RunRequest(levels="L0,L1").target_specs("L0,L1")
    assert [s.boots for s in specs] == [None, DEFAULT_BOOTS]
    assert DEFAULT_BOOTS == 3
    # Typed until stored, and stored as the same JSON as before.
    assert [s.to_record() for s in RunRequest().target_specs(None)] == [
        {"kind": "local", "level": "L0"}
    ]
    assert [s.to_record() for s in specs] == [
        {"kind": "level", "level": "L0", "preset": "seed-c", "accel": "auto"},
        {"kind": "level", "level": "L1", "preset": "seed-c", "accel": "auto", "boots": 3},
    ]


def test_a_level_named_twice_is_two_configurations_with_sets():
    specs = RunRequest(levels="L1,L1", boots=2).target_specs("L1,L1")
    assert [(s.level, s.set, s.boots) for s in specs] == [("L1", "a", 2), ("L1", "b", 2)]
    plan = build_plan(parse_suite(SUITE, "t"), source="s", seed=1, targets=specs)
    # Each set has boots of its own: both are rebooted in turn, never sharing one.
    assert {(s.target, s.boot) for s in plan.steps} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    with pytest.raises(UsageError, match="names L0 twice"):
        RunRequest(levels="L0,L0").target_specs("L0,L0")


@pytest.mark.parametrize("boots", [0, -1, 1001])
def test_bad_boots_are_refused(boots):
    with pytest.raises(UsageError, match=r"--boots must be in 1\.\.1000"):
        RunRequest(levels="L0,L1", boots=boots).validate()


def test_boots_without_a_guest_level_are_refused():
    with pytest.raises(UsageError, match="--boots applies to guest levels"):
        RunRequest(boots=2).validate()
    RunRequest(depth=1, boots=2).validate()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--boots", "0"), "--boots must be in 1..1000, got 0"),
        (("--boots", "x"), "--boots"),
        (("--levels", "L0,L0"), "names L0 twice"),
    ],
)
def test_cli_refuses_bad_boots_in_one_line(cli, tmp_path, args, needle):
    r = cli("run", "--levels", "L0,L1", *args, "--db", f"sqlite:///{tmp_path / 'b.db'}")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmtax: error: ") and needle in lines[0], lines
    assert not (tmp_path / "b.db").exists()


def test_the_between_share_comes_from_the_run_means_and_their_boots():
    rng = np.random.default_rng(4)
    boots = pd.Series(np.repeat(["b0", "b1", "b2", "b3"], 4))
    offsets = np.repeat([0.0, 0.3, -0.2, 0.25], 4)  # boots far apart, runs 1% apart
    apart = np.exp(5 + offsets + rng.normal(0, 0.01, 16))
    alike = np.exp(5 + rng.normal(0, 0.01, 16))
    assert between_share_of(apart, boots) > 0.9
    assert between_share_of(alike, boots) < 0.5
    assert between_share_of(apart, pd.Series([None] * 16)) is None  # one boot: undefined
