"""A SQLite store's disk fills up in the middle of `vmtax run`: one clear line, the file
intact (PRAGMA integrity_check), every committed run kept, and once there is room again
`--resume` adds only the missing runs. The disk is a real, small tmpfs (needs root)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from test_fleet_netns import vmtax_cmd, vmtax_env
from vmtax.store import Store

pytestmark = pytest.mark.slow

SUITE = """
name = "disk"
seed = 4
[defaults]
runs = 40
iterations = 100000
duration = 0.05
warmup = 10
timeout = 60
[[probes]]
probe = "cpuid"
"""


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs and needs root (scripts/test runs as root)")
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)],
                   check=True)  # fmt: skip
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_sqlite_disk_fills_mid_run_then_resume(small_disk, tmp_path):
    path = small_disk / "vmtax.db"
    db = f"sqlite:///{path}"
    Store.open(db).close()
    free = os.statvfs(small_disk)
    room = free.f_bavail * free.f_frsize
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * max(0, room - 96 * 1024))  # leave ~96 KiB: some runs fit
    suite = tmp_path / "disk.toml"
    suite.write_text(SUITE)
    proc = subprocess.run([*vmtax_cmd(), "run", "--suite", str(suite), "--db", db],
                          capture_output=True, text=True, timeout=300, env=vmtax_env())  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("vmtax: error: ") and "disk is full" in lines[0], lines[0]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Store.open(db, read_only=True) as store:
        before = store.runs()
        samples = store.samples(before["run_id"])
    ok = before[before["status"] == "ok"]
    assert 1 <= len(ok) < 40, len(ok)  # some runs were committed before the disk filled
    assert all(len(samples[r.run_id]) == r.n for r in ok.itertuples())  # each one whole
    exp = int(before["experiment_id"].iloc[0])
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    again = [*vmtax_cmd(), "run", "--resume", str(exp), "--db", db]
    resume = subprocess.run(again, capture_output=True, text=True, timeout=300, env=vmtax_env())
    assert resume.returncode == 0, resume.stderr[-3000:]
    with Store.open(db, read_only=True) as store:
        after = store.runs()
        status = store.experiment(exp)["status"]
    ok_after = after[after["status"] == "ok"]
    assert status == "ok" and len(ok_after) == 40
    assert set(ok["run_id"]) <= set(ok_after["run_id"])  # committed runs kept as they were
    assert not ok_after.duplicated(["plan_index", "run_index"]).any()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
