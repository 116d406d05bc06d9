"""Every workload at L0 with its real server or tool: a valid stream with every raw value, a
server on a free loopback port in its own temporary directory, and nothing left afterwards
(no process, no port, no directory). A server that does not start is one line quoting its
log, exit 1, and the runs before it are kept."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmtax.contract import read_stream
from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget
from vmtax.workloads import run_lines
from vmtax.workloads.oltp import remove_templates

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def agent() -> str:
    return str(find_agent())


@pytest.fixture
def cli_agent(agent: str) -> str:
    return agent


@pytest.fixture(scope="module")
def target(agent: str) -> LocalTarget:
    return LocalTarget(agent)


@pytest.fixture(autouse=True)
def scratch(monkeypatch) -> Iterator[Path]:
    """This test's own temporary root (readable by the servers' users), so that what it
    leaves behind is told apart from other vmtax runs on the machine."""
    root = Path(tempfile.mkdtemp(prefix="vmtax-wltest-", dir="/tmp"))
    root.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setenv("TMPDIR", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def leftovers(root: Path) -> list[str]:
    """Server directories of workloads under ``root``, and processes running from one."""
    dirs = glob.glob(str(root / "vmtax-wl-*"))
    procs = subprocess.run(
        ["pgrep", "-af", str(root)], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return dirs + [p for p in procs if "pgrep" not in p]


def port_is_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def one_run(target, *args: str):
    stream = read_stream(run_lines(target, ["run", *args], 120.0))
    assert stream.complete, (stream.problem, stream.end)
    assert stream.end.status == "ok", stream.end.error
    assert len(stream.runs) == 1
    return stream.header, stream.runs[0]


@pytest.mark.parametrize(
    ("name", "params", "throughput"),
    [
        ("http", ["file=page44"], "req/s"),
        ("http", ["file=file41k", "connections=3"], "req/s"),
        ("memcached", ["connections=2"], "ops/s"),
    ],
)
def test_agent_clients_time_every_request_of_a_real_server(
    target, name, params, throughput, scratch
):
    args = [name, "--duration", "0.3", "--iterations", "500", "--warmup", "5"]
    for p in params:
        args += ["--param", p]
    header, run = one_run(target, *args)
    assert header.probe == name
    assert run.summary.throughput_unit == throughput and run.summary.throughput > 0
    assert run.summary.n == len(run.values) >= 2 and (run.values > 0).all()
    assert len(run.warmup_values) == 5
    port = int(header.params["port"])
    assert port_is_closed(port)
    assert leftovers(scratch) == []


@pytest.mark.parametrize("db", ["mariadb", "pgsql"])
def test_oltp_runs_sysbench_against_a_throwaway_database(target, db, scratch):
    header, run = one_run(
        target, "oltp", "--duration", "1", "--param", f"db={db}", "--param", "table_size=500"
    )
    assert header.params["db"] == db and header.throughput_unit == "tx/s"
    # one value per transaction, in nanoseconds; sysbench's own rate as the throughput
    assert run.summary.n == len(run.values) >= 2
    assert 1e4 < run.summary.median < 1e10
    assert run.summary.throughput > 0
    remove_templates()
    assert leftovers(scratch) == []


def test_hackbench_and_crypto_run_the_real_tools(target):
    header, run = one_run(
        target,
        "hackbench",
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--param",
        "groups=2",
        "--param",
        "loops=20",
    )
    assert header.unit == "ns" and run.summary.n == 3 and len(run.warmup_values) == 1
    assert header.params["agent_probe"] == "exec" and 1e5 < run.summary.median < 1e11
    _, hw = one_run(target, "crypto", "--iterations", "2", "--warmup", "0")
    _, sw = one_run(target, "crypto", "--iterations", "2", "--warmup", "0", "--param", "aesni=off")
    # AES-NI masked through OPENSSL_ia32cap really takes the software path: several times
    # slower on any CPU with AES-NI (the test machine has it).
    assert hw.summary.median > 2 * sw.summary.median


@pytest.mark.parametrize("test", ["rr", "stream", "maerts"])
def test_net_and_relay_are_agent_only(target, test):
    header, run = one_run(target, "net", "--duration", "0.2", "--param", f"test={test}")
    assert header.params["agent_probe"] == f"tcp_{test}"
    assert run.summary.throughput > 0
    header, run = one_run(target, "relay", "--duration", "0.2", "--param", "relays=2")
    assert header.probe == "relay" and run.summary.n >= 2


FAILING = """
name = "failing"
[defaults]
runs = 1
duration = 0.2
timeout = 30
[[probes]]
probe = "relay"
[[probes]]
probe = "memcached"
params = { threads = 0 }
"""


def run_suite(
    text: str, tmp_path: Path, agent: str, *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess, Path]:
    """`vmtax run` of suite ``text`` in its own process (servers and all), its store in
    ``tmp_path``; no report file is written."""
    suite = tmp_path / "suite.toml"
    suite.write_text(text)
    db = tmp_path / "v.db"
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "from vmtax.entry import main; main()",
            "run",
            "--suite",
            str(suite),
            "--db",
            f"sqlite:///{db}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "VMTAX_PROBE": agent, "VMTAX_RUN_REPORT": "none"},
        cwd=tmp_path,
    )
    return res, db


def test_a_server_that_does_not_start_is_one_line_quoting_its_log(tmp_path, agent, scratch):
    res, db = run_suite(FAILING, tmp_path, agent)
    assert res.returncode == 1, res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("vmtax: error:")]
    assert len(err) == 1, res.stderr
    # memcached's own complaint, quoted from its log
    assert "memcached did not start" in err[0] and "threads" in err[0].lower(), err[0]
    rows = sqlite3.connect(db).execute("SELECT probe, status FROM runs ORDER BY id").fetchall()
    assert ("relay", "ok") in rows and ("memcached", "failed") in rows
    assert leftovers(scratch) == []
