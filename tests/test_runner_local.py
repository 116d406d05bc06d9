"""LocalTarget: lines stream as they come, the timeout kills the whole process group, stderr's
tail is kept. These use /bin/sh as the 'agent' binary: LocalTarget runs any executable, and a
shell lets a test build exactly the misbehaviour it needs (a hang, a forked child) for real."""

from __future__ import annotations

import os
import time

import pytest

from vmtax.targets.base import AgentTimeout, TargetError
from vmtax.targets.local import LocalTarget

pytestmark = pytest.mark.fast

SH = "/bin/sh"


def test_lines_arrive_before_the_process_ends():
    target = LocalTarget(SH)
    it = target.run_agent(["-c", "echo first; sleep 2; echo second"], timeout=20)
    t0 = time.monotonic()
    assert next(it) == "first\n"
    assert time.monotonic() - t0 < 1.5  # not held back until the process exits
    assert list(it) == ["second\n"]


def test_timeout_kills_the_process_group_and_raises(tmp_path):
    pidfile = tmp_path / "child.pid"
    target = LocalTarget(SH)
    # The shell forks a background child: killing only the shell would leave it running.
    script = f"sleep 60 & echo $! > {pidfile}; echo started; wait"
    got = []
    with pytest.raises(AgentTimeout, match="did not finish within 1 s"):
        for line in target.run_agent(["-c", script], timeout=1):
            got.append(line)
    assert got == ["started\n"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def test_stderr_tail_is_kept():
    target = LocalTarget(SH)
    out = list(target.run_agent(["-c", "echo out; echo oops >&2; exit 3"], timeout=20))
    assert out == ["out\n"]
    assert target.last_stderr == "oops"


def test_missing_binary_is_a_target_error(tmp_path):
    target = LocalTarget(tmp_path / "nope")
    with pytest.raises(TargetError, match="agent binary not found"):
        target.prepare()


def test_closing_the_generator_early_kills_the_agent(tmp_path):
    pidfile = tmp_path / "pid"
    target = LocalTarget(SH)
    it = target.run_agent(["-c", f"echo $$ > {pidfile}; echo a; sleep 60"], timeout=60)
    assert next(it) == "a\n"
    it.close()
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(f"/proc/{pid}")
