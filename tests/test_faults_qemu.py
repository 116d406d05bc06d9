"""A QEMU guest SIGKILLed in the middle of `vmtax run --levels L0,L1`: the L1 runs already
committed are kept, L1 is reported in one line, L0 is measured, and `--resume` boots a new
guest for L1's missing runs only. Two TCG guest boots."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_fleet_netns import vmtax_cmd, vmtax_env
from vmtax.store import Store

pytestmark = pytest.mark.slow

# halt: each iteration sleeps (10 ms here), so a run lasts its 0.3 s, long enough to kill the
# guest between two of L1's, while the guest's one vCPU (seed-a-reserved) idles instead of
# spinning: with cpuid and two vCPUs a boot the test took 36 CPU seconds, against 28.5
# (2 cores, load average about 5).
SUITE = """
name = "guest-kill"
seed = 2
[defaults]
runs = 10
iterations = 100000
duration = 0.3
warmup = 10
timeout = 60
[[probes]]
probe = "halt"
params = { sleep_us = 10000 }
"""


def _descendants(pid: int) -> list[int]:
    # By parent pid from /proc/*/stat: a thread's children are not in the main task's list.
    parent: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            parent.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parent.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _qemu_of(pid: int) -> list[int]:
    found = []
    for p in _descendants(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{p}/comm").read_text().startswith("qemu-system"):
                found.append(p)
    return found


def _runs(db: str):
    try:
        with Store.open(db, read_only=True) as store:
            return store.runs()
    except Exception:
        return None


def test_qemu_guest_sigkilled_mid_run(tmp_path):
    db = f"sqlite:///{tmp_path / 'guest.db'}"
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE)
    env = dict(vmtax_env(), VMTAX_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [*vmtax_cmd(), "run", "--levels", "L0,L1", "--accel", "tcg", "--suite", str(suite),
         "--boots", "1", "--preset", "seed-a-reserved", "--db", db],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "L1 never stored a run"
            runs = _runs(db)
            if runs is not None and ((runs["level"] == "L1") & (runs["status"] == "ok")).any():
                break
            time.sleep(0.2)
        guests = _qemu_of(proc.pid)
        assert guests, "no QEMU process under vmtax"
        for g in guests:
            os.kill(g, signal.SIGKILL)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("vmtax: error: ") and ("L1" in lines[0] or "qemu" in lines[0])
    before = _runs(db)
    ok = before[before["status"] == "ok"]
    assert (ok["level"] == "L0").sum() == 10  # the other level was measured
    assert 1 <= (ok["level"] == "L1").sum() < 10  # L1's committed runs are kept
    exp = int(re.search(r"\[experiment (\d+)\]", err).group(1))
    resume = subprocess.run([*vmtax_cmd(), "run", "--resume", str(exp), "--db", db],
                            capture_output=True, text=True, timeout=900, env=env)  # fmt: skip
    assert resume.returncode == 0, resume.stderr[-3000:]
    after = _runs(db)
    ok_after = after[after["status"] == "ok"]
    assert len(ok_after) == 20 and set(ok["run_id"]) <= set(ok_after["run_id"])
    new = ok_after[~ok_after["run_id"].isin(ok["run_id"])]
    assert set(new["level"]) == {"L1"}  # only the killed level's missing runs were redone
    # The resumed runs are in a new boot of L1, and their boot id says so (the first session
    # had booted L1 anew after the kill too: its runs name both of its boots).
    first = set(ok.loc[ok["level"] == "L1", "boot"])
    assert new["boot"].nunique() == 1 and set(new["boot"]).isdisjoint(first)
    assert not ok_after.duplicated(["plan_index", "run_index"]).any()
