"""Faults on a fleet of real sshd hosts in network namespaces (see test_fleet_netns.py), run
through Ansible into a PostgreSQL server of its own.

One experiment on six hosts meets every fault at once, so the fleet and Ansible start once:
node01's SSH session is killed mid-run (its sshd processes SIGKILLed, the listener stays),
node02's agent is SIGKILLed mid-run, node03's sshd is down from the start (unreachable),
node04 presents a host key other than the one known for it, and PostgreSQL is restarted
while runs are being stored. node00 and node05 see no fault. The test checks that nothing
committed is lost, that one line names each failing host (and no other), and that `vmtax run
--resume` then runs exactly what is missing, once the hosts are back and the key is trusted.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time

import pandas as pd
import pytest

from test_faults_postgres import PgCtlServer
from test_fleet_netns import vmtax_cmd, vmtax_env
from vmtax.store import Store

pytestmark = pytest.mark.slow

# halt: each iteration sleeps (10 ms here), so a run lasts its duration, long enough to be
# cut mid-run, without keeping a CPU busy; with cpuid, whose runs spin for all of it, the
# test took 55 CPU seconds and 88 s, against 41 and 61 s (2 cores, load average 4.5-6.5).
SUITE = """
name = "fleet-faults"
seed = 9
[defaults]
runs = {runs}
iterations = 10000000
duration = {duration}
warmup = 10
timeout = {timeout}
[[probes]]
probe = "halt"
params = {{ sleep_us = 10000 }}
"""
RUNS = 4  # a host with a fault has three runs left once its first is stored


def _runs(db: str) -> pd.DataFrame:
    try:
        with Store.open(db, read_only=True, reconnect_timeout=0) as store:
            return store.runs()
    except Exception:  # not created yet, or the server is restarting
        return pd.DataFrame(columns=["target", "status", "run_id", "plan_index", "run_index"])


def _ok_on(db: str, name: str) -> int:
    runs = _runs(db)
    return int(((runs["target"] == name) & (runs["status"] == "ok")).sum())


class Controller:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*vmtax_cmd(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=vmtax_env(),
        )  # fmt: skip

    def when(self, faults: dict[str, tuple], timeout: float = 240) -> None:
        """``faults``: what -> (condition, action). Each action runs once, as soon as its
        condition holds, whichever comes first: the hosts' runs interleave as Ansible's
        forks and the machine's load have them, so waiting for one host's moment before
        looking for another's can miss the second (its last run ended meanwhile)."""
        pending = dict(faults)
        deadline = time.monotonic() + timeout
        while pending:
            for what, (cond, act) in list(pending.items()):
                if cond():
                    act()
                    del pending[what]
            if not pending:
                return
            if self.proc.poll() is not None:
                left = ", ".join(pending)
                pytest.fail(f"vmtax ended before {left}: {self.proc.communicate()[1][-2000:]}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"timed out waiting for {', '.join(pending)}")
            time.sleep(0.1)

    def finish(self, timeout: float = 300) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
        return self.proc.returncode, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmtax: error: "), err[-3000:]
    return lines[0]


def _part(line: str, host: str) -> str:
    """What the error line says about ``host`` (its parts are joined with '; ')."""
    found = [p for p in line.split("; ") if re.search(rf"\b{host}\b", p)]
    assert len(found) == 1, (host, line)
    return found[0]


@pytest.fixture
def pg():
    server = PgCtlServer()
    yield server
    server.close()


def test_fleet_faults_keep_what_was_committed_and_resume_redoes_only_the_rest(
    netns_fleet, pg, tmp_path
):
    fleet = netns_fleet(6)
    hosts = fleet.hosts
    db = pg.url("faults")
    suite = tmp_path / "faults.toml"
    suite.write_text(SUITE.format(runs=RUNS, duration=1.5, timeout=60))
    hosts[3].stop()  # unreachable: nothing listens on its address
    # node04's recorded key is another host's (changed); node05 is not recorded at all (new):
    # --accept-new-host-key lets Ansible's ssh record node05's, never replace node04's.
    fleet.known_hosts.write_text(
        "".join(f"{h.addr} {(hosts[0] if h.index == 4 else h).public_key()}\n" for h in hosts[:5])
    )
    ctl = Controller("run", "--targets", str(fleet.hosts_toml(6)), "--suite", str(suite),
                     "--db", db, "--accept-new-host-key")  # fmt: skip
    sess, agent = hosts[1], hosts[2]

    def kill_agent() -> None:
        for pid in agent.agents():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    ctl.when({
        "node01 mid-run": (lambda: _ok_on(db, sess.name) >= 1 and sess.agents(),
                           sess.drop_sessions),
        "node02's agent": (lambda: _ok_on(db, agent.name) >= 1 and agent.agents(), kill_agent),
    })  # fmt: skip
    stored = len(_runs(db))
    pg.restart()
    code, out, err = ctl.finish()
    line = _one_line(err)
    assert code == 1, line
    assert "lost" in _part(line, "node01")
    assert "1 lost" in _part(line, "node02") or "1 failed" in _part(line, "node02")
    assert "unreachable" in _part(line, "node03")
    key = _part(line, "node04")
    assert (
        "host key changed" in key and "refused" in key and f"ssh-keygen -R '{hosts[4].addr}'" in key
    )
    assert "node00" not in line and "node05" not in line
    exp = int(re.search(r"\[experiment (\d+)\]", line).group(1))

    before = _runs(db)
    assert len(before) > stored  # runs were stored after the restart, on a new connection
    ok = before[before["status"] == "ok"]
    # The hosts without a fault, and the one whose agent was killed once, have every run but
    # that one; the session's host kept what it finished; the other two have nothing.
    assert _ok_on(db, "node00") == RUNS and _ok_on(db, "node05") == RUNS
    assert _ok_on(db, "node02") == RUNS - 1
    assert 1 <= _ok_on(db, "node01") < RUNS
    assert not set(ok["target"]) & {"node03", "node04"}
    assert not ok.duplicated(["plan_index", "run_index"]).any()
    # Ansible never connected to the host whose key changed, even with --accept-new-host-key,
    # and recorded the new host's key, and only that, in the user's known_hosts.
    assert hosts[4].session_children() == []
    known = fleet.known_hosts.read_text()
    assert hosts[5].public_key() in known and known.count(hosts[0].public_key()) == 2

    hosts[3].start()
    hosts[3].wait_listening(time.monotonic() + 30)
    fleet.trust()  # the operator checked node04's new key and recorded it
    proc = subprocess.run([*vmtax_cmd(), "run", "--resume", str(exp), "--db", db],
                          capture_output=True, text=True, timeout=300, env=vmtax_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = _runs(db)
    ok_after = after[after["status"] == "ok"]
    # Every committed run is there as it was, none twice, and all are there now.
    assert set(ok["run_id"]) <= set(ok_after["run_id"])
    assert not ok_after.duplicated(["plan_index", "run_index"]).any()
    assert len(ok_after) == len(hosts) * RUNS
    new = ok_after[~ok_after["run_id"].isin(ok["run_id"])]
    assert len(new) == len(hosts) * RUNS - len(ok)
    assert set(new["target"]) == {"node01", "node02", "node03", "node04"}
