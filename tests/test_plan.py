"""Suites and plans: validation messages, the seeded interleaved order, memory scaling."""

from __future__ import annotations

from collections import Counter

import pytest

from vmtax.errors import UsageError
from vmtax.plan.plan import Plan, build_plan, kill_after
from vmtax.plan.suite import builtin_names, load_suite, parse_suite

pytestmark = pytest.mark.fast

LOCAL = [{"kind": "local", "level": "L0"}]

SMALL = """
name = "small"
[defaults]
runs = 4
iterations = 500
duration = 0.25
warmup = 3
timeout = 20
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
runs = 2
[[probes]]
probe = "memory"
name = "memory.read"
params = { oper = "read" }
[[probes.scale_to_memory]]
param = "block_kb"
fraction = 0.25
unit = "KiB"
power_of_two = true
maximum = 1048576
[[probes.scale_to_memory]]
param = "iterations"
unit = "KiB"
per_param = "block_kb"
"""


def test_builtin_suites_are_valid_and_shipped():
    names = builtin_names()
    assert {"quick", "sysbench2014", "dvh-micro", "artifacts", "full"} <= set(names)
    for name in names:
        suite, source = load_suite(name)
        assert source == f"builtin:{name}"
        assert suite.probes


def test_artifacts_suite_has_at_least_20_runs_of_each_null_test():
    suite, _ = load_suite("artifacts")
    for entry in suite.probes:
        assert suite.resolved(entry).runs >= 20
        assert suite.resolved(entry).iterations >= 10_000


def test_entry_settings_fall_back_to_defaults():
    suite = parse_suite(SMALL, "small.toml")
    syscall = next(e for e in suite.probes if e.probe == "syscall")
    s = suite.resolved(syscall)
    assert (s.runs, s.iterations, s.duration, s.warmup) == (2, 500, 0.25, 3)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name = 'x'\n[[probes]]\nprobe = 'cpuid'\nruns = 0\n", "probes[0].runs:"),
        ("name = 'x'\n[[probes]]\nprobe = 'cpuid'\nrunz = 3\n", "probes[0].runz: unknown key"),
        (
            "name = 'x'\n[defaults]\nduration = -1\n[[probes]]\nprobe = 'cpuid'\n",
            "defaults.duration:",
        ),
        ("name = 'x'\n[[probes]]\nprobe = 'cpuid'\nruns = 'many'\n", "probes[0].runs:"),
        ("name = 'x'\n", "probes: required key is missing"),
        (
            "name = 'x'\n[[probes]]\nprobe = 'cpuid'\n[[probes]]\nprobe = 'cpuid'\n",
            "two entries are called 'cpuid'",
        ),
        (
            "name = 'x'\n[[probes]]\nprobe = 'memory'\n[[probes.scale_to_memory]]\n"
            "param = 't'\nunit = 'PB'\n",
            "probes[0].scale_to_memory[0]: unit must be one of",
        ),
        (
            "name = 'x'\n[[probes]]\nprobe = 'memory'\n[[probes.scale_to_memory]]\n"
            "param = 'iterations'\nper_param = 'block'\n",
            "per_param 'block' is not set",
        ),
        ("name = 'x'\n[[probes]\nprobe = 'cpuid'\n", "invalid TOML"),
    ],
)
def test_bad_suites_give_one_line_naming_file_and_key(text, needle):
    with pytest.raises(UsageError) as info:
        parse_suite(text, "my.toml")
    msg = info.value.message
    assert msg.startswith("suite my.toml: ")
    assert needle in msg
    assert "\n" not in msg
    assert info.value.exit_code == 2


def test_unknown_suite_name_lists_the_builtin_ones():
    with pytest.raises(UsageError, match="unknown suite 'nope'; built-in suites: .*quick"):
        load_suite("nope")


def test_missing_suite_file(tmp_path):
    with pytest.raises(UsageError, match="suite file not found"):
        load_suite(str(tmp_path / "absent.toml"))


def test_plan_interleaves_runs_in_rounds_and_records_the_seed():
    suite = parse_suite(SMALL, "small.toml")
    plan = build_plan(suite, source="small.toml", seed=7, targets=LOCAL)
    counts = Counter(s.entry for s in plan.steps)
    assert counts == {"cpuid": 4, "syscall": 2, "memory.read": 4}
    # Round r holds run r of every entry that has one: no probe's runs are bunched together.
    runs_seen = [s.run for s in plan.steps]
    assert runs_seen == sorted(runs_seen)
    assert [s.index for s in plan.steps] == list(range(len(plan.steps)))
    data = plan.to_dict()
    assert data["seed"] == 7
    assert Plan.from_dict(data).steps == plan.steps


def test_same_seed_same_order_other_seed_other_order():
    suite = parse_suite(SMALL, "small.toml")
    order = [
        [s.entry for s in build_plan(suite, source="s", seed=seed, targets=LOCAL).steps]
        for seed in (1, 1, 2, 3, 4)
    ]
    assert order[0] == order[1]
    assert any(o != order[0] for o in order[2:])


def test_each_target_gets_the_whole_plan():
    suite = parse_suite(SMALL, "small.toml")
    two = [*LOCAL, {"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg"}]
    plan = build_plan(suite, source="s", seed=1, targets=two)
    assert len(plan.steps_for(0)) == len(plan.steps_for(1)) == 10
    assert {s.index for s in plan.steps_for(0)}.isdisjoint({s.index for s in plan.steps_for(1)})


def test_cli_overrides_runs_timeout_and_probe_selection():
    suite = parse_suite(SMALL, "small.toml")
    plan = build_plan(
        suite, source="s", seed=1, targets=LOCAL, probes=["memory", "timer"], runs=2, timeout=5
    )
    assert set(plan.entries) == {"memory.read", "timer"}
    assert all(e["runs"] == 2 and e["timeout"] == 5 for e in plan.entries.values())
    assert len(plan.steps) == 4


def test_invocation_bounds_each_run_by_iterations_duration_and_timeout():
    suite = parse_suite(SMALL, "small.toml")
    plan = build_plan(suite, source="s", seed=1, targets=LOCAL, probes=["cpuid"])
    inv = plan.invocation(plan.steps[0], memory_bytes=None)
    assert inv.args == [
        "run",
        "cpuid",
        "--runs",
        "1",
        "--iterations",
        "500",
        "--duration",
        "0.25",
        "--warmup",
        "3",
        "--timeout",
        "20",
    ]
    # Given the target's TSC rate, a run reuses it and the target's nesting estimate.
    given = plan.invocation(plan.steps[0], memory_bytes=None, tsc_hz=2.3e9)
    assert given.args == [*inv.args, "--tsc-hz", "2300000000.0", "--brief-env"]
    # The controller only kills an agent that overran its own --timeout.
    assert inv.timeout == kill_after(20) > 20


def test_memory_test_is_sized_to_the_target_and_the_scaling_recorded():
    suite = parse_suite(SMALL, "small.toml")
    plan = build_plan(suite, source="s", seed=1, targets=LOCAL, probes=["memory.read"])
    small = plan.invocation(plan.steps[0], memory_bytes=2 << 30)
    # A quarter of 2 GiB is 512 MiB; the total (block x iterations) is all of the RAM.
    assert small.args[small.args.index("--iterations") + 1] == "4"
    assert small.args[-4:] == ["--param", "oper=read", "--param", "block_kb=524288"]
    assert small.scaling["memory_bytes"] == 2 << 30
    assert small.scaling["values"] == {"block_kb": 524288, "iterations": 4}
    big = plan.invocation(plan.steps[0], memory_bytes=24 << 30)
    assert big.args[-1] == "block_kb=1048576"  # capped by `maximum`
    assert big.args[big.args.index("--iterations") + 1] == "24"
    odd = plan.invocation(plan.steps[0], memory_bytes=3 << 30)
    assert odd.args[-1] == "block_kb=524288"  # 768 MiB rounded down to a power of two
