"""The runner, its engine, resume, Ctrl-C, failures, hangs, boots and adaptive sampling, on the
in-process fake target (tests/fake_target.py) and a real SQLite store.

No guest and no agent process is needed to test what the runner does with what a target
says: every behaviour here is the runner's (what it asks, in which order, what it stores,
how the experiment ends), so the target is the one thing made up, and it says exactly what
the real agent says (the contract's records). The store is the real one. Runs "take" the
time the fake's model gives them on a virtual clock, so nothing sleeps. The real targets'
own behaviour (QEMU boots, process groups killed at a timeout, SSH) stays in their own tests.
"""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest

from fake_target import FakeTarget, Script, TimeModel, VirtualClock, fake_factory, fake_targets
from vmtax.errors import VmtaxError
from vmtax.plan.plan import Plan, build_plan, kill_after
from vmtax.plan.suite import parse_suite
from vmtax.runner import MAX_CONSECUTIVE_LOST, Runner
from vmtax.sampling import design, outcome
from vmtax.sampling.adaptive import AdaptiveSampler
from vmtax.store import Store

pytestmark = pytest.mark.fast

SUITE = """
name = "fake"
[defaults]
runs = {runs}
duration = 0.5
warmup = 2
timeout = 10
[[probes]]
probe = "cpuid"
[[probes]]
probe = "cpu"
"""
L0 = {"kind": "local", "level": "L0"}


def _l1(boots: int = 1) -> dict:
    return {"kind": "level", "level": "L1", "preset": "seed-c", "accel": "tcg", "boots": boots}


def _plan(specs: list[dict], runs: int = 3, seed: int = 5, suite: str = SUITE) -> Plan:
    return build_plan(
        parse_suite(suite.format(runs=runs), "fake.toml"), source="fake", seed=seed, targets=specs
    )


def _experiment(store: Store, plan: Plan) -> int:
    return store.create_experiment(
        command=["vmtax", "run"], suite=plan.suite, seed=plan.seed, plan=plan.to_dict(),
        vmtax_version="test", agent_version=None,
    )  # fmt: skip


def _runs(store: Store, exp: int) -> pd.DataFrame:
    return store.runs([f"exp={exp}"]).sort_values("plan_index").reset_index(drop=True)


class _Rows:
    """A progress display that keeps what it is told (execution.Progress)."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.done: list[str] = []
        self.last: dict[str, tuple[str, bool]] = {}

    def add_target(self, name: str, total: int) -> None:
        self.totals[name] = total

    def advance(self, name: str, description: str) -> None:
        self.done.append(name)

    def finish(self, name: str, description: str, *, failed: bool) -> None:
        self.last[name] = (description, failed)


def _ok_means(fake: FakeTarget) -> list[float]:
    return [r.mean for r in fake.runs if r.mean is not None]


def test_every_run_is_stored_with_its_boot_id_its_configuration_and_its_values(store):
    plan = _plan([L0, _l1()])
    exp = _experiment(store, plan)
    host, guest = fakes = fake_targets(plan.targets)
    outcome_ = Runner(store, plan, list(fakes)).execute(exp)
    assert outcome_.status == "ok" and [t.ok for t in outcome_.targets] == [6, 6]
    runs = _runs(store, exp)
    assert list(runs["plan_index"]) == [s.index for s in plan.steps]
    assert set(runs["status"]) == {"ok"}
    assert store.experiment(exp)["status"] == "ok"
    for slot, fake in enumerate(fakes):
        mine = runs[runs["target"] == fake.name]
        assert list(mine["plan_index"]) == [s.index for s in plan.steps_for(slot)]
        # Each run carries the boot id its target was in, and its configuration's level.
        assert list(mine["boot"]) == [r.boot_id for r in fake.runs]
        assert set(mine["level"]) == {fake.level}
        # The values stored are the ones the target measured, run by run.
        assert list(mine["mean"]) == pytest.approx(_ok_means(fake), rel=1e-12)
        assert list(mine["probe"]) == [r.probe for r in fake.runs]
        samples = store.samples(mine["run_id"])
        assert list(samples[int(mine["run_id"].iloc[0])]) == pytest.approx(fake.runs[0].values)
    # The two levels share this machine: they took turns in the plan's order, one at a time.
    ran = sorted((r.started, r.ended, slot) for slot, f in enumerate(fakes) for r in f.runs)
    assert [slot for _, _, slot in ran] == [s.target for s in plan.steps]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ran))
    assert list(store.executed_order(exp)["plan_index"]) == [s.index for s in plan.steps]
    # L0's configuration says what lies under this machine (the fingerprint's KVM).
    assert runs[runs["target"] == host.name]["labels"].iloc[0]["host_hypervisor"] == "kvm"
    assert len(host.boot_ids) == len(guest.boot_ids) == 1
    assert host.boot_ids != guest.boot_ids


def test_n_boots_give_n_boot_ids_and_the_runs_are_spread_as_planned(store):
    plan = _plan([L0, _l1(boots=3)], runs=6)
    exp = _experiment(store, plan)
    host, guest = fakes = fake_targets(plan.targets)
    assert Runner(store, plan, list(fakes)).execute(exp).status == "ok"
    assert len(guest.boot_ids) == 3 == len(set(guest.boot_ids)) and len(host.boot_ids) == 1
    # The guest ran its steps in the plan's order, each in the boot the plan put it in.
    planned = plan.steps_for(1)
    assert [(r.probe, r.boot - 1) for r in guest.runs] == [(s.entry, s.boot) for s in planned]
    runs = _runs(store, exp)
    mine = runs[runs["target"] == guest.name].copy()
    mine["planned_boot"] = mine["plan_index"].map({s.index: s.boot for s in plan.steps})
    # One boot id per planned boot, none shared, and each boot holds its part of every probe.
    assert mine.groupby("planned_boot")["boot"].nunique().to_dict() == {0: 1, 1: 1, 2: 1}
    assert mine["boot"].nunique() == 3
    per_boot = mine.groupby(["planned_boot", "probe"]).size().to_dict()
    assert per_boot == {(b, p): 2 for b in range(3) for p in ("cpu", "cpuid")}
    assert runs[runs["target"] == host.name]["boot"].nunique() == 1


def test_ctrl_c_stores_the_runs_that_finished_and_none_after(store):
    # Two levels on one machine take turns; Ctrl-C comes while the guest's 4th run measures.
    plan = _plan([L0, _l1(boots=2)], runs=4)
    exp = _experiment(store, plan)
    fakes = fake_targets(plan.targets, scripts={1: Script(runs={4: "ctrl_c"})})
    with pytest.raises(KeyboardInterrupt):
        Runner(store, plan, list(fakes)).execute(exp)
    assert store.experiment(exp)["status"] == "interrupted"
    assert all(f.cancelled for f in fakes)
    # No target was asked for anything once it was cancelled.
    assert [f.after_cancel for f in fakes] == [[], []]
    in_flight = plan.steps_for(1)[3].index
    runs = _runs(store, exp)
    ok = runs[runs["status"] == "ok"]
    # Every run before the one in flight finished and is stored, in the plan's order ...
    assert list(ok["plan_index"]) == list(range(in_flight))
    # ... the one in flight is stored as lost, and nothing after it at all.
    last = runs.iloc[-1]
    assert (last["plan_index"], last["status"]) == (in_flight, "lost")
    assert "interrupted" in last["error"]
    assert runs["plan_index"].max() == in_flight
    assert sum(len(_ok_means(f)) for f in fakes) == len(ok)


def _use_case(tmp_path, monkeypatch, made: list[list[FakeTarget]], ctrl_c_at: int):
    """`vmtax run` as its use case does it, on fakes: this machine's agent and the targets
    are the fake's; the request, the plan and the store are real. Ctrl-C comes during run
    ``ctrl_c_at``; returns the experiment's id, its store's URL and the clock."""
    import vmtax.experiment.run as use_case
    from vmtax.experiment.request import RunRequest

    monkeypatch.setenv("VMTAX_RUN_REPORT", "none")
    suite = tmp_path / "fake.toml"
    suite.write_text(SUITE.format(runs=4))
    db = f"sqlite:///{tmp_path / 'r.db'}"
    clock = VirtualClock()
    monkeypatch.setattr(use_case, "_local_target", lambda: FakeTarget("local", clock=clock))
    script = Script(runs={ctrl_c_at: "ctrl_c"})
    monkeypatch.setattr(
        use_case, "make_targets", fake_factory(made, clock=clock, scripts={0: script})
    )
    with pytest.raises(VmtaxError) as stopped:
        use_case.run(RunRequest(suite=str(suite), db=db, seed=3, argv=["run"]))
    assert stopped.value.exit_code == 130
    with Store.open(db) as store:
        exp = int(store.latest_experiment_id())
    assert f"vmtax run --resume {exp}" in stopped.value.message
    return exp, db, clock


def _resume(monkeypatch, ref: str, db: str, clock: VirtualClock) -> tuple[FakeTarget, Any]:
    """`vmtax run --resume REF` as its use case does it, on new fakes."""
    import vmtax.experiment.run as use_case

    made: list[list[FakeTarget]] = []
    monkeypatch.setattr(use_case, "make_targets", fake_factory(made, clock=clock))
    done = use_case.resume(ref, db=db, notice=lambda _line: None)
    ((fake,),) = made
    return fake, done


def test_resume_after_ctrl_c_runs_only_what_is_missing_and_rewrites_nothing(tmp_path, monkeypatch):
    first: list[list[FakeTarget]] = []
    exp, db, clock = _use_case(tmp_path, monkeypatch, first, ctrl_c_at=5)
    assert first[0][0].after_cancel == []  # asked for nothing once cancelled
    with Store.open(db) as store:
        assert store.experiment(exp)["status"] == "interrupted"
        before = _runs(store, exp)
        plan = Plan.from_dict(store.experiment(exp)["plan"])
    committed = before[before["status"] == "ok"]
    assert list(committed["plan_index"]) == [0, 1, 2, 3]

    fake, done = _resume(monkeypatch, str(exp), db, clock)
    assert done.outcome is not None and done.outcome.status == "ok"
    missing = [s for s in plan.steps if s.index not in set(committed["plan_index"])]
    # Only the missing steps ran, in the plan's order.
    assert [r.probe for r in fake.runs] == [s.entry for s in missing]
    with Store.open(db) as store:
        after = _runs(store, exp)
        assert store.experiment(exp)["status"] == "ok"
    ok = after[after["status"] == "ok"]
    assert sorted(ok["plan_index"]) == [s.index for s in plan.steps]  # each once
    # The committed runs are the same rows with the same values, never run or written again.
    kept = ok[ok["run_id"].isin(committed["run_id"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, committed.reset_index(drop=True))
    # The run lost at Ctrl-C stays stored as it was; its step ran again in the resume.
    lost = before[before["status"] == "lost"]
    assert list(lost["plan_index"]) == [4]
    assert after[after["run_id"].isin(lost["run_id"])]["status"].tolist() == ["lost"]


def test_a_dead_controllers_experiment_is_found_interrupted_and_resumed(tmp_path, monkeypatch):
    # What a SIGKILLed `vmtax run` leaves: its committed runs, and its experiment "running"
    # with nobody to mark it. (The lost row of the run in flight is Ctrl-C's here; SIGKILL
    # stores none, and nothing checked below depends on it.)
    from vmtax.experiment.lookup import reconcile
    from vmtax.runner import controller_identity

    exp, db, clock = _use_case(tmp_path, monkeypatch, [], ctrl_c_at=3)
    with Store.open(db) as store:
        store.reopen_experiment(exp, controller=controller_identity())
        assert reconcile(store) == []  # its controller (this process) lives: still running
    with pytest.raises(VmtaxError, match=f"experiment {exp} is still running"):
        _resume(monkeypatch, "latest", db, clock)
    with Store.open(db) as store:
        # This pid with another start time: the controller that had it has gone.
        store.reopen_experiment(exp, controller=controller_identity() | {"pid_start": -1})
        assert store.experiment(exp)["status"] == "running"
    fake, done = _resume(monkeypatch, "latest", db, clock)
    assert done.experiment_id == exp and done.outcome is not None
    with Store.open(db) as store:
        assert store.experiment(exp)["status"] == "ok"
        ok = _runs(store, exp).query("status == 'ok'")
        plan = Plan.from_dict(store.experiment(exp)["plan"])
    assert sorted(ok["plan_index"]) == [s.index for s in plan.steps]  # each once
    assert len(fake.runs) == len(plan.steps) - 2  # the two committed were not run again


def test_a_resume_starts_a_new_boot_for_what_remains(store):
    plan = _plan([_l1(boots=3)], runs=6)
    exp = _experiment(store, plan)
    steps = plan.steps
    # Ctrl-C during the guest's second boot, after its first run there.
    cut = next(i for i, s in enumerate(steps) if s.boot == 1) + 1
    clock = VirtualClock()
    (first,) = fake_targets(
        plan.targets, clock=clock, scripts={0: Script(runs={cut + 1: "ctrl_c"})}
    )
    with pytest.raises(KeyboardInterrupt):
        Runner(store, plan, [first]).execute(exp)
    store.reopen_experiment(exp)
    (guest,) = fake_targets(plan.targets, clock=clock)
    done = store.completed_plan_indices(exp)
    assert done == set(range(cut))
    assert Runner(store, plan, [guest]).execute(exp, done).status == "ok"
    # What remained of boot 1 runs in the resumed controller's first boot, boot 2 in another.
    assert len(guest.boot_ids) == 2 and not set(guest.boot_ids) & set(first.boot_ids)
    assert [r.boot for r in guest.runs] == [s.boot for s in steps[cut:]]
    runs = _runs(store, exp)
    new = runs[runs["plan_index"].isin([s.index for s in steps[cut:]]) & (runs["status"] == "ok")]
    assert set(new["boot"]) == set(guest.boot_ids)


def test_a_failed_run_and_a_lost_run_are_recorded_and_the_rest_go_on(store):
    plan = _plan([L0], runs=4)
    exp = _experiment(store, plan)
    (fake,) = fake_targets(plan.targets, scripts={0: Script(runs={2: "fail", 5: "lose"})})
    result = Runner(store, plan, [fake]).execute(exp)
    (target,) = result.targets
    assert (target.ok, target.failed, target.lost, target.error) == (6, 1, 1, None)
    assert result.status == "failed" == store.experiment(exp)["status"]
    runs = _runs(store, exp)
    assert list(runs["plan_index"]) == list(range(8))  # every step ran
    failed, lost = runs.iloc[1], runs.iloc[4]
    assert failed["status"] == "failed"
    assert failed["error"] == f"{failed['probe']}: refused (scripted)"  # the agent's reason
    assert lost["status"] == "lost" and "stream ended without an end record" in lost["error"]
    assert target.first_problem == failed["error"]
    assert set(runs.drop([1, 4])["status"]) == {"ok"}
    # A resume would run exactly those two steps again.
    assert store.completed_plan_indices(exp) == set(range(8)) - {1, 4}


def test_a_boot_that_fails_ends_its_target_and_the_others_finish(store):
    plan = _plan([L0, _l1(boots=3)], runs=3)
    exp = _experiment(store, plan)
    host, guest = fakes = fake_targets(plan.targets, scripts={1: Script(fail_boots={2})})
    progress = _Rows()
    result = Runner(store, plan, list(fakes), progress=progress).execute(exp)
    assert result.status == "failed" == store.experiment(exp)["status"]
    by_name = {t.name: t for t in result.targets}
    assert by_name[host.name].ok == 6 and by_name[host.name].error is None
    first_boot = sum(1 for s in plan.steps_for(1) if s.boot == 0)
    assert by_name[guest.name].ok == first_boot
    assert "boot 2 fails" in (by_name[guest.name].error or "")
    runs = _runs(store, exp)
    assert len(runs[runs["target"] == guest.name]) == first_boot  # nothing stored for it after
    assert len(guest.boot_ids) == 1
    # Each target's row: its total, a line per run, and how it ended (the failed one, why).
    assert progress.totals == {host.name: 6, guest.name: 6}
    assert progress.done.count(host.name) == 6 and progress.done.count(guest.name) == first_boot
    assert progress.last[host.name] == (f"{host.name}: done, 6 ok", False)
    text, failed = progress.last[guest.name]
    assert failed and text.startswith(f"{guest.name}: FAILED after {first_boot} runs: ")
    # A resume would run exactly the failed target's remaining steps.
    assert store.completed_plan_indices(exp) == set(runs["plan_index"])


def test_a_hung_run_is_killed_at_its_timeout_and_three_in_a_row_give_the_target_up(store):
    plan = _plan([L0], runs=4)
    exp = _experiment(store, plan)
    clock = VirtualClock()
    hangs = Script(runs={2: "hang", 4: "hang", 5: "hang", 6: "hang"})
    (fake,) = fake_targets(plan.targets, clock=clock, scripts={0: hangs})
    result = Runner(store, plan, [fake]).execute(exp)
    (target,) = result.targets
    killed_at = kill_after(10.0)  # the suite's timeout, and the agent's grace to end itself
    hung = fake.runs[1]
    # The runner gave it the kill deadline (plus what the agent took to start: no real time
    # here), and the run took exactly that on the clock.
    assert killed_at <= hung.timeout < killed_at + 1.0
    assert hung.ended - hung.started == pytest.approx(hung.timeout)
    runs = _runs(store, exp)
    assert runs.loc[1, "status"] == "lost" and "did not finish within" in runs.loc[1, "error"]
    assert runs.loc[2, "status"] == "ok"  # the next run went on
    # Three lost in a row (runs 4, 5, 6): the target is given up, its 7th and 8th never asked.
    assert len(fake.runs) == 6 and len(runs) == 6
    assert target.lost == 1 + MAX_CONSECUTIVE_LOST
    assert f"{MAX_CONSECUTIVE_LOST} runs in a row were lost" in (target.error or "")
    assert result.status == "failed"


ADAPTIVE = """
name = "adaptive"
precision = "{precision}"
budget = "{budget}"
min_runs = 3
[defaults]
duration = 1.0
timeout = 10
[[probes]]
probe = "cpuid"
[[probes]]
probe = "cpu"
"""


def _adaptive(store, precision: str, budget: str, model: TimeModel):
    suite = ADAPTIVE.format(precision=precision, budget=budget)
    plan = build_plan(parse_suite(suite, "a.toml"), source="a", seed=4, targets=[L0])
    exp = _experiment(store, plan)
    clock = VirtualClock()
    (fake,) = fake_targets(plan.targets, clock=clock, model=model)
    sampler = AdaptiveSampler(store, plan, exp, clock=clock)
    started = clock()
    result = Runner(store, plan, [fake], step_source=sampler).execute(exp)
    assert result.status == "ok", result.summary_error()
    return plan, exp, fake, clock, started


def test_adaptive_sampling_stops_each_probe_where_its_rule_says_given_the_noise(store):
    # 3% run-to-run noise against a 1.5% target: past the floor of 10 runs, several looks.
    model = TimeModel(run_sd=0.03, sample_sd=0.001, seed=11)
    plan, exp, fake, _, _ = _adaptive(store, "1.5%", "1h", model)
    runs = _runs(store, exp)
    found = outcome.outcomes(store, [exp]).set_index("probe")
    assert plan.sampling is not None
    for probe in ("cpuid", "cpu"):
        means = [r.mean for r in fake.runs if r.probe == probe]
        # The design played over the very run means the target gave, in their order.
        rule = design.sequential_run(
            means, 0.015, min_runs=3, max_runs=int(plan.sampling.get("max_runs", 1000))
        )
        assert rule.precise and rule.n == len(means) > design.STOP_FLOOR
        assert (runs["probe"] == probe).sum() == rule.n
        assert found.loc[probe, "n_runs"] == rule.n and found.loc[probe, "status"] == "precise"
        assert found.loc[probe, "half_width"] == pytest.approx(rule.half_width)
    assert runs["plan_index"].is_unique


def test_adaptive_sampling_stops_at_the_budget_on_the_clock(store):
    model = TimeModel(run_sd=0.03, seed=12)
    _, exp, fake, clock, started = _adaptive(store, "0.01%", "30s", model)
    found = outcome.outcomes(store, [exp])
    assert set(found["status"]) == {"imprecise"} and set(found["reason"]) == {"budget"}
    # Every run started within the budget; the one that spent it was the last.
    last = fake.runs[-1]
    assert all(r.started - started < 30.0 for r in fake.runs)
    assert last.started - started < 30.0 <= clock() - started
    assert clock() - last.ended <= 0.05 + 1e-9  # then only the closing noise sample
    assert len(_runs(store, exp)) == len(fake.runs)


def test_an_interrupted_adaptive_experiment_resumes_keeping_every_committed_run(store):
    suite = ADAPTIVE.format(precision="1.5%", budget="1h")
    plan = build_plan(parse_suite(suite, "a.toml"), source="a", seed=4, targets=[L0])
    assert plan.sampling is not None and len(plan.steps) == 6  # the min_runs rounds only
    exp = _experiment(store, plan)
    clock = VirtualClock()
    model = TimeModel(run_sd=0.03, sample_sd=0.001, seed=11)
    # Ctrl-C during the 9th run: three runs beyond the plan, in the first look's rounds.
    (first,) = fake_targets(plan.targets, clock=clock, model=model,
                            scripts={0: Script(runs={9: "ctrl_c"})})  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        Runner(store, plan, [first], step_source=AdaptiveSampler(store, plan, exp, clock=clock)
               ).execute(exp)  # fmt: skip
    assert store.experiment(exp)["status"] == "interrupted"
    before = _runs(store, exp)
    committed = before[before["status"] == "ok"]
    assert len(committed) == 8 and committed["plan_index"].max() >= 6

    stored = Plan.from_dict(store.experiment(exp)["plan"])
    done = store.completed_plan_indices(exp)
    store.reopen_experiment(exp)
    (again,) = fake_targets(stored.targets, clock=clock, model=model)
    sampler = AdaptiveSampler(store, stored, exp, clock=clock)
    result = Runner(store, stored, [again], step_source=sampler).execute(exp, done)
    assert result.status == "ok", result.summary_error()
    after = _runs(store, exp)
    ok = after[after["status"] == "ok"]
    assert ok["plan_index"].is_unique
    # The committed runs are the same rows; new steps got plan indices above every stored one.
    kept = ok[ok["run_id"].isin(committed["run_id"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, committed.reset_index(drop=True))
    new = ok[~ok["run_id"].isin(committed["run_id"])]
    assert len(new) == len(again.runs) > 0
    assert new["plan_index"].min() > before["plan_index"].max()
    # Each probe stopped precise, judged on every run it had, the committed ones included.
    found = outcome.outcomes(store, [exp]).set_index("probe")
    for probe in ("cpuid", "cpu"):
        means = ok[ok["probe"] == probe]["mean"].to_numpy()
        assert found.loc[probe, "n_runs"] == len(means)
        assert found.loc[probe, "status"] == "precise"
        assert design.look(means, 0.015, min_runs=3).precise
