"""Faults on a fleet of real sshd hosts in network namespaces (see test_fleet_netns.py).

Each test kills or cuts off a real process mid-run on one host and checks that the runs
already committed are kept, that the failing host is reported in one line, that the other
hosts finish, and that `vmtax run --resume` then runs exactly what is missing.
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

from test_fleet_netns import NetnsFleet, _ip, vmtax_cmd, vmtax_env
from vmtax.store import Store

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
probe = "cpuid"
"""


def _suite(tmp_path, runs: int = 5, duration: float = 0.3, timeout: float = 60):
    path = tmp_path / "faults.toml"
    path.write_text(SUITE.format(runs=runs, duration=duration, timeout=timeout))
    return path


def _runs(db: str) -> pd.DataFrame:
    try:
        with Store.open(db, read_only=True) as store:
            return store.runs()
    except Exception:  # not created yet
        return pd.DataFrame(columns=["target", "status"])


def _ok_on(db: str, name: str) -> int:
    runs = _runs(db)
    return int(((runs["target"] == name) & (runs["status"] == "ok")).sum())


class Controller:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*vmtax_cmd(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=vmtax_env(),
        )  # fmt: skip

    def wait_until(self, cond, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None:
                pytest.fail(f"vmtax ended before {what}: {self.proc.communicate()[1][-2000:]}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"timed out waiting for {what}")
            time.sleep(0.1)

    def finish(self, timeout: float = 240) -> tuple[int, str, str]:
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


def _exp(out: str, err: str) -> int:
    m = re.search(r"^experiment (\d+)$", out, re.M) or re.search(r"\[experiment (\d+)\]", err)
    assert m, (out, err)
    return int(m.group(1))


def _resume_runs_only_what_is_missing(
    db: str, exp: int, before: pd.DataFrame, fleet: NetnsFleet, runs: int, expect_rerun: set
) -> None:
    """`--resume` leaves every committed run as it was and adds exactly the missing ones."""
    ok_before = before[before["status"] == "ok"]
    proc = subprocess.run([*vmtax_cmd(), "run", "--resume", str(exp), "--db", db],
                          capture_output=True, text=True, timeout=240, env=vmtax_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = _runs(db)
    ok_after = after[after["status"] == "ok"]
    # The committed runs are untouched (same rows), none is stored twice, all are there now.
    assert set(ok_before["run_id"]) <= set(ok_after["run_id"])
    assert not ok_after.duplicated(["plan_index", "run_index"]).any()
    assert len(ok_after) == len(fleet.hosts) * runs
    new = ok_after[~ok_after["run_id"].isin(ok_before["run_id"])]
    assert len(new) == len(fleet.hosts) * runs - len(ok_before)
    assert set(new["target"]) == expect_rerun  # only the failed host's runs were redone


def test_ssh_session_killed_mid_run(netns_fleet, postgres_url, tmp_path):
    """The sshd process of node01's session is SIGKILLed mid-run: its run in flight is lost,
    the host reconnects for the next one, the others finish; --resume redoes the lost one."""
    fleet = netns_fleet(3)
    runs = 5
    hosts = fleet.hosts_toml(3)
    db = postgres_url
    ctl = Controller("run", "--targets", str(hosts), "--suite", str(_suite(tmp_path, runs)),
                     "--db", db)  # fmt: skip
    victim = fleet.hosts[1]
    ctl.wait_until(lambda: _ok_on(db, victim.name) >= 1 and victim.agents(), "node01 mid-run")
    victim.drop_sessions()
    code, out, err = ctl.finish()
    line = _one_line(err)
    assert code == 1 and "node01" in line and "lost" in line
    assert "node00" not in line and "node02" not in line
    before = _runs(db)
    for h in (fleet.hosts[0], fleet.hosts[2]):
        assert _ok_on(db, h.name) == runs
    assert 1 <= _ok_on(db, victim.name) < runs
    _resume_runs_only_what_is_missing(db, _exp(out, err), before, fleet, runs, {victim.name})


def test_agent_sigkilled_mid_run(netns_fleet, tmp_path):
    """The agent on node02 is SIGKILLed mid-run: that run is lost and reported, the stream's
    whole runs are kept, the next run on the same connection works; --resume redoes it."""
    fleet = netns_fleet(3)
    runs = 5
    db = f"sqlite:///{tmp_path / 'agent.db'}"
    ctl = Controller("run", "--targets", str(fleet.hosts_toml(3)), "--suite",
                     str(_suite(tmp_path, runs)), "--db", db)  # fmt: skip
    victim = fleet.hosts[2]
    ctl.wait_until(lambda: _ok_on(db, victim.name) >= 1 and victim.agents(), "node02's agent")
    for pid in victim.agents():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    code, out, err = ctl.finish()
    line = _one_line(err)
    assert code == 1 and "node02" in line, line
    assert "1 lost" in line or "1 failed" in line, line
    before = _runs(db)
    bad = before[before["status"] != "ok"]
    # Killed after its header: "lost" (stream broke off); before it: "failed" (no run).
    assert set(bad["target"]) == {"node02"} and len(bad) == 1
    assert bad["status"].iloc[0] in ("lost", "failed"), bad["error"].iloc[0]
    assert _ok_on(db, "node02") == runs - 1  # the runs after the kill went on
    _resume_runs_only_what_is_missing(db, _exp(out, err), before, fleet, runs, {victim.name})


def test_host_key_mismatch_is_refused(netns_fleet, tmp_path):
    """node01 presents a key other than the one known for it: vmtax refuses to connect (even
    with --accept-new-host-key), says so in one line, measures the others; once the right key
    is known, --resume measures node01 only."""
    fleet = netns_fleet(3)
    runs = 2
    wrong = fleet.hosts[0].public_key()
    fleet.known_hosts.write_text(
        "".join(f"{h.addr} {wrong if h.index == 1 else h.public_key()}\n" for h in fleet.hosts)
    )
    db = f"sqlite:///{tmp_path / 'keys.db'}"
    suite = _suite(tmp_path, runs, duration=0.05)
    proc = subprocess.run(
        [*vmtax_cmd(), "run", "--targets", str(fleet.hosts_toml(3)), "--suite", str(suite),
         "--db", db, "--accept-new-host-key"],
        capture_output=True, text=True, timeout=240, env=vmtax_env(),
    )  # fmt: skip
    line = _one_line(proc.stderr)
    assert proc.returncode == 1
    assert "node01" in line and "host key changed" in line and "refused" in line
    assert "ssh-keygen -R" in line
    before = _runs(db)
    assert set(before["target"]) == {"node00", "node02"}
    assert (before["status"] == "ok").all() and len(before) == 2 * runs
    assert fleet.hosts[1].session_children() == []
    fleet.trust()  # the operator checked the new key and recorded it
    _resume_runs_only_what_is_missing(
        db, _exp(proc.stdout, proc.stderr), before, fleet, runs, {"node01"}
    )


def test_veth_down_mid_run(netns_fleet, tmp_path):
    """node00's link is taken down mid-run (no RST, packets just vanish): its runs time out
    and are recorded as lost, vmtax gives up on it after three in a row and says so in one
    line; the other hosts finish. With the link back, --resume redoes node00's runs only."""
    fleet = netns_fleet(3)
    runs = 6
    db = f"sqlite:///{tmp_path / 'veth.db'}"
    ctl = Controller("run", "--targets", str(fleet.hosts_toml(3)), "--suite",
                     str(_suite(tmp_path, runs, duration=0.3, timeout=4)), "--db", db)  # fmt: skip
    victim = fleet.hosts[0]
    ctl.wait_until(lambda: _ok_on(db, victim.name) >= 1 and victim.agents(), "node00 mid-run")
    _ip("link", "set", victim.veth, "down")
    code, out, err = ctl.finish(timeout=300)
    line = _one_line(err)
    assert code == 1 and "node00" in line and "giving up" in line, line
    assert "node01" not in line and "node02" not in line
    before = _runs(db)
    assert _ok_on(db, "node01") == runs and _ok_on(db, "node02") == runs
    assert 1 <= _ok_on(db, "node00") < runs
    _ip("link", "set", victim.veth, "up")
    _resume_runs_only_what_is_missing(db, _exp(out, err), before, fleet, runs, {victim.name})
