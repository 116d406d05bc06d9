"""Levels on one machine take turns in the plan's order, and every run keeps its start and end.

The targets are real: the agent runs on this machine, once per target wrapper. Several
L0 targets behind one shared lock stand for levels on one machine (what `targets.levels`
builds), which keeps this test to seconds; the order logic does not depend on the level.
"""

from __future__ import annotations

import threading
import time

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from vmtax.plan.plan import build_plan
from vmtax.plan.suite import parse_suite
from vmtax.runner import Runner
from vmtax.store import Store, migrate
from vmtax.targets.base import find_agent
from vmtax.targets.levels import OneAtATime
from vmtax.targets.local import LocalTarget
from vmtax.turns import Turns

pytestmark = pytest.mark.fast

SUITE = """
name = "turns"
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


def _run_shared(store, n_targets: int, seed: int):
    agent = find_agent()
    specs = [{"kind": "local", "level": "L0"}] * n_targets
    plan = build_plan(parse_suite(SUITE, "t.toml"), source="t.toml", seed=seed, targets=specs)
    lock = threading.Lock()
    targets = [OneAtATime(LocalTarget(agent, name=f"t{i}"), lock) for i in range(n_targets)]
    exp = store.create_experiment(
        command=["vmtax"], suite="turns", seed=seed, plan=plan.to_dict(),
        vmtax_version="test", agent_version=None,
    )  # fmt: skip
    outcome = Runner(store, plan, targets, max_workers=n_targets).execute(exp)
    assert outcome.status == "ok"
    return plan, store.executed_order(exp)


@pytest.mark.parametrize("n_targets", [2, 3])
def test_levels_on_one_machine_run_in_the_plans_order(store, n_targets):
    plan, ran = _run_shared(store, n_targets, seed=11 + n_targets)
    assert list(ran["plan_index"]) == [s.index for s in plan.steps]
    # (The stand-in levels are all L0 with one configuration; the plan index names the slot.)
    # One at a time: each run ended before the next began, on both clocks.
    assert (ran["ended_ns"].to_numpy()[:-1] <= ran["started_ns"].to_numpy()[1:]).all()
    assert (ran["ended_at"].to_numpy()[:-1] <= ran["started_at"].to_numpy()[1:]).all()
    assert (ran["ended_ns"] > ran["started_ns"]).all()


def test_the_plan_alternates_targets_within_every_entry_and_round():
    specs = [{"kind": "local", "level": "L0"}] * 3
    plan = build_plan(parse_suite(SUITE, "t.toml"), source="t.toml", seed=5, targets=specs)
    steps = plan.steps
    assert len(steps) == 2 * 3 * 3
    for start in range(0, len(steps), 3):
        block = steps[start : start + 3]
        assert sorted(s.target for s in block) == [0, 1, 2]
        assert len({(s.entry, s.run) for s in block}) == 1
    # Which target goes first is shuffled, not always the baseline.
    assert len({steps[i].target for i in range(0, len(steps), 3)}) > 1


def test_a_slot_that_leaves_never_blocks_the_others():
    turns = Turns([0, 1, 0, 1, 0, 1], [0, 1])
    stop = threading.Event()
    seen: list[int] = []

    def worker(slot: int, n: int) -> None:
        turns.ready(slot)
        for _ in range(n):
            with turns.turn(slot, stop) as mine:
                assert mine
                seen.append(slot)
        turns.leave(slot)

    threads = [
        threading.Thread(target=worker, args=(0, 3)),
        threading.Thread(target=worker, args=(1, 1)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert seen == [0, 1, 0, 0]


def test_no_turn_is_handed_out_before_every_slot_is_ready():
    turns = Turns([0, 1], [0, 1])
    stop = threading.Event()
    turns.ready(0)
    got: list[bool] = []
    first = threading.Thread(target=lambda: got.append(turns.turn(0, stop).__enter__()))
    first.start()
    time.sleep(0.3)
    assert first.is_alive() and got == []  # slot 1 is still booting
    turns.ready(1)
    first.join(5)
    assert got == [True]


def test_a_stop_releases_a_waiting_slot():
    turns = Turns([0, 1], [0, 1])
    turns.ready(0)
    turns.ready(1)
    stop = threading.Event()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(turns.turn(1, stop).__enter__()))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # slot 0 has not taken its turn
    stop.set()
    waiter.join(5)
    assert got == [False]


def test_a_turn_that_comes_after_the_stop_is_not_taken():
    # Ctrl-C while one level measures: its killed run hands the turn on, and the level whose
    # turn it is then must not start a run. It did (its turn had come), and on this machine's
    # L0 that run was measured and stored after the Ctrl-C (tests/test_fake_runner.py).
    turns = Turns([0, 1], [0, 1])
    turns.ready(0)
    turns.ready(1)
    stop = threading.Event()
    stop.set()
    with turns.turn(0, stop) as mine:  # slot 0's turn, but stopped
        assert mine is False


def test_results_show_lists_runs_in_executed_order(store, cli, sqlite_url):
    plan, ran = _run_shared(store, 2, seed=3)
    out = cli("results", "show", "latest", "--executed", "--db", sqlite_url).stdout
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    assert [int(r[0]) for r in rows] == list(range(1, len(plan.steps) + 1))
    assert [int(r[7]) for r in rows] == [s.index for s in plan.steps]


def test_runs_stored_before_run_times_keep_null_and_list_last(store, sqlite_url, cli):
    _run_shared(store, 2, seed=3)
    store.close()
    # Take the store back to the schema before run times, then let vmtax upgrade it again.
    engine = create_engine(sqlite_url)
    with engine.begin() as connection:
        command.downgrade(migrate._config(connection), "0004")
        assert "started_ns" not in {c["name"] for c in inspect(connection).get_columns("runs")}
    engine.dispose()
    upgraded = Store.open(sqlite_url)
    ran = upgraded.executed_order(1)
    upgraded.close()
    assert len(ran) == 12 and ran["started_ns"].isna().all() and ran["started_at"].isna().all()
    out = cli("results", "show", "1", "--executed", "--db", sqlite_url).stdout
    assert out.count("not recorded") == 12
