"""`vmtax run` end to end with the real agent: the table, the store, `results show`, Ctrl-C,
SIGTERM, SIGKILL and `--resume`, and a PostgreSQL store."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vmtax.plan.plan import Plan
from vmtax.store import Store
from vmtax.targets.base import find_agent

TINY = """
name = "tiny"
[defaults]
runs = 2
iterations = 2000
duration = 0.05
warmup = 10
timeout = 30
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
[[probes]]
probe = "cpu"
iterations = 20
"""


@pytest.fixture(scope="module")
def agent() -> str:
    return str(find_agent())


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return str(path)


@pytest.fixture
def cli_agent(agent: str) -> str:
    return agent


def vmtax(*args: str, agent: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from vmtax.entry import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(agent),
        **kw,
    )


def vmtax_bg(*args: str, agent: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from vmtax.entry import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(agent),
    )


def _env(agent: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}
    env["VMTAX_PROBE"] = agent
    return env


def exp_id_of(stdout: str) -> int:
    m = re.search(r"^experiment (\d+)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1))


def table_rows(stdout: str) -> dict[str, list[str]]:
    """Probe -> the cells of its row in the printed study-A table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] and cells[0] != "Probe":
            rows[cells[0]] = cells
    return rows


@pytest.mark.fast
def test_run_prints_the_table_and_results_show_the_same_numbers(tmp_path, tiny, cli):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    run = cli("run", "--suite", tiny, "--db", db, "--seed", "5")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""  # no progress bar or chatter when stderr is not a terminal
    exp = exp_id_of(run.stdout)
    assert run.stdout.rstrip().endswith(f"experiment {exp}")
    rows = table_rows(run.stdout)
    assert set(rows) == {"cpuid", "syscall", "cpu"}
    assert all(r[-1] == "2" for r in rows.values())  # n runs
    assert rows["cpu"][1].endswith("events/s")  # throughput where the probe has one
    assert rows["cpuid"][1] == "-"

    show = cli("results", "show", str(exp), "--db", db)
    assert show.returncode == 0, show.stderr
    assert table_rows(show.stdout) == rows

    # The table's numbers are the runs' own: recompute the cpuid mean from the raw samples.
    with Store.open(db) as store:
        runs = store.runs([f"exp={exp}"])
        assert len(runs) == 6 and set(runs["status"]) == {"ok"}
        cpuid = runs[runs["probe"] == "cpuid"]
        samples = store.samples(cpuid["run_id"])
        run_means = [samples[i].mean() for i in cpuid["run_id"]]
        exp_row = store.experiment(exp)
    assert np.allclose(run_means, cpuid["mean"], rtol=1e-9)
    printed = float(rows["cpuid"][3].replace(",", ""))
    assert printed == pytest.approx(np.mean(run_means), rel=1e-3)
    assert exp_row["status"] == "ok"
    assert exp_row["plan"]["seed"] == 5
    config = exp_row["configurations"][0]
    assert config["level"] == "L0"
    assert "host_hypervisor" in config["labels"]


@pytest.mark.fast
def test_labels_level_and_probe_selection_reach_the_store(tmp_path, tiny, cli):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    run = cli(
        "run",
        "--suite",
        tiny,
        "--db",
        db,
        "--probe",
        "syscall",
        "--runs",
        "3",
        "--level",
        "L1",
        "--label",
        "note=unit-test",
    )
    assert run.returncode == 0, run.stderr
    with Store.open(db) as store:
        runs = store.runs(["exp=latest"])
    assert list(runs["probe"].unique()) == ["syscall"]
    assert len(runs) == 3
    assert set(runs["level"]) == {"L1"}
    assert runs["labels"].iloc[0] == {"note": "unit-test"}  # no host_* labels at a given level


@pytest.mark.fast
def test_param_reaches_the_agent_of_every_probe_that_has_it(tmp_path, cli):
    # --param was in --help and the README but not an option ("No such option: --param").
    db = f"sqlite:///{tmp_path / 'p.db'}"
    suite = tmp_path / "p.toml"
    suite.write_text(
        "name = 'p'\n[defaults]\nruns = 1\niterations = 20\nduration = 0.05\n"
        "[[probes]]\nprobe = 'timer'\n[[probes]]\nprobe = 'cpuid'\n"
    )
    run = cli("run", "--suite", str(suite), "--db", db, "--param", "delay_us=250")
    assert run.returncode == 0, run.stderr
    with Store.open(db) as store:
        entries = store.experiment(1)["plan"]["entries"]
    assert entries["timer"]["params"] == {"delay_us": 250}
    assert entries["cpuid"]["params"] == {}  # cpuid has no delay_us: left alone


@pytest.mark.slow
def test_sigkill_mid_suite_then_resume_completes_without_duplicates(tmp_path, agent, cli):
    db = f"sqlite:///{tmp_path / 'k.db'}"
    proc = vmtax_bg(
        "run",
        "--suite",
        "full",
        "--runs",
        "1",
        "--duration",
        "0.2",
        "--seed",
        "11",
        "--db",
        db,
        agent=agent,
    )
    stored = _wait_for_ok_runs(db, 3, proc)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: only the store's commits count
    proc.wait(timeout=10)

    with Store.open(db) as store:
        exp = int(store.latest_experiment_id())
        before = store.runs([f"exp={exp}"])
        assert store.experiment(exp)["status"] == "running"  # nobody could mark it yet
        steps = len(Plan.from_dict(store.experiment(exp)["plan"]).steps)
    ok_before = before[before["status"] == "ok"]
    assert len(ok_before) >= stored
    assert len(ok_before) < steps

    listing = cli("results", "list", "--db", db)
    assert listing.returncode == 0, listing.stderr
    assert re.search(rf"^\W*{exp}\W.*interrupted", listing.stdout, re.M), listing.stdout
    with Store.open(db) as store:
        assert store.experiment(exp)["status"] == "interrupted"

    resume = cli("run", "--resume", str(exp), "--db", db)
    assert resume.returncode == 0, resume.stderr
    assert exp_id_of(resume.stdout) == exp
    with Store.open(db) as store:
        after = store.runs([f"exp={exp}"])
        status = store.experiment(exp)["status"]
    ok = after[after["status"] == "ok"]
    assert status == "ok"
    assert len(ok) == steps
    assert Counter(ok["plan_index"]).most_common(1)[0][1] == 1  # no plan item twice
    # The runs stored before the kill are the same rows, untouched.
    assert set(ok_before["run_id"]) <= set(ok["run_id"])


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_mark_the_experiment_interrupted(tmp_path, agent, sig):
    db = f"sqlite:///{tmp_path / 'i.db'}"
    proc = vmtax_bg(
        "run", "--suite", "full", "--runs", "1", "--duration", "0.2", "--db", db, agent=agent
    )
    _wait_for_ok_runs(db, 2, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmtax: error: interrupted"), err
    with Store.open(db) as store:
        exp = int(store.latest_experiment_id())
        assert store.experiment(exp)["status"] == "interrupted"
        runs = store.runs([f"exp={exp}"])
    assert (runs["status"] == "ok").sum() >= 2
    assert f"--resume {exp}" in lines[0]


@pytest.mark.slow
def test_run_on_postgresql(postgres_url, tiny, cli):
    run = cli("run", "--suite", tiny, "--db", postgres_url, "--probe", "cpuid")
    assert run.returncode == 0, run.stderr
    exp = exp_id_of(run.stdout)
    show = cli("results", "show", str(exp), "--db", postgres_url)
    assert show.returncode == 0, show.stderr
    assert table_rows(show.stdout) == table_rows(run.stdout)
    assert "pg-secret" not in run.stdout + run.stderr + show.stdout
    with Store.open(postgres_url) as store:
        command = store.experiment(exp)["command"]
    assert command[:2] == ["vmtax", "run"]
    assert "pg-secret" not in " ".join(command)  # the stored command line has no password


@pytest.mark.fast
def test_results_list_and_export(tmp_path, tiny, cli):
    db = f"sqlite:///{tmp_path / 'e.db'}"
    run = cli("run", "--suite", tiny, "--db", db, "--probe", "cpuid")
    exp = exp_id_of(run.stdout)
    listing = cli("results", "list", "--db", db)
    assert re.search(rf"^\W*{exp}\W.*tiny.*ok.*\b2 ok\b", listing.stdout, re.M), listing.stdout
    out = tmp_path / "runs.csv"
    export = cli("results", "export", str(exp), "--format", "csv", "-o", str(out), "--db", db)
    assert export.returncode == 0, export.stderr
    assert out.stat().st_size > 0


@pytest.mark.fast
def test_env_and_probes_commands(cli):
    env = cli("env", "--format", "json")
    assert env.returncode == 0, env.stderr
    assert '"hypervisor"' in env.stdout
    probes = cli("probes")
    assert probes.returncode == 0, probes.stderr
    for name in ("cpuid", "syscall", "memory"):
        assert name in probes.stdout


@pytest.mark.fast
def test_every_command_help_has_an_example(cli):
    for args in (
        ["run"],
        ["env"],
        ["probes"],
        ["results", "list"],
        ["results", "show"],
        ["results", "export"],
    ):
        out = cli(*args, "--help")
        assert out.returncode == 0
        assert "Example: vmtax" in out.stdout, args


def _wait_for_ok_runs(db: str, n: int, proc: subprocess.Popen, limit: float = 90) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vmtax ended early: {proc.stderr.read() if proc.stderr else ''}")
        if Path(db.removeprefix("sqlite:///")).exists():
            try:
                with Store.open(db, read_only=True) as store:
                    runs = store.runs()
                count = int((runs["status"] == "ok").sum())
                if count >= n:
                    return count
            except Exception:  # noqa: BLE001 - the schema may not be there yet
                pass
        time.sleep(0.1)
    pytest.fail(f"no {n} runs stored within {limit} s")


@pytest.mark.fast
def test_run_reports_of_two_stores_never_collide(tmp_path, monkeypatch, cli):
    # Both stores' first experiment is 1: with vmtax-report-<id>.html the second run
    # overwrote the first one's report without a word.
    monkeypatch.delenv("VMTAX_RUN_REPORT", raising=False)
    monkeypatch.chdir(tmp_path)
    names = []
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        db = f"sqlite:///{tmp_path / sub / 'lab.db'}"
        r = cli("run", "--probe", "cpuid", "--runs", "1", "--duration", "0.05", "--db", db)
        assert r.returncode == 0, r.stderr
        found = re.search(r"^report: (vmtax-report-lab-[0-9a-f]{6}-1\.html) ", r.stdout, re.M)
        assert found, r.stdout
        names.append(found.group(1))
    assert names[0] != names[1]
    assert sorted(p.name for p in tmp_path.glob("*.html")) == sorted(names)
    # The same store made again at that URL: the old file is replaced, and that is said.
    (tmp_path / "a" / "lab.db").unlink()
    db = f"sqlite:///{tmp_path / 'a' / 'lab.db'}"
    r = cli("run", "--probe", "cpuid", "--runs", "1", "--duration", "0.05", "--db", db)
    assert f"vmtax: replaced the earlier {names[0]}" in r.stderr


@pytest.mark.fast
def test_a_run_that_fails_as_a_whole_prints_only_its_error(tmp_path, monkeypatch, cli):
    # It also printed "report not written: no completed runs match the selectors" before.
    monkeypatch.delenv("VMTAX_RUN_REPORT", raising=False)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'f.db'}"
    r = cli("run", "--probe", "io", "--runs", "1", "--param", "dir=/nonexistent", "--db", db)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [r.stderr.strip()], r.stderr
    assert "cannot create a file in /nonexistent" in r.stderr
    assert not list(tmp_path.glob("*.html"))
