"""The runner with several targets at once, and the study-A description it feeds."""

from __future__ import annotations

import shlex

import numpy as np
import pandas as pd
import pytest

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import parse_suite
from vmtax.runner import Runner, detected_labels, fingerprint
from vmtax.stats.describe import describe
from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget

pytestmark = pytest.mark.fast

SUITE = """
name = "two"
[defaults]
runs = 2
iterations = 1000
duration = 0.05
warmup = 5
timeout = 30
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
"""


class Recorder:
    def __init__(self):
        self.totals, self.done = {}, []

    def add_target(self, name, total):
        self.totals[name] = total

    def advance(self, name, description):
        self.done.append(name)

    def finish(self, name, description, *, failed):
        self.final = getattr(self, "final", {}) | {name: (description, failed)}


def test_a_failed_target_is_reported_and_the_others_finish(store, tmp_path):
    agent = find_agent()
    specs = [{"kind": "local", "level": "L0"}, {"kind": "local", "level": "L0"}]
    plan = build_plan(parse_suite(SUITE, "two.toml"), source="two.toml", seed=3, targets=specs)
    good = LocalTarget(agent, name="good")
    bad = LocalTarget(tmp_path / "no-such-agent", name="bad")
    exp = store.create_experiment(
        command=["vmtax"],
        suite="two",
        seed=3,
        plan=plan.to_dict(),
        vmtax_version="test",
        agent_version=None,
    )
    progress = Recorder()
    outcome = Runner(store, plan, [good, bad], progress=progress, max_workers=2).execute(exp)

    by_name = {t.name: t for t in outcome.targets}
    assert by_name["good"].ok == 4 and by_name["good"].error is None
    assert "agent binary not found" in by_name["bad"].error
    assert outcome.status == "failed"
    assert "target bad failed" in outcome.summary_error()
    assert progress.totals == {"good": 4, "bad": 4}
    assert progress.done.count("good") == 4
    # Each host's last row says how it ended; the failed one says why.
    assert progress.final["good"] == ("good: done, 4 ok", False)
    text, failed = progress.final["bad"]
    assert failed and text.startswith("bad: FAILED after 0 runs: ") and "agent binary" in text
    runs = store.runs([f"exp={exp}"])
    assert len(runs) == 4 and set(runs["status"]) == {"ok"}
    assert store.experiment(exp)["status"] == "failed"
    # Only the good target's steps are complete: a resume would redo exactly the bad one's.
    assert store.completed_plan_indices(exp) == {s.index for s in plan.steps_for(0)}


def test_the_local_fingerprint_labels_what_lies_under_l0():
    fp = fingerprint(LocalTarget(find_agent()))
    labels = detected_labels(fp)
    assert labels["host_hypervisor"] == (
        (fp.hypervisor.vendor or "").lower().split()[0] if fp.hypervisor.detected else "none"
    )
    # The nesting depth timed from CPUIDs varies from run to run: never a label.
    assert fp.nesting.cpuid_cycles is not None and "host_nesting" not in labels
    reported = fp.model_copy(
        update={"nesting": fp.nesting.model_copy(update={"depth": 2, "cpuid_cycles": None})}
    )
    assert detected_labels(reported)["host_nesting"] == "2"  # as /proc/sysinfo reports it


def test_describe_uses_runs_as_the_unit():
    runs = pd.DataFrame(
        {
            "config": ["L0", "L0", "L0", "L1", "L0"],
            "level": ["L0", "L0", "L0", "L1", "L0"],
            "probe": ["cpu", "cpu", "cpu", "cpu", "cpu"],
            "unit": ["ns"] * 5,
            "throughput_unit": ["events/s"] * 5,
            "status": ["ok", "ok", "ok", "ok", "lost"],
            "mean": [10.0, 12.0, 14.0, 30.0, np.nan],
            "throughput": [100.0, 90.0, 80.0, 40.0, np.nan],
            "p95": [11.0, 13.0, 15.0, 31.0, np.nan],
        }
    )
    d = describe(runs).set_index("config")
    l0 = d.loc["L0"]
    assert l0["n_runs"] == 3  # the lost run does not count
    assert l0["resp_mean"] == pytest.approx(12.0)
    assert l0["resp_stderr"] == pytest.approx(2.0 / np.sqrt(3))  # sd 2 over 3 runs
    assert l0["resp_stderr_pct"] == pytest.approx(100 * (2.0 / np.sqrt(3)) / 12.0)
    assert l0["throughput_mean"] == pytest.approx(90.0)
    assert l0["p95"] == pytest.approx(13.0)
    assert np.isnan(d.loc["L1"]["resp_stderr"])  # one run has no standard error
    assert list(describe(runs)["config"]) == ["L0", "L1"]


@pytest.mark.parametrize(
    "name",
    ["quick", "sysbench2014", "dvh-micro", "artifacts", "full", "apps-quick", "explain-vcpus"],
)
def test_builtin_suites_match_the_agent(name):
    # Every probe and parameter a shipped suite names must exist in the agent it ships with.
    from vmtax.plan.suite import load_suite
    from vmtax.runner import check_probes, list_probes

    suite, source = load_suite(name)
    plan = build_plan(suite, source=source, seed=0, targets=[{"kind": "local"}])
    check_probes(plan, list_probes(LocalTarget(find_agent())))


def test_check_probes_rejects_a_bad_choice():
    from vmtax.errors import UsageError
    from vmtax.runner import check_probes, list_probes

    bad = parse_suite(
        "name = 'x'\n[[probes]]\nprobe = 'memory'\nparams = { oper = 'copy' }\n", "x.toml"
    )
    plan = build_plan(bad, source="x.toml", seed=0, targets=[{"kind": "local"}])
    with pytest.raises(UsageError, match="oper='copy' must be one of read, write"):
        check_probes(plan, list_probes(LocalTarget(find_agent())))


def test_a_run_is_killed_only_after_its_timeout_and_the_agents_start_up(store, tmp_path):
    # An agent that takes 3.5 s to start, as one does in a guest under TCG inside TCG (18 s
    # there), with runs of timeout 1: the controller used to kill each run at 1 + 2 s, before
    # its agent had even started. The start-up the env request took is now added.
    slow = tmp_path / "slow-agent"
    slow.write_text(f'#!/bin/sh\nsleep 3.5\nexec {shlex.quote(str(find_agent()))} "$@"\n')
    slow.chmod(0o755)
    suite = SUITE.replace("timeout = 30", "timeout = 1").replace("runs = 2", "runs = 1")
    specs = [{"kind": "local", "level": "L0"}]
    plan = build_plan(parse_suite(suite, "two.toml"), source="two.toml", seed=3, targets=specs)
    assert all(plan.invocation(s, None).timeout == 3.0 for s in plan.steps)  # 1 s + 2 s
    exp = store.create_experiment(command=["vmtax"], suite="two", seed=3, plan=plan.to_dict(),
                                  vmtax_version="test", agent_version=None)  # fmt: skip
    outcome = Runner(store, plan, [LocalTarget(slow, name="slow")], progress=Recorder()).execute(
        exp
    )
    (done,) = outcome.targets
    assert (done.ok, done.lost, done.failed, done.error) == (2, 0, 0, None), done.first_problem
    assert set(store.runs([f"exp={exp}"])["status"]) == {"ok"}
