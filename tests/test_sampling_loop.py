"""Adaptive sampling end to end with the real agent on this machine: runs are added until the
target is met or the budget is spent, looks and noise are stored, the run length chosen is
recorded, imprecise probes are named (and compare shows no verdict for them), and a resumed
experiment keeps every committed run and only adds new ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import select

from vmtax.plan.plan import Plan, build_plan
from vmtax.plan.suite import parse_suite
from vmtax.report.analysis import _comparison as report_comparison
from vmtax.report.gather import load as load_report_input
from vmtax.runner import Runner
from vmtax.sampling import design, noise, outcome
from vmtax.sampling.adaptive import AdaptiveSampler
from vmtax.stats.compare_options import CompareOptions
from vmtax.store import Store
from vmtax.store.models import SamplingLook
from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget

pytestmark = pytest.mark.slow

SUITE = """
name = "adaptive"
precision = "{precision}"
budget = "{budget}"
min_runs = 3
[defaults]
iterations = 2000
duration = 0.02
warmup = 10
timeout = 30
[[probes]]
probe = "syscall"
[[probes]]
probe = "cpu"
iterations = 20
params = {{ max_prime = 200 }}
"""


@pytest.fixture(scope="module")
def agent() -> str:
    return str(find_agent())


@pytest.fixture
def cli_agent(agent: str) -> str:
    return agent


def _suite(tmp_path: Path, precision: str, budget: str) -> str:
    path = tmp_path / "adaptive.toml"
    path.write_text(SUITE.format(precision=precision, budget=budget))
    return str(path)


def _exp(stdout: str) -> int:
    m = re.search(r"^experiment (\d+)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1))


def test_loose_target_stops_at_the_floor_with_looks_noise_and_run_length(tmp_path, cli):
    db = f"sqlite:///{tmp_path / 'a.db'}"
    run = cli("run", "--suite", _suite(tmp_path, "60%", "20s"), "--db", db, "--seed", "3")
    assert run.returncode == 0, run.stderr
    exp = _exp(run.stdout)
    assert re.search(r"^precision L0.*: \d of 2 probes within ±60%", run.stdout, re.M), run.stdout
    with Store.open(db) as store:
        runs = store.runs([f"exp={exp}"])
        counts = runs[runs["status"] == "ok"].groupby("probe").size().to_dict()
        # 3 planned runs, then straight to the floor: no probe stops before it.
        assert set(counts) == {"cpu", "syscall"}
        assert all(n >= design.STOP_FLOOR for n in counts.values())
        assert runs["plan_index"].is_unique
        found = outcome.outcomes(store, [exp]).set_index("probe")
        assert found["n_runs"].to_dict() == counts  # judged on every run it had
        for probe, row in found.iterrows():
            # Precise means within the target; otherwise only the budget (a loaded machine)
            # may have stopped it, and the run says so.
            if row["status"] == "precise":
                assert row["reason"] == "target" and row["half_width"] <= 0.6
            else:
                assert row["reason"] == "budget" and row["half_width"] > 0.6
                assert f"imprecise: {probe} at L0" in run.stdout
        plan = store.experiment(exp)["plan"]
        chosen = plan["sampling"]["run_length"]
        assert set(chosen) == {"syscall", "cpu"}
        assert all(
            0.02 <= c["duration_s"] <= 0.02 and "overhead" in c["why"] for c in chosen.values()
        )
        with store.engine.connect() as c:
            looks = c.execute(select(SamplingLook.__table__)).mappings().all()
    assert [look["look"] for look in looks] == list(range(len(looks))) and len(looks) >= 2
    assert looks[0]["decisions"]["cpu"]["n"] == 3  # the planned rounds, then the floor
    assert looks[1]["decisions"]["cpu"]["n"] == design.STOP_FLOOR
    for look in looks:
        for sample in (look["noise_before"], look["noise_after"]):
            assert sample["type"] == "noise", sample
            assert sample["ticks_per_add"] > 0 and sample["procs_running"] >= 0
            assert 0 <= sample["other_cpu_pct"] <= 100


def test_unreachable_target_ends_with_the_budget_named_imprecise_without_verdict(tmp_path, cli):
    db = f"sqlite:///{tmp_path / 'b.db'}"
    # 0.01% cannot be reached by syscall runs here; 60% by cpu at the floor can.
    suite = _suite(tmp_path, "0.01%", "4s")
    run = cli("run", "--suite", suite, "--db", db, "--seed", "4")
    assert run.returncode == 0, run.stderr
    exp = _exp(run.stdout)
    missed = [line for line in run.stdout.splitlines() if line.startswith("imprecise:")]
    assert missed and all("the time budget ran out" in line for line in missed), run.stdout
    assert any(
        re.search(
            r"imprecise: syscall at L0.*: ±[\d.]+% after \d+ runs, target ±0.01%, "
            r"about \d+ runs needed",
            m,
        )
        for m in missed
    )
    with Store.open(db) as store:
        found = outcome.outcomes(store, [exp])
        assert set(found["status"]) == {"imprecise"} and set(found["reason"]) == {"budget"}
        plan = store.experiment(exp)["plan"]
    assert plan["sampling"]["budget_s"] == 4.0 and plan["sampling"]["precision"] == 0.0001

    # A second experiment (fixed design: --runs turns adaptive sampling off), then compare
    # the two: the imprecise baseline gives `imprecise` where the verdict would be `~`, never
    # `~`. The same machine twice has little to find, but a loaded machine drifts between
    # experiments by more than the default 2% band; a 50% band leaves `~` the verdict to
    # replace. A probe's clear slower / faster stands (tests/test_compare.py holds that rule),
    # and so may the geomean's, which is an interval against the band, not a test.
    run2 = cli("run", "--suite", suite, "--runs", "3", "--db", db, "--seed", "5",
               "--label", "side=b")  # fmt: skip
    assert run2.returncode == 0, run2.stderr
    cmp = cli("compare", "--db", db, "--baseline", f"exp={exp}", "--noise", "0.5",
              "--format", "json")  # fmt: skip
    assert cmp.returncode == 0, cmp.stderr
    rows = [r for r in json.loads(cmp.stdout)["rows"] if not r["is_baseline"]]
    probes = [r for r in rows if r["probe"] in ("syscall", "cpu")]
    assert {r["probe"] for r in probes} == {"syscall", "cpu"}
    assert all(any(w.startswith("imprecise:") for w in r["warnings"]) for r in probes), probes
    assert {r["verdict"] for r in probes} <= {"imprecise", "slower", "faster"}, probes
    # The report's comparison is compare's: the same verdict on every row, geomean included.
    with Store.open(db) as store:
        data = load_report_input(store, [], f"exp={exp}")
    assert {p for _, p in data.imprecise} == {"syscall", "cpu"}
    options = CompareOptions(noise=0.5, resamples=10_000, seed=0)  # compare's own defaults
    _, table, _ = report_comparison(data, data.runs, options)
    # (the report adds throughput rows for its ΔL(n−1) column alone)
    tested = table[(table["metric"] == "mean") & ~table["is_baseline"].astype(bool)]
    keys = zip(tested["probe"], tested["metric"], tested["config"], strict=True)
    assert dict(zip(keys, tested["verdict"], strict=True)) == {
        (r["probe"], r["metric"], r["config"]): r["verdict"] for r in rows
    }


def test_resume_keeps_committed_runs_and_adds_new_ones(tmp_path, agent, monkeypatch):
    monkeypatch.setenv("VMTAX_PROBE", agent)
    db = f"sqlite:///{tmp_path / 'c.db'}"
    suite = parse_suite(SUITE.format(precision="0.01%", budget="8s"), "adaptive.toml")
    plan = build_plan(suite, source="t", seed=9, targets=[{"kind": "local", "level": "L0"}])
    assert plan.sampling and len(plan.steps) == 6  # min_runs rounds only
    with Store.open(db) as store:
        exp = store.create_experiment(
            command=["t"],
            suite="adaptive",
            seed=9,
            plan=plan.to_dict(),
            vmtax_version="t",
            agent_version=None,
        )

        class StopAfter:
            """Stops the runner after n runs, as a killed controller would (mid-look)."""

            def __init__(self, n: int) -> None:
                self.n = n
                self.runner: Runner | None = None

            def add_target(self, name: str, total: int) -> None:
                del name, total

            def advance(self, name: str, description: str) -> None:
                self.n -= 1
                if self.n == 0 and self.runner is not None:
                    self.runner._stop.set()

            def finish(self, name: str, description: str, *, failed: bool) -> None:
                del name, description, failed

        # First session: stopped after 8 runs (2 beyond the plan: adaptive steps).
        stopper = StopAfter(8)
        first = Runner(store, plan, [LocalTarget()], progress=stopper,
                       step_source=AdaptiveSampler(store, plan, exp))  # fmt: skip
        stopper.runner = first
        first.execute(exp)
        store.finish_experiment(exp, "interrupted")
        before = store.runs([f"exp={exp}"])
        assert store.experiment(exp)["status"] == "interrupted"
        ok_before = before[before["status"] == "ok"]
        assert len(ok_before) >= 7 and ok_before["plan_index"].max() >= 6

        # Resume from the stored plan: nothing committed is run again.
        stored = Plan.from_dict(store.experiment(exp)["plan"])
        done = store.completed_plan_indices(exp)
        second = Runner(store, stored, [LocalTarget()],
                        step_source=AdaptiveSampler(store, stored, exp))  # fmt: skip
        result = second.execute(exp, done)
        assert result.status == "ok"
        after = store.runs([f"exp={exp}"])
        ok_after = after[after["status"] == "ok"]
        assert ok_after["plan_index"].is_unique
        kept = ok_after.set_index("plan_index").loc[ok_before["plan_index"], "run_id"]
        assert sorted(kept) == sorted(ok_before["run_id"])  # the same rows, not redone
        assert len(ok_after) > len(ok_before)
        found = outcome.outcomes(store, [exp])
        assert set(found["probe"]) == {"syscall", "cpu"}


def test_noise_sample_from_the_agent_and_clock_change(agent, monkeypatch):
    monkeypatch.setenv("VMTAX_PROBE", agent)
    target = LocalTarget()
    target.prepare()
    a, b = noise.sample(target, 0.01), noise.sample(target, 0.01)
    assert "error" not in a and a["chunks"] >= 1 and a["clock"] in ("tsc", "monotonic_ns")
    change = noise.clock_change(a, b)
    assert -0.9 < change < 10
    assert noise.clock_change(a, {"error": "x"}) != noise.clock_change(a, {"error": "x"})  # NaN
    summary = noise.summary([a, b])
    assert set(summary) == {"other_cpu_pct", "procs_running", "steal_ticks", "clock_change"}
    broken = noise.sample(target, 61)  # the agent refuses: recorded, not raised
    assert "error" in broken and "window" in broken["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--precision", "2%", "--runs", "5"], "give --runs (a fixed number) or --precision"),
        (["--precision", "0%"], "--precision must be a percentage above 0%"),
        (["--precision", "two"], "--precision must be a percentage like 2%"),
        (["--budget", "-5s"], "--budget must be a positive duration"),
        (["--budget", "soon"], "--budget must be a duration like 60s"),
        (["--min-runs", "1"], "--min-runs must be in 2..10000"),
    ],
)
def test_bad_sampling_options_are_one_line_usage_errors(tmp_path, cli, args, message):
    result = cli("run", "--db", f"sqlite:///{tmp_path / 'u.db'}", *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"vmtax: error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
