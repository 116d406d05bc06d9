"""Sweeps: sizes per axis and presets, the store, resume, a failing guest, `vmtax sweep show`.

The quick tests run the sweep at level L0: real agent processes on this machine as the
"guests" (the same loop, sampler and store as QEMU guests, without a boot). The QEMU test
boots a real TCG guest and makes the second one fail to boot for real (too little memory).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from vmtax.errors import UsageError
from vmtax.store import Store, migrate
from vmtax.sweep.guests import local_factory
from vmtax.sweep.run import Guest, SweepError, SweepRunner
from vmtax.sweep.spec import SweepSpec, Timing, apply_presets, study_b_steps
from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget

TINY = Timing(0.5, 1.5, 0.5)


@pytest.fixture
def cli_agent():
    return str(find_agent())


class Lines:
    """A sweep's progress (``vmtax.execution.Progress``): the lines of its units, in order;
    Ctrl-C after ``stop_after`` of them."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.total: int | None = None
        self.lines: list[str] = []
        self.last: tuple[str, bool] | None = None
        self.stop_after = stop_after

    def add_target(self, name: str, total: int) -> None:
        assert name == "sweep"
        self.total = total

    def advance(self, name: str, description: str) -> None:
        self.lines.append(description)
        if self.stop_after is not None and len(self.lines) >= self.stop_after:
            raise KeyboardInterrupt

    def finish(self, name: str, description: str, *, failed: bool) -> None:
        self.last = (description, failed)

    def steps(self) -> list[int]:
        """The step index of each unit's line."""
        return [int(re.search(r" step (\d+)/", line)[1]) - 1 for line in self.lines]


def _spec(**kw) -> SweepSpec:
    base = SweepSpec(timing=TINY, max_prime=5000, events=10, host_cpus=2, replicates=1,
                     intervals=False)  # fmt: skip
    return replace(base, **kw)


def _experiment(store: Store, spec: SweepSpec) -> int:
    return store.create_experiment(
        command=["vmtax", "sweep"],
        suite="sweep",
        seed=0,
        plan={"sweep": spec.as_plan(), "level": "L0"},
        vmtax_version="test",
        agent_version=None,
    )


@pytest.mark.fast
def test_sizes_per_axis():
    guests = _spec(ratios=(0.5, 1.0, 1.5, 2.0))
    assert [s.guests for s in guests.steps()] == [1, 2, 3, 4]
    assert [s.ratio for s in guests.steps()] == [0.5, 1.0, 1.5, 2.0]
    vcpus = _spec(axis="vcpus", workload="threads", guests=1, ratios=(0.5, 1.0, 2.0))
    assert [s.vcpus for s in vcpus.steps()] == [(1,), (2,), (4,)]
    memory = _spec(axis="memory", guests=2, cap_mb=256, ratios=(1.0, 1.5, 2.0))
    assert [s.memory_mb for s in memory.steps()] == [(128, 128), (192, 192), (256, 256)]
    assert all(s.cap_mb == 256 for s in memory.steps())


@pytest.mark.fast
@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"axis": "disks"}, "unknown axis"),
        ({"ratios": (1.0, 0.5)}, "increasing"),
        ({"ratios": (0.0, 1.0)}, "positive"),
        ({"axis": "memory"}, "memory cap"),
        ({"axis": "memory", "cap_mb": 100, "guests": 2, "ratios": (1.0,)}, "below 128"),
        ({"axis": "vcpus"}, "--workload threads"),
        ({"timing": Timing(1, 1, 1)}, "at least 2 samples"),
        # Absurd sizes (refused before anything is built or booted).
        ({"ratios": (1e9,)}, "at most 16:1"),
        ({"ratios": tuple(0.1 * i for i in range(1, 40))}, "1 to 32 steps"),
        ({"replicates": 10**21}, "1 to 50"),
        ({"replicates": 1, "intervals": True}, "--replicates 1 --no-intervals"),
        ({"replicates": 2}, "--replicates 3 or more"),
        ({"replicates": 2, "intervals": False}, "--replicates 3 or more"),
        ({"timing": Timing(1, 1e30, 1)}, "window must be at most"),
        ({"timing": Timing(float("nan"), 10, 1)}, "warm-up must be at most"),
        ({"timing": Timing(1, 10, 0.001)}, "at least 0.1 s"),
        ({"events": 10**12}, "--events must be at most"),
        ({"guest_memory_mb": 99999999, "host_memory_mb": 24000}, "above this machine"),
        ({"cap_mb": 10**9, "axis": "memory", "host_memory_mb": 24000}, "--cap-mb"),
        ({"guest_vcpus": 10**6}, "--guest-vcpus"),
        # 10 guests of 4 GiB do not fit in 24 GiB: refused, not booted to fail.
        ({"guest_memory_mb": 4096, "host_memory_mb": 24000, "ratios": (5.0,)}, "needs 10"),
    ],
)
def test_bad_specs_are_usage_errors(kw, message):
    with pytest.raises(UsageError, match=message):
        _spec(**kw).check()


@pytest.mark.fast
@pytest.mark.parametrize("args", [["--replicates", "2"], ["--replicates", "2", "--no-intervals"]])
def test_two_replicates_are_refused_in_one_line_before_a_store_is_opened(cli, tmp_path, args):
    db = tmp_path / "s.db"
    res = cli("sweep", "--level", "L0", *args, "--db", str(db))
    assert res.returncode == 2 and res.stdout == "", res
    assert res.stderr.count("\n") == 1 and "use --replicates 3 or more" in res.stderr
    assert res.stderr.startswith("vmtax: error: ") and not db.exists()


@pytest.mark.fast
def test_study_b_preset_scales_the_csv_ratios_to_this_machine():
    ratios, mem = study_b_steps()
    assert ratios == (1.0, 1.5, 2.0, 2.5, 3.0) and mem == 1.4
    spec = apply_presets(_spec(), steps="study-b", timing="study-b")
    assert spec.timing == Timing(300.0, 600.0, 60.0)
    # 2 CPUs: 1-vCPU guests 2..6, and the memory cap gives 1.4:1 at the last step.
    assert [s.guests for s in spec.steps()] == [2, 3, 4, 5, 6]
    last = spec.steps()[-1]
    assert sum(last.memory_mb) / spec.cap_mb == pytest.approx(1.4, abs=0.01)
    assert study_b_steps("Xen")[0] == (1.0, 1.5, 2.0, 2.5)


@pytest.mark.fast
def test_replicates_run_in_rounds_in_a_random_order_from_the_stored_seed():
    spec = _spec(ratios=(0.5, 1.0, 1.5, 2.0, 2.5), replicates=3, intervals=True, order_seed=5)
    order = spec.order()
    assert order == _spec(ratios=spec.ratios, replicates=3, order_seed=5).order()
    assert [r for r, _ in order] == [0] * 5 + [1] * 5 + [2] * 5
    rounds = [[i for r, i in order if r == k] for k in range(3)]
    assert all(sorted(r) == [0, 1, 2, 3, 4] for r in rounds)
    assert rounds != [[0, 1, 2, 3, 4]] * 3  # not ascending
    assert order != replace(spec, order_seed=6).order()
    assert {spec.unit(r, i) for r, i in order} == set(range(15))
    # A sweep stored before replicates reads as one replicate without intervals.
    plan = spec.as_plan()
    del plan["replicates"], plan["intervals"]
    old = SweepSpec.from_plan(plan)
    assert old.replicates == 1 and not old.intervals and old.unit(0, 3) == 3


@pytest.mark.slow
def test_l0_replicated_sweep_stores_each_unit_and_shows_replicate_intervals(cli, tmp_path):
    db = str(tmp_path / "rep.db")
    spec = _spec(ratios=(0.5, 1.0, 1.5, 2.0), replicates=3, intervals=True, order_seed=9,
                 timing=Timing(0.2, 1.0, 0.5))  # fmt: skip
    with Store.open(db) as store:
        exp = _experiment(store, spec)
        lines = Lines()
        seen = SweepRunner(store, spec, local_factory(spec), level="L0",
                           progress=lines).execute(exp)  # fmt: skip
        rows = store.sweeps.steps(exp)
    assert [(o.replicate, o.index) for o in seen] == spec.order()
    assert lines.total == 12 and len(lines.lines) == 12 and lines.lines[0].startswith("[1/12] ")
    assert lines.last == ("sweep: done, 12 units", False)
    assert sorted(rows["step_index"]) == list(range(12)) and set(rows["status"]) == {"ok"}
    details = {int(r["step_index"]): r["detail"] for _, r in rows.iterrows()}
    for position, (rep, index) in enumerate(spec.order()):
        d = details[spec.unit(rep, index)]
        assert (d["step"], d["replicate"], d["order"]) == (index, rep, position)
    res = cli("sweep", "show", "latest", "--format", "json", "--db", db)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["replicates"] == 3 and data["order_seed"] == 9
    for step in data["steps"]:
        t = step["throughput"]
        assert t["replicates"] == 3 and len(t["replicate_means"]) == 3
        assert t["mean"] == pytest.approx(sum(t["replicate_means"]) / 3)
        assert t["ci_low"] <= t["mean"] <= t["ci_high"]


@pytest.mark.fast
def test_migration_0003_upgrades_and_downgrades(sqlite_url):
    Store.open(sqlite_url).close()
    with Store.open(sqlite_url) as store:
        with store.engine.begin() as connection:
            assert {"sweep_steps", "sweep_samples"} <= set(inspect(connection).get_table_names())
            command.downgrade(migrate._config(connection), "0002")
        with store.engine.connect() as connection:
            assert "sweep_steps" not in inspect(connection).get_table_names()
    with Store.open(sqlite_url) as store:  # upgraded again on open
        assert store.info()["schema_version"] == migrate.head()


@pytest.mark.slow
def test_l0_sweep_commits_every_step_with_its_samples(store):
    spec = _spec(ratios=(0.5, 1.0, 1.5))
    exp = _experiment(store, spec)
    seen = SweepRunner(store, spec, local_factory(spec), level="L0").execute(exp)
    assert [o.status for o in seen] == ["ok"] * 3
    rows = store.sweeps.steps(exp)
    assert list(rows["guests"]) == [1, 2, 3] and set(rows["status"]) == {"ok"}
    samples = store.sweeps.samples(list(rows["id"]))
    window = samples[samples["phase"] == "window"]
    assert len(window) == 3 * 3 and len(samples) == 3 * 4
    # Every step measured something (an interval may be empty on a busy machine).
    per_step = window.groupby("step_id")["transactions"].sum()
    assert len(per_step) == 3 and (per_step > 0).all() and (window["throughput"] >= 0).all()
    assert window["host_util"].between(0, 1).all()
    assert store.experiment(exp)["status"] == "ok"


@pytest.mark.slow
def test_interrupted_sweep_resumes_at_its_step_without_redoing_committed_ones(store):
    spec = _spec(ratios=(0.5, 1.0, 1.5, 2.0))
    exp = _experiment(store, spec)

    order = [i for _, i in spec.order()]  # one replicate, its steps in a random order
    seen = Lines(stop_after=2)
    runner = SweepRunner(store, spec, local_factory(spec), level="L0", progress=seen)
    with pytest.raises(KeyboardInterrupt):
        runner.execute(exp)
    assert store.experiment(exp)["status"] == "interrupted"
    before = store.sweeps.steps(exp)
    assert list(before["step_index"]) == sorted(order[:2]) == sorted(seen.steps())
    rest = Lines()
    ran = SweepRunner(store, spec, local_factory(spec), level="L0", progress=rest).execute(exp)
    assert [o.index for o in ran] == order[2:] == rest.steps() and rest.total == 2
    after = store.sweeps.steps(exp)
    assert list(after["step_index"]) == [0, 1, 2, 3] and set(after["status"]) == {"ok"}
    kept = after[after["step_index"].isin(order[:2])]
    assert list(kept["id"]) == list(before["id"])
    assert list(kept["started_at"]) == list(before["started_at"])
    assert store.experiment(exp)["status"] == "ok"


@pytest.mark.fast
def test_guest_that_fails_to_start_at_step_k_keeps_the_steps_before(store, tmp_path):
    spec = _spec(ratios=(0.5, 1.0, 1.5, 2.0))
    exp = _experiment(store, spec)
    good = local_factory(spec)

    def factory(size, index, vcpus, memory_mb):
        if index == 2:  # the third guest's agent is not there: it cannot start
            missing = LocalTarget(tmp_path / "no-agent", name=f"local-{index + 1}")
            missing.prepare()
            missing.run_agent(["env"], 5)
            return Guest(missing, vcpus, memory_mb)
        return good(size, index, vcpus, memory_mb)

    with pytest.raises(SweepError) as err:
        SweepRunner(store, spec, factory, level="L0").execute(exp)
    msg = str(err.value)
    assert "\n" not in msg and "guest 3 of 3 failed to boot" in msg and "no-agent" in msg
    rows = store.sweeps.steps(exp)
    # The steps run before the first with a third guest stay; that one is stored as failed.
    order = [i for _, i in spec.order()]
    failing = next(n for n, i in enumerate(order) if spec.steps()[i].guests >= 3)
    want = {i: "ok" for i in order[:failing]} | {order[failing]: "failed"}
    assert dict(zip(rows["step_index"], rows["status"], strict=True)) == want
    assert store.experiment(exp)["status"] == "failed"


@pytest.mark.slow
def test_cli_sweep_and_show_json(cli, tmp_path):
    db = str(tmp_path / "s.db")
    res = cli("sweep", "--level", "L0", "--steps", "0.5,1,1.5,2", "--warmup", "0.5",
              "--window", "1.5", "--interval", "0.5", "--events", "10", "--max-prime", "5000",
              "--replicates", "3", "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.count(" step ") == 12 and "Sweep 1" in res.stdout
    res = cli("sweep", "show", "latest", "--format", "json", "--db", db)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [s["ratio"] for s in data["steps"]] == [0.5, 1.0, 1.5, 2.0]
    step = data["steps"][0]
    assert step["throughput"]["mean"] > 0
    assert (
        step["throughput"]["ci_low"] <= step["throughput"]["mean"] <= step["throughput"]["ci_high"]
    )
    assert step["p95_response_s"] > 0 and 0 <= step["utilisation"]["host"] <= 1
    assert "guest_reported" in step["steal"] and "knee" in data
    assert data["knee"] is None or set(data["knee"]) >= {"ratio", "low", "high", "step", "edge"}
    for fmt, marker in (("markdown", "| ratio |"), ("table", "ratio"), ("html", "<svg")):
        res = cli("sweep", "show", "1", "--format", fmt, "--db", db)
        assert res.returncode == 0 and marker in res.stdout, res.stderr


@pytest.mark.fast
def test_cli_usage_errors_are_one_line(cli, tmp_path):
    db = str(tmp_path / "s.db")
    for args in (
        ("sweep", "--axis", "disks", "--level", "L0", "--db", db),
        ("sweep", "--steps", "one,two", "--level", "L0", "--db", db),
        ("sweep", "show", "latest", "--format", "yaml", "--db", db),
        ("sweep", "--steps", "1e9", "--db", db),
        ("sweep", "--guest-memory", "99999999", "--db", db),
        ("sweep", "--replicates", "1", "--db", db),
        ("sweep", "--guest-memory", "8192", "--steps", "0.5,1,1.5,2", "--db", db),
        ("sweep", "--window", "inf", "--db", db),
        ("sweep", "--boot-timeout", "nan", "--db", db),
    ):
        res = cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.startswith("vmtax: error: ") and len(res.stderr.splitlines()) == 1
    assert not Path(tmp_path / "s.db").exists()  # refused before the store was made
    Store.open(db).close()
    res = cli("sweep", "show", "latest", "--db", db)
    assert res.returncode == 1 and "no sweep" in res.stderr


@pytest.mark.fast
def test_cli_help_states_the_bounds(cli):
    res = cli("sweep", "--help")
    text = " ".join(res.stdout.replace("│", " ").split())
    for bound in ("1 to 32 steps", "at most 16:1", "3 to 50", "--no-intervals",
                  "at most this machine's memory", "at most 86400", "Example:"):  # fmt: skip
        assert bound in text, bound


@pytest.mark.slow
def test_cli_resume_runs_only_the_missing_steps(cli, tmp_path):
    db = str(tmp_path / "r.db")
    spec = _spec(ratios=(0.5, 1.0, 1.5))
    with Store.open(db) as store:
        exp = _experiment(store, spec)

        with pytest.raises(KeyboardInterrupt):
            SweepRunner(store, spec, local_factory(spec), level="L0",
                        progress=Lines(stop_after=1)).execute(exp)  # fmt: skip
    res = cli("sweep", "--resume", "latest", "--db", db)  # as `vmtax run --resume latest`
    assert res.returncode == 0, res.stderr
    assert f"sweep experiment {exp}:" in res.stderr
    first = spec.order()[0][1]
    assert res.stderr.count("] replicate 1/1 step ") == 2
    assert f"step {first + 1}/3" not in res.stderr
    with Store.open(db) as store:
        rows = store.sweeps.steps(exp)
        assert list(rows["step_index"]) == [0, 1, 2] and set(rows["status"]) == {"ok"}
        assert store.experiment(exp)["status"] == "ok"
    res = cli("sweep", "--resume", "999", "--db", db)
    assert res.returncode == 1 and "no experiment 999" in res.stderr
    res = cli("sweep", "--resume", "newest", "--db", db)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "--resume must be an experiment id (1..9223372036854775807) or latest" in res.stderr
    assert "got 'newest'" in res.stderr
    empty = str(tmp_path / "empty.db")
    Store.open(empty).close()
    res = cli("sweep", "--resume", "latest", "--db", empty)
    assert res.returncode == 1 and "no sweep in the store yet" in res.stderr


@pytest.mark.slow
def test_sigterm_stops_the_sweep_and_resume_finishes_it(tmp_path):
    import os
    import shutil
    import signal
    import subprocess
    import sys

    vmtax = shutil.which("vmtax") or str(Path(sys.executable).parent / "vmtax")
    db = str(tmp_path / "t.db")
    env = {**os.environ, "VMTAX_PROBE": str(find_agent())}
    args = [vmtax, "sweep", "--level", "L0", "--steps", "0.5,1,1.5", "--warmup", "0.5",
            "--window", "1.5", "--interval", "0.5", "--events", "10", "--max-prime", "5000",
            "--replicates", "1", "--no-intervals", "--order-seed", "0", "--db", db]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env)  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if "] replicate 1/1 step" in line:
            proc.send_signal(signal.SIGTERM)  # during the second unit
            break
    first = SweepSpec(ratios=(0.5, 1.0, 1.5), replicates=1, order_seed=0).order()[0][1]
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    assert "vmtax: error: interrupted" in rest
    with Store.open(db) as store:
        assert store.experiment(1)["status"] == "interrupted"
        assert list(store.sweeps.steps(1)["step_index"]) == [first]
    res = subprocess.run([vmtax, "sweep", "--resume", "1", "--db", db], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    with Store.open(db) as store:
        assert list(store.sweeps.steps(1)["step_index"]) == [0, 1, 2]
