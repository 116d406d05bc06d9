"""Ctrl-C during a sweep: the clients stop without a traceback, the sweep is stored as
interrupted (also when a second Ctrl-C comes during the cleanup), and --resume finishes it.

The sweeps run at level L0 (agent processes on this machine as the guests) with a window of
a second or two, so each test costs a few seconds of sweep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from test_sweep import Lines
from vmtax.store import Store
from vmtax.sweep.guests import LocalGuests
from vmtax.sweep.run import Client, SweepRunner
from vmtax.sweep.spec import SweepSpec, Timing
from vmtax.targets.base import find_agent

pytestmark = pytest.mark.slow

ARGS = ["sweep", "--level", "L0", "--steps", "0.5,1,1.5", "--warmup", "0.5", "--window",
        "1.5", "--interval", "0.5", "--events", "10", "--max-prime", "5000", "--replicates",
        "1", "--no-intervals", "--order-seed", "0"]  # fmt: skip


def _vmtax() -> str:
    return shutil.which("vmtax") or str(Path(sys.executable).parent / "vmtax")


def _spec() -> SweepSpec:
    return SweepSpec(ratios=(0.5, 1.0, 1.5), timing=Timing(0.5, 1.5, 0.5), max_prime=5000,
                     events=10, host_cpus=2, replicates=1, intervals=False)  # fmt: skip


def test_ctrl_c_stops_the_sweep_in_one_line_and_resume_finishes_it(tmp_path):
    db = str(tmp_path / "c.db")
    env = {**os.environ, "VMTAX_PROBE": str(find_agent())}
    # Its own session, so that the SIGINT goes to its whole process group, as a terminal's
    # Ctrl-C does (and not to pytest).
    proc = subprocess.Popen([_vmtax(), *ARGS, "--db", db], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if "] replicate 1/1 step" in line:
            time.sleep(0.5)  # inside the second unit's window: its clients are running
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest
    assert rest.splitlines() == ["vmtax: error: interrupted"], rest
    first = SweepSpec(ratios=(0.5, 1.0, 1.5), replicates=1, order_seed=0).order()[0][1]
    with Store.open(db) as store:
        assert list(store.sweeps.steps(1)["step_index"]) == [first]
    show = subprocess.run([_vmtax(), "sweep", "show", "1", "--format", "json", "--db", db],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["status"] == "interrupted"
    res = subprocess.run([_vmtax(), "sweep", "--resume", "1", "--db", db], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    with Store.open(db) as store:
        assert list(store.sweeps.steps(1)["step_index"]) == [0, 1, 2]
        assert store.experiment(1)["status"] == "ok"


class _SecondCtrlC(LocalGuests):
    """The L0 guests, with a second Ctrl-C arriving while the sweep cleans up."""

    def close(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the handler runs between bytecodes: let it
        super().close()


def test_a_second_ctrl_c_during_the_cleanup_still_marks_the_sweep_interrupted(tmp_path):
    # The status was stored after the guests were stopped: a second Ctrl-C there left it
    # "running" for `sweep show`.
    spec = _spec()

    with Store.open(str(tmp_path / "i.db")) as store:
        exp = store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                      plan={"sweep": spec.as_plan(), "level": "L0"},
                                      vmtax_version="test", agent_version=None)  # fmt: skip
        first_ctrl_c = Lines(stop_after=1)
        runner = SweepRunner(store, spec, _SecondCtrlC(spec), level="L0", progress=first_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            runner.execute(exp)
        assert store.experiment(exp)["status"] == "interrupted"
        assert len(store.sweeps.steps(exp)) == 1


def test_a_stopped_client_whose_agent_is_killed_ends_without_an_error():
    # Ctrl-C kills the step's agents while its clients read them: that is the stop, not a
    # failure of the workload (nor a thread's traceback).
    spec = replace(_spec(), max_prime=200_000)
    guest = LocalGuests(spec)(spec.steps()[0], 0, 1, 160)
    crashed: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: crashed.append(args.exc_value)  # type: ignore[assignment]
    try:
        client = Client(0, guest, spec, time.monotonic() + 30, [])
        client.start()
        time.sleep(1.0)  # the agent is running its first transaction
        client.stop.set()
        guest.target.cancel()
        client.join(timeout=10)
    finally:
        threading.excepthook = previous
    assert not client.is_alive()
    assert client.error is None and not crashed, (client.error, crashed)
