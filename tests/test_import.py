"""`vmtax import FILE`: a saved agent stream from the real agent, stored as an experiment;
validated as a live run's stream is, whole runs kept, a cut-off stream reported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from test_fleet_netns import vmtax_cmd, vmtax_env
from vmtax import infile
from vmtax.store import Store

pytestmark = pytest.mark.fast


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


def _edited(saved: Path, out: Path, edit) -> Path:
    """``saved`` with ``edit(record)`` applied to every record (it returns the new record,
    or a string to write as the line instead)."""
    lines = []
    for line in saved.read_text().splitlines():
        rec = edit(json.loads(line))
        lines.append(rec if isinstance(rec, str) else json.dumps(rec))
    out.write_text("\n".join(lines) + "\n")
    return out


def test_only_the_run_whose_count_is_wrong_is_lost(saved, cli, tmp_path):
    def wrong_count(rec):
        if rec["type"] == "run_summary" and rec["run"] == 0:
            rec["n"] += 1
        return rec

    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(_edited(saved, tmp_path / "n.jsonl", wrong_count)), "--db", db)
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert "run 0 summary says n=501 but 500 samples arrived" in res.stderr
    assert "2 whole runs kept, 1 lost" in res.stderr
    with Store.open(db) as store:
        runs = store.runs(["exp=1"]).sort_values("run_index")
        assert list(runs["status"]) == ["lost", "ok", "ok"]


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "-3.5"])
def test_a_sample_that_is_not_a_finite_non_negative_number_loses_its_run(bad, saved, cli,
                                                                        tmp_path):  # fmt: skip
    def poisoned(rec):
        if rec["type"] == "samples" and rec["run"] == 1 and not rec["warmup"]:
            return json.dumps(rec).replace('"values": [', f'"values": [{bad}, ', 1)
        return rec

    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(_edited(saved, tmp_path / "p.jsonl", poisoned)), "--db", db)
    assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
    assert "samples are finite and not negative" in res.stderr
    assert "2 whole runs kept, 1 lost" in res.stderr
    with Store.open(db) as store:
        runs = store.runs(["exp=1"]).sort_values("run_index")
        assert list(runs["status"]) == ["ok", "lost", "ok"]
        assert all(np.isfinite(v).all() and (v >= 0).all()
                   for v in store.samples(runs["run_id"]).values())  # fmt: skip
    # What is stored reports (the poisoned stream ended in a traceback there).
    out = tmp_path / "r.md"
    rep = cli("report", "exp=1", "-o", str(out), "--format", "markdown", "--resamples", "200",
              "--db", db)  # fmt: skip
    assert rep.returncode == 0, rep.stderr


def test_a_summary_that_disagrees_with_its_samples_loses_its_run(saved, cli, tmp_path):
    def edited_mean(rec):
        if rec["type"] == "run_summary" and rec["run"] == 2:
            rec["mean"] *= 1.5
        return rec

    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(_edited(saved, tmp_path / "m.jsonl", edited_mean)), "--db", db)
    assert res.returncode == 1 and "run 2: its summary's mean is" in res.stderr
    assert "2 whole runs kept, 1 lost" in res.stderr
    with Store.open(db) as store:
        runs = store.runs(["exp=1"])
        ok = runs[runs["status"] == "ok"]
        assert sorted(ok["run_index"]) == [0, 1]
        samples = store.samples(ok["run_id"])
        # what `results show` prints (the summaries) is what the samples say
        assert all(np.isclose(r.mean, samples[r.run_id].mean(), rtol=1e-9)
                   for r in ok.itertuples())  # fmt: skip


def test_an_unreadable_line_between_runs_loses_the_next_run_only(saved, cli, tmp_path):
    lines = saved.read_text().splitlines(keepends=True)
    first_summary = next(i for i, ln in enumerate(lines) if '"type":"run_summary"' in ln)
    torn = tmp_path / "torn.jsonl"
    # run 1's first samples record torn in half: run 1 is lost, runs 0 and 2 are whole
    lines[first_summary + 1] = lines[first_summary + 1][:50] + "\n"
    torn.write_text("".join(lines))
    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(torn), "--db", db)
    assert res.returncode == 1 and "2 whole runs kept, 1 lost" in res.stderr, res.stderr
    with Store.open(db) as store:
        runs = store.runs(["exp=1"]).sort_values("run_index")
        assert list(runs["status"]) == ["ok", "lost", "ok"]


def test_a_stream_without_a_whole_run_stores_nothing(saved, cli, tmp_path):
    def all_wrong(rec):
        if rec["type"] == "run_summary":
            rec["n"] = 7
        return rec

    db = tmp_path / "v.db"
    res = cli("import", str(_edited(saved, tmp_path / "w.jsonl", all_wrong)), "--db", str(db))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "nothing to import: no whole run" in res.stderr
    assert not db.exists()


def test_several_streams_are_one_experiment_grouped_by_level_and_labels(saved, cli, tmp_path):
    agent = os.environ.get("VMTAX_PROBE") or "vmtax-probe"
    cpuid = tmp_path / "cpuid.jsonl"
    with cpuid.open("wb") as fh:
        subprocess.run([agent, "run", "cpuid", "--runs", "2", "--iterations", "300"],
                       stdout=fh, check=True, timeout=120)  # fmt: skip

    def header(boot: str, vendor: str | None = None):
        def edit(rec):
            if rec["type"] == "header":
                rec["boot_id"] = boot
                if vendor:  # as measured on a machine under another hypervisor
                    rec["env"]["hypervisor"] = {"detected": True, "vendor": vendor, "evidence": []}
            return rec

        return edit

    first = _edited(saved, tmp_path / "first.jsonl", header("boot-a"))
    second = _edited(cpuid, tmp_path / "second.jsonl", header("boot-b"))
    third = _edited(saved, tmp_path / "third.jsonl", header("boot-c", "Xen"))
    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(first), str(second), str(third), "--label", "note=x", "--db", db)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("experiment 1")
    with Store.open(db) as store:
        runs = store.runs()
        assert set(runs["experiment_id"]) == {1} and (runs["status"] == "ok").all()
        assert runs["config"].nunique() == 2
        hypervisor = runs["labels"].map(lambda lb: lb["host_hypervisor"])
        kvm, xen = runs[hypervisor == "kvm"], runs[hypervisor == "xen"]
        # the first two streams, one configuration of two boots: each stream is its own
        # plan index, and its runs are in the boot its header names
        assert kvm["config"].nunique() == 1 and len(kvm) == 5
        per_stream = kvm.groupby("plan_index").agg({"probe": set, "boot": set}).to_dict("index")
        assert per_stream == {0: {"probe": {"syscall"}, "boot": {"boot-a"}},
                              1: {"probe": {"cpuid"}, "boot": {"boot-b"}}}  # fmt: skip
        assert len(xen) == 3 and set(xen["plan_index"]) == {2} and set(xen["boot"]) == {"boot-c"}
        assert all(lb["note"] == "x" for lb in runs["labels"])
    # The same streams again are held already; the same stream twice in one call is refused.
    again = cli("import", str(first), str(second), str(third), "--db", db)
    assert again.returncode == 0 and "already experiment 1" in again.stderr
    twice = cli("import", str(first), str(first), "--db", db)
    assert twice.returncode == 2 and "are the same stream" in twice.stderr


def _wait_for(proc: subprocess.Popen, text: str, timeout: float = 120.0) -> str:
    """stderr of ``proc`` up to the line containing ``text`` (the process is left running)."""
    seen = ""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if text in line or not line:
            break
    assert text in seen, seen
    return seen


@pytest.mark.parametrize(
    "command, sig",
    [
        (["import", "{fifo}"], signal.SIGTERM),
        (["import", "{fifo}"], signal.SIGINT),
        (["run", "--suite", "{fifo}", "--probe", "cpuid"], signal.SIGTERM),
    ],
)
def test_a_fifo_without_a_writer_says_what_it_waits_for_and_ends_on_a_signal(
    command, sig, tmp_path
):
    fifo = tmp_path / "in.toml"
    os.mkfifo(fifo)
    db = tmp_path / "v.db"
    args = [a.replace("{fifo}", str(fifo)) for a in command]
    proc = subprocess.Popen([*vmtax_cmd(), *args, "--db", str(db)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=vmtax_env())  # fmt: skip
    try:
        said = _wait_for(proc, "waiting for a writer to open")
        assert said.strip().splitlines() == [
            f"vmtax: waiting for a writer to open {fifo} (Ctrl-C to stop)"
        ]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip().splitlines() == ["vmtax: error: interrupted"]
    assert out == "" and not db.exists()


def test_a_fifo_is_read_as_its_writer_writes_it(saved, cli, tmp_path):
    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    lines = saved.read_bytes().splitlines(keepends=True)

    def writer() -> None:
        with fifo.open("wb") as fh:  # returns once the import has opened it
            for i, line in enumerate(lines):
                fh.write(line)
                if i == 3:
                    fh.flush()
                    time.sleep(1.5)

    thread = threading.Thread(target=writer)
    thread.start()
    db = f"sqlite:///{tmp_path / 'v.db'}"
    res = cli("import", str(fifo), "--db", db)
    thread.join()
    assert res.returncode == 0, res.stderr
    # The pause half way is said once; the wait for the writer only if the import opened
    # the FIFO before the writer did (thread timing), and the subprocess test covers it.
    said = res.stderr.splitlines()
    assert said[-1] == (
        f"vmtax: waiting for data on FIFO {fifo} (it ends when its writer closes it; "
        "Ctrl-C to stop)"
    )
    assert set(said[:-1]) <= {f"vmtax: waiting for a writer to open {fifo} (Ctrl-C to stop)"}
    with Store.open(db) as store:
        assert list(store.runs(["exp=1"])["status"]) == ["ok"] * 3


@pytest.mark.parametrize("after", [3600.0, 0.0])
def test_a_wait_is_said_once_it_has_lasted_as_long_as_asked(after, tmp_path):
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    said: list[str] = []

    def write_later() -> None:
        time.sleep(0.3)
        with fifo.open("wb") as fh:
            fh.write(b"a\nb")

    thread = threading.Thread(target=write_later)
    thread.start()
    with infile.lines(fifo, say=said.append, after=after) as got:
        assert list(got) == [b"a\n", b"b"]
    thread.join()
    if after:  # an hour: the wait of 0.3 s is not said
        assert said == []
    else:
        assert said[0] == f"vmtax: waiting for a writer to open {fifo} (Ctrl-C to stop)"
        assert len(said) <= 2 and all("waiting for" in line for line in said)
