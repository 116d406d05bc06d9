"""PostgreSQL restarted under a running experiment: the controller reconnects, nothing is lost
or stored twice. The server is a dedicated one (not the session's), restarted with pg_ctl."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from conftest import PG_PASSWORD, PG_USER, _as_postgres, _free_port, _pg_bin
from test_fleet_netns import vmtax_cmd, vmtax_env

pytestmark = pytest.mark.slow

SUITE = """
name = "pg-restart"
seed = 11
[defaults]
runs = {runs}
iterations = 200000
duration = 0.15
warmup = 10
timeout = 60
[[probes]]
probe = "cpuid"
[[probes]]
probe = "syscall"
"""


class PgCtlServer:
    """A PostgreSQL server of its own, driven with pg_ctl as the postgres user."""

    def __init__(self) -> None:
        self.bindir = _pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="vmtax-pgctl-"))
        shutil.chown(self.root, "postgres", "postgres")
        self.data = self.root / "data"
        self.port = _free_port()
        pwfile = self.root / "pw"
        pwfile.write_text(PG_PASSWORD + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", PG_USER,
             f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=scram-sha-256",
             "--no-sync"],
            check=True, capture_output=True, cwd=self.root, **_as_postgres(),
        )  # fmt: skip
        self.opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.start()

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
            check=True, capture_output=True, cwd=self.root, timeout=60, **_as_postgres(),
        )  # fmt: skip

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def restart(self) -> None:
        # -l: the new postmaster must not inherit (and hold open) this call's output pipe.
        self._pg_ctl("restart", "-w", "-m", "fast", "-o", self.opts, "-l", str(self.root / "log"))

    def stop(self) -> None:
        self._pg_ctl("stop", "-w", "-m", "fast")

    def start(self) -> None:
        self._pg_ctl("start", "-w", "-o", self.opts, "-l", str(self.root / "log"))

    def url(self, db: str) -> str:
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=PG_USER, password=PG_PASSWORD,
            dbname="postgres", autocommit=True,
        ) as conn:  # fmt: skip
            conn.execute(f'CREATE DATABASE "{db}"')
        return f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{self.port}/{db}"

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def pgctl_server():
    server = PgCtlServer()
    yield server
    server.close()


def _ok_runs(url: str) -> int:
    from vmtax.store import Store

    try:
        with Store.open(url, read_only=True, reconnect_timeout=0) as store:
            runs = store.runs()
        return int((runs["status"] == "ok").sum())
    except Exception:  # the schema may not exist yet, or the server is restarting
        return 0


def _wait_for_runs(url: str, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _ok_runs(url) < n:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"fewer than {n} runs were stored in time"
        time.sleep(0.3)


def test_postgresql_restarted_twice_mid_experiment(pgctl_server, tmp_path):
    """`pg_ctl restart` and a stop with the server away for 3 s: the controller reconnects,
    finishes the experiment, and every run is stored exactly once."""
    from vmtax.store import Store

    url = pgctl_server.url("restart")
    runs = 12
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE.format(runs=runs))
    proc = subprocess.Popen(
        [*vmtax_cmd(), "run", "--suite", str(suite), "--db", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=vmtax_env(),
    )  # fmt: skip
    try:
        _wait_for_runs(url, 3, proc)
        before = pgctl_server.postmaster_pid()
        pgctl_server.restart()
        assert pgctl_server.postmaster_pid() != before  # it was really restarted
        _wait_for_runs(url, 8, proc)
        pgctl_server.stop()
        time.sleep(3)  # runs finish meanwhile; their writes wait for the server
        pgctl_server.start()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    with Store.open(url, read_only=True) as store:
        stored = store.runs()
        exp = store.experiment(int(stored["experiment_id"].iloc[0]))
    assert exp["status"] == "ok"
    assert len(stored) == 2 * runs and (stored["status"] == "ok").all()
    assert not stored.duplicated(["plan_index", "run_index"]).any()
    with Store.open(url, read_only=True) as store:
        assert store.latest_experiment_id() == exp["id"]  # no second experiment row


def test_a_store_operation_waits_out_a_restart_and_gives_up_with_one_line(pgctl_server):
    """In process: a write while the server is down completes once it is back; with the
    server gone for longer than the reconnect timeout, one line, no password."""
    import numpy as np

    from vmtax.errors import VmtaxError
    from vmtax.store import Store

    url = pgctl_server.url("api")
    store = Store.open(url, reconnect_timeout=30)
    exp = store.create_experiment(command=["t"], suite="s", seed=1, plan={},
                                  vmtax_version="t", agent_version=None)  # fmt: skip
    cfg = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                              target="local", provenance={})  # fmt: skip
    values = np.arange(100, dtype=np.float64)
    kw = dict(experiment_id=exp, configuration_id=cfg, probe="p", header=None,
              summary={"n": 100}, values=values, warmup_values=values[:0], status="ok")  # fmt: skip
    store.add_run(plan_index=0, run_index=0, **kw)
    pgctl_server.stop()
    import threading

    threading.Timer(2.0, pgctl_server.start).start()
    store.add_run(plan_index=1, run_index=0, **kw)  # waits for the server, then stores
    assert store.reconnects >= 1
    assert store.completed_runs(exp) == {(0, 0), (1, 0)}
    store.reconnect_timeout = 2
    pgctl_server.stop()
    with pytest.raises(VmtaxError) as err:
        store.add_run(plan_index=2, run_index=0, **kw)
    message = str(err.value)
    assert "gave up reconnecting" in message and "\n" not in message
    assert PG_PASSWORD not in message
    pgctl_server.start()
    assert store.completed_runs(exp) == {(0, 0), (1, 0)}  # the failed write left nothing
    store.close()
