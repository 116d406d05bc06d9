"""Sweeps: sizes per axis and presets, the store, resume, a failing guest, `vmtax sweep show`.

The quick tests run the sweep at level L0: real agent processes on this machine as the
"guests" (the same loop, sampler and store as QEMU guests, without a boot). The QEMU test
boots a real TCG guest and makes the second one fail to boot for real (too little memory).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from vmtax.errors import UsageError
from vmtax.store import Store, migrate
from vmtax.sweep import store as sweep_store
from vmtax.sweep.guests import local_factory
from vmtax.sweep.run import Guest, SweepError, SweepRunner
from vmtax.sweep.spec import SweepSpec, Timing, apply_presets, study_b_steps
from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget

TINY = Timing(0.5, 1.5, 0.5)


@pytest.fixture
def cli_agent():
    return str(find_agent())


def _spec(**kw) -> SweepSpec:
    base = SweepSpec(timing=TINY, max_prime=5000, events=10, host_cpus=2)
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


def test_sizes_per_axis():
    guests = _spec(ratios=(0.5, 1.0, 1.5, 2.0))
    assert [s.guests for s in guests.steps()] == [1, 2, 3, 4]
    assert [s.ratio for s in guests.steps()] == [0.5, 1.0, 1.5, 2.0]
    vcpus = _spec(axis="vcpus", workload="threads", guests=1, ratios=(0.5, 1.0, 2.0))
    assert [s.vcpus for s in vcpus.steps()] == [(1,), (2,), (4,)]
    memory = _spec(axis="memory", guests=2, cap_mb=256, ratios=(1.0, 1.5, 2.0))
    assert [s.memory_mb for s in memory.steps()] == [(128, 128), (192, 192), (256, 256)]
    assert all(s.cap_mb == 256 for s in memory.steps())


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
    ],
)
def test_bad_specs_are_usage_errors(kw, message):
    with pytest.raises(UsageError, match=message):
        _spec(**kw).check()


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


def test_l0_sweep_commits_every_step_with_its_samples(store):
    spec = _spec(ratios=(0.5, 1.0, 1.5))
    exp = _experiment(store, spec)
    seen = []
    SweepRunner(store, spec, local_factory(spec), level="L0", on_step=seen.append).execute(exp)
    assert [o.status for o in seen] == ["ok"] * 3
    rows = sweep_store.steps(store, exp)
    assert list(rows["guests"]) == [1, 2, 3] and set(rows["status"]) == {"ok"}
    samples = sweep_store.samples(store, list(rows["id"]))
    window = samples[samples["phase"] == "window"]
    assert len(window) == 3 * 3 and len(samples) == 3 * 4
    # Every step measured something (an interval may be empty on a busy machine).
    per_step = window.groupby("step_id")["transactions"].sum()
    assert len(per_step) == 3 and (per_step > 0).all() and (window["throughput"] >= 0).all()
    assert window["host_util"].between(0, 1).all()
    assert store.experiment(exp)["status"] == "ok"


def test_interrupted_sweep_resumes_at_its_step_without_redoing_committed_ones(store):
    spec = _spec(ratios=(0.5, 1.0, 1.5, 2.0))
    exp = _experiment(store, spec)

    def interrupt_after_second(outcome):
        if outcome.index == 1:
            raise KeyboardInterrupt

    runner = SweepRunner(store, spec, local_factory(spec), level="L0",
                         on_step=interrupt_after_second)  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        runner.execute(exp)
    assert store.experiment(exp)["status"] == "interrupted"
    before = sweep_store.steps(store, exp)
    assert list(before["step_index"]) == [0, 1]
    ran = []
    SweepRunner(store, spec, local_factory(spec), level="L0", on_step=ran.append).execute(exp)
    assert [o.index for o in ran] == [2, 3]
    after = sweep_store.steps(store, exp)
    assert list(after["step_index"]) == [0, 1, 2, 3] and set(after["status"]) == {"ok"}
    kept = after[after["step_index"] < 2]
    assert list(kept["id"]) == list(before["id"])
    assert list(kept["started_at"]) == list(before["started_at"])
    assert store.experiment(exp)["status"] == "ok"


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
    rows = sweep_store.steps(store, exp)
    assert list(zip(rows["step_index"], rows["status"], strict=True)) == [
        (0, "ok"), (1, "ok"), (2, "failed"),
    ]  # fmt: skip
    assert store.experiment(exp)["status"] == "failed"


def test_cli_sweep_and_show_json(cli, tmp_path):
    db = str(tmp_path / "s.db")
    res = cli("sweep", "--level", "L0", "--steps", "0.5,1,1.5,2", "--warmup", "0.5",
              "--window", "1.5", "--interval", "0.5", "--events", "10", "--max-prime", "5000",
              "--db", db)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("step ") == 4 and "Sweep 1" in res.stdout
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
    assert data["knee"] is None or set(data["knee"]) == {"ratio", "low", "high"}
    for fmt, marker in (("markdown", "| ratio |"), ("table", "ratio"), ("html", "<svg")):
        res = cli("sweep", "show", "1", "--format", fmt, "--db", db)
        assert res.returncode == 0 and marker in res.stdout, res.stderr


def test_cli_usage_errors_are_one_line(cli, tmp_path):
    db = str(tmp_path / "s.db")
    for args in (
        ("sweep", "--axis", "disks", "--level", "L0", "--db", db),
        ("sweep", "--steps", "one,two", "--level", "L0", "--db", db),
        ("sweep", "show", "latest", "--format", "yaml", "--db", db),
    ):
        res = cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.startswith("vmtax: error: ") and len(res.stderr.splitlines()) == 1
    res = cli("sweep", "show", "latest", "--db", db)
    assert res.returncode == 1 and "no sweep" in res.stderr


def test_cli_resume_runs_only_the_missing_steps(cli, tmp_path):
    db = str(tmp_path / "r.db")
    spec = _spec(ratios=(0.5, 1.0, 1.5))
    with Store.open(db) as store:
        exp = _experiment(store, spec)

        def stop_after_first(outcome):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            SweepRunner(store, spec, local_factory(spec), level="L0",
                        on_step=stop_after_first).execute(exp)  # fmt: skip
    res = cli("sweep", "--resume", str(exp), "--db", db)
    assert res.returncode == 0, res.stderr
    assert "step 1/" not in res.stderr and "step 2/3" in res.stderr and "step 3/3" in res.stderr
    with Store.open(db) as store:
        rows = sweep_store.steps(store, exp)
        assert list(rows["step_index"]) == [0, 1, 2] and set(rows["status"]) == {"ok"}
        assert store.experiment(exp)["status"] == "ok"
    res = cli("sweep", "--resume", "999", "--db", db)
    assert res.returncode == 1 and "no experiment 999" in res.stderr


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
            "--db", db]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env)  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("step 1/3"):
            proc.send_signal(signal.SIGTERM)  # during step 2
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    assert "vmtax: error: interrupted" in rest
    with Store.open(db) as store:
        assert store.experiment(1)["status"] == "interrupted"
        assert list(sweep_store.steps(store, 1)["step_index"]) == [0]
    res = subprocess.run([vmtax, "sweep", "--resume", "1", "--db", db], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    with Store.open(db) as store:
        assert list(sweep_store.steps(store, 1)["step_index"]) == [0, 1, 2]
