"""`vmtax import FILE`: a saved agent stream from the real agent, stored as an experiment;
validated as a live run's stream is, whole runs kept, a cut-off stream reported."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from vmtax.store import Store


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """`vmtax-probe run syscall --runs 3 --iterations 500 > FILE`, by the built agent."""
    agent = os.environ.get("VMTAX_PROBE") or "vmtax-probe"
    path = tmp_path_factory.mktemp("stream") / "syscall.jsonl"
    with path.open("wb") as fh:
        subprocess.run([agent, "run", "syscall", "--runs", "3", "--iterations", "500"],
                       stdout=fh, check=True, timeout=120)  # fmt: skip
    return path


def test_a_saved_stream_becomes_an_experiment_with_every_sample(saved, cli, tmp_path):
    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(saved), "--label", "note=saved", "--db", db)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("experiment 1")
    with Store.open(db) as store:
        runs = store.runs(["exp=1"])
        assert list(runs["status"]) == ["ok"] * 3 and set(runs["probe"]) == {"syscall"}
        assert runs["labels"].iloc[0]["note"] == "saved" and set(runs["level"]) == {"L0"}
        samples = store.samples(runs["run_id"])
        assert all(v.size == 500 and np.isfinite(v).all() for v in samples.values())
    # It compares and reports like any experiment.
    assert cli("report", "exp=1", "-o", str(tmp_path / "r.md"), "--format", "markdown",
               "--resamples", "200", "--db", db).returncode == 0  # fmt: skip


def test_a_cut_off_stream_keeps_its_whole_runs_and_says_what_was_lost(saved, cli, tmp_path):
    lines = saved.read_text().splitlines(keepends=True)
    summaries = [i for i, ln in enumerate(lines) if '"type":"run_summary"' in ln]
    cut = tmp_path / "cut.jsonl"
    # Cut halfway through the last run: two whole runs, one without its summary, no end.
    cut.write_text("".join(lines[: summaries[1] + 2]))
    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(cut), "--db", db)
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and "truncated" in res.stderr
    assert "2 whole runs kept, 1 lost" in res.stderr
    with Store.open(db) as store:
        runs = store.runs(["exp=1"])
        assert sorted(runs["status"]) == ["lost", "ok", "ok"]
        assert store.experiment(1)["status"] == "failed"


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "not a vmtax-probe stream: no output from the agent"),
        ('{"type":"nope"}\n', "not a vmtax-probe stream: line 1: invalid record"),
    ],
)
def test_what_is_not_a_stream_is_one_line_and_stores_nothing(content, message, cli, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    db = tmp_path / "v.db"
    res = cli("import", str(bad), "--db", str(db))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and message in res.stderr
    assert not db.exists()
    res = cli("import", str(tmp_path / "missing.jsonl"), "--db", str(db))
    assert res.returncode == 2 and "cannot read" in res.stderr


def test_the_same_stream_twice_is_said_and_not_stored_twice(saved, cli, tmp_path):
    db = f"sqlite:///{tmp_path / 'd.db'}"
    assert cli("import", str(saved), "--db", db).returncode == 0
    again = cli("import", str(saved), "--db", db)
    assert again.returncode == 0
    assert "already experiment 1" in again.stderr and again.stderr.count("\n") == 1
    assert again.stdout.strip() == "experiment 1"
    with Store.open(db) as store:
        assert len(store.experiments()) == 1
    forced = cli("import", str(saved), "--allow-duplicate", "--db", db)
    assert forced.returncode == 0 and forced.stdout.strip().endswith("experiment 2")
    # Another run of the same probe (other samples) is another stream: imported, no word.
    agent = os.environ.get("VMTAX_PROBE") or "vmtax-probe"
    other = tmp_path / "other.jsonl"
    with other.open("wb") as fh:
        subprocess.run([agent, "run", "syscall", "--runs", "3", "--iterations", "500"],
                       stdout=fh, check=True, timeout=120)  # fmt: skip
    fresh = cli("import", str(other), "--db", db)
    assert fresh.returncode == 0 and "already" not in fresh.stderr
    assert fresh.stdout.strip().endswith("experiment 3")
