"""Server workloads on an SSH host: a real OpenSSH server on 127.0.0.1, so the "host" is this
machine reached over SSH. The agent there finds a free port, the controller puts the server's
files in a fresh directory there, the agent (or oltp.sh) starts and stops the server, and
nothing is left afterwards: no directory, no process, no port, no shared memory."""

from __future__ import annotations

import fcntl
import glob
import os
import socket
import subprocess
import tempfile

import pytest

from vmtax.contract import read_stream
from vmtax.workloads import run_lines

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_at_a_time():
    """This module's tests, one at a time across pytest-xdist's workers: each checks that the
    SSH host's servers left nothing in its /tmp, which a test of this module running in the
    other worker at the same time would fill (the workers do not keep a module together)."""
    shared = os.environ.get("VMTAX_TEST_SHARED_DIR") or tempfile.gettempdir()
    with open(os.path.join(shared, "workloads-ssh.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def leftovers() -> set[str]:
    """Scratch directories of servers on the host, and processes running from one; not the
    servers another pytest-xdist worker runs from its own temporary directory at the time."""
    procs = subprocess.run(
        ["pgrep", "-af", "vmtax-wl-"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return set(glob.glob("/tmp/vmtax-wl-*")) | {
        p for p in procs if "pgrep" not in p and not _another_workers(p)
    }


def _another_workers(command_line: str) -> bool:
    # Each worker's TMPDIR is <the session's shared directory>/tmp-<worker> (conftest.py).
    own = tempfile.gettempdir()
    return "/tmp-gw" in command_line and f"{own}/" not in command_line


def orphaned_shared_memory() -> set[int]:
    """SysV shared memory that nothing has attached and whose creator is gone: what a killed
    PostgreSQL leaves. A server another worker starts meanwhile has its segment attached."""
    with open("/proc/sysvipc/shm") as table:
        rows = [line.split() for line in table.read(1 << 20).splitlines()[1:]]
    return {int(r[1]) for r in rows if int(r[6]) == 0 and not _alive(int(r[4]))}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def port_is_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def run_on_ssh_host(sshd, name: str, params: list[str], *shape: str, timeout: float = 120.0):
    """One run of workload ``name`` with ``--param`` each of ``params`` on the sshd's host."""
    args = ["run", name, *shape]
    for p in params:
        args += ["--param", p]
    target = sshd.target()
    try:
        return read_stream(run_lines(target, args, timeout))
    finally:
        target.close()


@pytest.mark.parametrize(
    ("name", "params", "throughput"),
    [
        ("http", ["file=file41k", "connections=2"], "req/s"),
        ("memcached", ["connections=2"], "ops/s"),
        ("oltp", ["db=mariadb", "table_size=500"], "tx/s"),
        ("oltp", ["db=pgsql", "table_size=500"], "tx/s"),
    ],
)
def test_server_workloads_run_on_an_ssh_host_and_leave_nothing(sshd, name, params, throughput):
    before, orphans = leftovers(), orphaned_shared_memory()
    shape = ("--duration", "1", "--iterations", "2000", "--warmup", "2")
    stream = run_on_ssh_host(sshd, name, params, *shape)
    assert stream.complete and stream.end.status == "ok", (stream.problem, stream.end)
    run = stream.runs[0]
    assert stream.header.probe == name
    assert run.summary.throughput_unit == throughput and run.summary.throughput > 0
    assert run.summary.n == len(run.values) >= 2 and (run.values > 0).all()
    hp = stream.header.params
    # The port the host's agent found free: in the client's parameters, or oltp.sh's.
    port = int(hp["port"]) if "port" in hp else int(str(hp["cmd"]).split()[-2])
    assert port_is_closed(port)
    assert leftovers() == before
    assert orphaned_shared_memory() <= orphans  # PostgreSQL's, had it been killed


def test_a_server_that_does_not_start_on_an_ssh_host_is_one_line(sshd):
    before = leftovers()
    stream = run_on_ssh_host(sshd, "memcached", ["threads=0"], "--duration", "0.2", timeout=60.0)
    assert stream.end is not None and stream.end.status == "error"
    assert "memcached did not start" in stream.end.error and "\n" not in stream.end.error
    assert leftovers() == before


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("net", ["test=rr", "peer=host"]),
        ("net", ["test=stream", "peer=from-host"]),
        ("relay", ["spread=host", "relays=3"]),
    ],
)
def test_workloads_span_this_machine_and_an_ssh_host(sshd, name, params):
    """Each end on its own machine, reached at its address on the SSH connection."""
    shape = ("--duration", "0.3", "--iterations", "5000", "--warmup", "2")
    stream = run_on_ssh_host(sshd, name, params, *shape)
    assert stream.complete and stream.end.status == "ok", (stream.problem, stream.end)
    run = stream.runs[0]
    assert run.summary.n == len(run.values) >= 2 and (run.values > 0).all()
    hp = stream.header.params
    if name == "relay":
        # The forwarders here, at odd places: one for each of the ring's two odd places.
        assert len(str(hp["away"]).split(",")) == 2 and str(hp["away"]).startswith("127.0.0.1:")
    else:
        assert hp["agent_probe"] == f"tcp_{params[0].split('=')[1]}"
