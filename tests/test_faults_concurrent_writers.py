"""Several `vmtax run` controllers writing to one store at the same time: eight on a real
PostgreSQL server (no run lost or stored twice, no deadlock), and several on one SQLite file
(each waits for the write lock or stops with one line; the file is never corrupted)."""

from __future__ import annotations

import multiprocessing
import re
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from test_fleet_netns import vmtax_cmd, vmtax_env

pytestmark = pytest.mark.slow

SUITE = """
name = "writers"
[defaults]
runs = {runs}
iterations = 2000
duration = 0.05
warmup = 10
timeout = 60
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
"""


def _suite(tmp_path: Path, runs: int) -> Path:
    path = tmp_path / "writers.toml"
    path.write_text(SUITE.format(runs=runs))
    return path


def _start(n: int, suite: Path, db: str) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [
                *vmtax_cmd(),
                "run",
                "--suite",
                str(suite),
                "--db",
                db,
                "--seed",
                str(i),
                "--label",
                f"controller=c{i}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=vmtax_env(),
        )  # fmt: skip
        for i in range(n)
    ]


def _finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a controller hung: deadlock or lock wait without end") from None
        out.append((p.returncode, o, e))
    return out


def _exp_id(stdout: str) -> int:
    m = re.search(r"^experiment (\d+)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1))


def test_eight_controllers_write_to_one_postgresql_at_once(postgres_url, tmp_path):
    from vmtax.store import Store

    runs = 3
    # The database is new: the eight also race to create the schema.
    results = _finish(_start(8, _suite(tmp_path, runs), postgres_url), timeout=300)
    for code, _, err in results:
        assert code == 0, err[-2000:]
    ids = [_exp_id(out) for _, out, _ in results]
    assert len(set(ids)) == 8
    with Store.open(postgres_url, read_only=True) as store:
        frame = store.runs()
        experiments = store.experiments()
    assert sorted(experiments["experiment_id"]) == sorted(ids)
    assert (experiments["status"] == "ok").all()
    assert len(frame) == 8 * 2 * runs and (frame["status"] == "ok").all()
    assert not frame.duplicated(["experiment_id", "plan_index", "run_index"]).any()
    assert frame["run_id"].is_unique
    # Each experiment holds its own controller's runs only.
    for exp_id, group in frame.groupby("experiment_id"):
        labels = {lab["controller"] for lab in group["labels"]}
        assert len(labels) == 1, (exp_id, labels)
    assert len({lab["controller"] for lab in frame["labels"]}) == 8


def _integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def test_controllers_on_one_sqlite_file_wait_or_say_so_in_one_line(tmp_path):
    from vmtax.store import Store

    path = tmp_path / "shared.db"
    db = f"sqlite:///{path}"
    runs = 3
    results = _finish(_start(3, _suite(tmp_path, runs), db), timeout=300)
    finished = []
    for code, out, err in results:
        if code == 0:
            finished.append(_exp_id(out))
        else:  # allowed: one clear line about the lock, nothing else
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("vmtax: error: "), err
            assert "locked" in lines[0], lines[0]
    assert finished, "no controller finished"
    assert _integrity(path) == "ok"
    with Store.open(db, read_only=True) as store:
        frame = store.runs()
    for exp_id in finished:
        mine = frame[frame["experiment_id"] == exp_id]
        assert len(mine) == 2 * runs and (mine["status"] == "ok").all()
    assert not frame.duplicated(["experiment_id", "plan_index", "run_index"]).any()


def _open_at_once(path: str, barrier: multiprocessing.synchronize.Barrier, out) -> None:
    from vmtax.store import Store

    barrier.wait()
    try:
        Store.open(f"sqlite:///{path}").close()
        out.put("ok")
    except Exception as exc:  # noqa: BLE001 - the test reports what each opener met
        out.put(str(exc))


def test_controllers_creating_one_new_sqlite_file_at_once_all_find_one_schema(tmp_path):
    # Four controllers start together on a file that does not exist yet. Each creates or
    # upgrades the schema in one transaction under the write lock, so none sees another's
    # tables without their version ("not a vmtax store") or creates them twice.
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):
        path = tmp_path / f"new{attempt}.db"
        barrier, out = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(str(path), barrier, out))
                 for _ in range(4)]  # fmt: skip
        for proc in procs:
            proc.start()
        results = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert results == ["ok"] * 4, results
        assert _integrity(path) == "ok"


def test_a_sqlite_controller_waits_for_a_short_lock_and_reports_a_long_one(tmp_path):
    """Another writer holds the SQLite write lock: for 1 s the controller waits and then
    stores everything; for longer than the busy timeout (5 s) it stops with one line and
    the file stays intact."""
    from vmtax.store import Store

    path = tmp_path / "locked.db"
    db = f"sqlite:///{path}"
    Store.open(db).close()  # the schema exists
    suite = _suite(tmp_path, 1)

    def hold(seconds: float, started: threading.Event, done: threading.Event | None = None):
        """Hold the write lock for ``seconds``, or until ``done`` is set: the long hold
        lasts as long as the controller does, however slowly a busy machine starts it."""
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")  # the write lock, as a writing process holds it
        started.set()
        if done is None:
            time.sleep(seconds)
        else:
            done.wait(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    started = threading.Event()
    holder = threading.Thread(target=hold, args=(1.0, started))
    holder.start()
    started.wait()
    t0 = time.monotonic()
    cmd = [*vmtax_cmd(), "run", "--suite", str(suite), "--db", db]
    short = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=vmtax_env())
    holder.join()
    assert short.returncode == 0, short.stderr
    assert time.monotonic() - t0 >= 1.0  # it waited
    started, done = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold, args=(150.0, started, done))
    holder.start()
    started.wait()
    try:
        long = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=vmtax_env())
    finally:
        done.set()
    lines = long.stderr.strip().splitlines()
    assert long.returncode == 1 and len(lines) == 1, long.stderr
    assert lines[0].startswith("vmtax: error: ") and "locked by another process" in lines[0]
    holder.join()
    assert _integrity(path) == "ok"
    with Store.open(db, read_only=True) as store:
        assert len(store.runs()) == 2  # the first controller's runs, nothing from the second
