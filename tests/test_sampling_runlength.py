"""The run length of an adaptive plan: many runs within the budget, each still measuring for
a fair share of its time, never longer than the suite allows; the choice is recorded."""

from __future__ import annotations

import pytest

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import load_suite
from vmtax.sampling import runlength

pytestmark = pytest.mark.fast


def _entries(n: int, duration: float | None = 0.15) -> dict[str, dict]:
    return {f"p{i}": {"duration": duration, "iterations": 1000} for i in range(n)}


def test_budget_shared_for_planned_runs_within_floor_and_ceiling() -> None:
    # 12 entries x 1 target x 20 runs in 120 s: 0.5 s a run, 0.1 s of it overhead -> capped 0.15.
    entries = _entries(12)
    runlength.choose(entries, budget_s=120, targets=1, overhead_s=0.1)
    assert {e["duration"] for e in entries.values()} == {0.15}
    # 40 s: 0.167 s a run - 0.1 s overhead = 0.067 s.
    entries = _entries(12)
    chosen = runlength.choose(entries, budget_s=40, targets=1, overhead_s=0.1)
    assert entries["p0"]["duration"] == pytest.approx(40 / 240 - 0.1, abs=1e-4)
    assert chosen["p0"]["overhead_s"] == 0.1 and "40 s" in chosen["p0"]["why"]
    # Two levels share the budget; a large overhead sets the floor (a quarter of it).
    entries = _entries(12)
    runlength.choose(entries, budget_s=40, targets=2, overhead_s=0.4)
    assert entries["p0"]["duration"] == pytest.approx(0.1)
    # Never below MIN_DURATION_S.
    entries = _entries(12)
    runlength.choose(entries, budget_s=10, targets=3, overhead_s=0.0)
    assert entries["p0"]["duration"] == runlength.MIN_DURATION_S


def test_without_budget_the_suite_duration_stays() -> None:
    entries = _entries(3, duration=0.3)
    chosen = runlength.choose(entries, budget_s=None, targets=1, overhead_s=0.2)
    assert entries["p0"]["duration"] == 0.3 and chosen["p0"]["why"].startswith("no budget")


def test_quick_suite_plan_is_adaptive_and_records_the_choice() -> None:
    suite, source = load_suite("quick")
    plan = build_plan(suite, source=source, seed=1, targets=[{"kind": "local"}])
    assert plan.sampling["precision"] == 0.03 and plan.sampling["budget_s"] == 45.0
    assert len(plan.steps) == plan.sampling["min_runs"] * len(plan.entries)
    runlength.apply(plan, overhead_s=0.15, fixed=False)
    stored = plan.to_dict()["sampling"]["run_length"]
    assert set(stored) == set(plan.entries)
    assert all(0.03 <= plan.entries[e]["duration"] <= 0.15 for e in plan.entries)
    assert "--duration" in plan.invocation(plan.steps[0], None).args
    fixed = build_plan(suite, source=source, seed=1, targets=[{"kind": "local"}], runs=7)
    assert fixed.sampling is None and len(fixed.steps) == 7 * len(fixed.entries)
