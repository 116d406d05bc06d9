"""Exit profiles on this machine, whose L0 has no tracefs mounted and no KVM that runs
guests: the agent's one-line refusals (no tracefs, not root, nothing started) and `vmtax run
--exits` keeping every run when a host side cannot record. The profiles a real nested KVM
records are in test_hostprof_testbed.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vmtax.targets.base import find_agent

pytestmark = pytest.mark.fast

AGENT = str(find_agent())
TRACEFS = Path("/sys/kernel/tracing")


def _tracefs_mounted() -> bool:
    return (TRACEFS / "instances").is_dir() or Path("/sys/kernel/debug/tracing/instances").is_dir()


def agent(*args: str, user: str | None = None) -> subprocess.CompletedProcess:
    cmd = [AGENT, *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("vmtax-probe: error: exits: ")
    return lines[0]


@pytest.mark.skipif(_tracefs_mounted(), reason="needs a machine without tracefs mounted")
def test_no_tracefs_is_one_line_and_exit_1():
    proc = agent("exits", "start", "--qemu", "auto")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "tracefs is not mounted" in one_error_line(proc)
    stop = agent("exits", "stop")
    assert stop.returncode == 1
    assert "tracefs is not mounted" in one_error_line(stop)


def test_an_explicit_tracefs_that_is_not_one_is_refused(tmp_path):
    proc = agent("exits", "start", "--qemu", "auto", "--tracefs", str(tmp_path))
    assert proc.returncode == 1
    assert f"no tracefs at {tmp_path}" in one_error_line(proc)


@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) is missing")
def test_not_root_is_one_line_and_exit_1(tmp_path):
    nobody = "65534"
    copy = tmp_path / "vmtax-probe"  # the tree under /root is not readable by nobody
    shutil.copy(AGENT, copy)
    os.chmod(tmp_path, 0o755)
    os.chmod(copy, 0o755)
    for action in (["start", "--qemu", "auto"], ["stop"]):
        proc = subprocess.run(
            ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
             str(copy), "exits", *action],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        assert "needs root" in one_error_line(proc)


def test_bad_qemu_argument_is_a_usage_line(tmp_path):
    if not _tracefs_mounted():
        # The tracefs check comes first; point it at a directory that passes it.
        (tmp_path / "instances").mkdir()
        (tmp_path / "events" / "kvm" / "kvm_exit").mkdir(parents=True)
        (tmp_path / "events" / "kvm" / "kvm_entry").mkdir(parents=True)
        (tmp_path / "synthetic_events").write_text("")
    proc = agent("exits", "start", "--qemu", "first", "--tracefs", str(tmp_path))
    assert proc.returncode == 1
    assert "--qemu takes auto or a PID" in one_error_line(proc)


def test_a_guest_gone_before_recording_is_named(tmp_path):
    # A tracefs-shaped directory stands in for the kernel's (this L0 has none mounted); the
    # process is real and has exited, as a guest that ended before `exits start`.
    for d in ("instances", "events/kvm/kvm_exit", "events/kvm/kvm_entry"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "synthetic_events").write_text("")
    gone = subprocess.Popen(["true"])
    gone.wait()
    proc = agent("exits", "start", "--qemu", str(gone.pid), "--tracefs", str(tmp_path))
    assert proc.returncode == 1
    assert "the guest ended before recording started" in one_error_line(proc)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        proc = agent("exits", "start", "--qemu", str(sleeper.pid), "--tracefs", str(tmp_path))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "has no KVM vCPUs" in one_error_line(proc)
    assert list((tmp_path / "instances").iterdir()) == []  # nothing was set up


def test_run_with_exits_keeps_every_run_when_the_host_side_cannot_record(
    cli, tmp_path, monkeypatch
):
    """`vmtax run --exits` on this machine: the local target has no host side (one line);
    with this machine as the host side of --exits=trace (no tracefs) every run is kept and
    each gets a profile marked incomplete that says why."""
    db = f"sqlite:///{tmp_path / 'x.db'}"
    res = cli("run", "--probe", "cpuid", "--runs", "2", "--duration", "0.05", "--exits", "--db", db,
              agent_path=AGENT)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "exits: not recorded for local: no host side reachable" in res.stderr
    assert res.stderr.count("no host side reachable") == 1

    from vmtax.hostprof import recorder
    from vmtax.targets.local import LocalTarget

    monkeypatch.setattr(recorder, "host_sides", lambda target: {"L0": LocalTarget(AGENT)})
    res = cli("run", "--probe", "cpuid", "--runs", "2", "--duration", "0.05", "--exits=trace",
              "--db", db, agent_path=AGENT)  # fmt: skip
    assert res.returncode == 0, res.stderr
    from vmtax.hostprof.store import exit_profiles
    from vmtax.store import Store

    with Store.open(db) as s:
        runs = s.runs(["exp=latest"])
        prof = exit_profiles(s, int(runs["experiment_id"].iloc[0]))
    assert list(runs["status"]) == ["ok", "ok"]
    assert len(prof) == 2 and set(prof["run_id"]) == set(runs["run_id"])
    assert not prof["complete"].any()
    assert all("tracefs is not mounted" in p[0] for p in prof["problems"]), list(prof["problems"])
    assert (prof["recorded_at"] == "L0").all()
    assert res.stderr.count("L0 cannot record: exits: tracefs is not mounted") == 1
    # The start-up could not be measured either (after 3 tries): said once, with why.
    said = "the start-up's exits at L0 were not measured (start: exits: tracefs is not mounted"
    assert res.stderr.count(said) == 1, res.stderr
    shown = cli("exits", "exp=latest", "--db", db)
    assert shown.returncode == 0, shown.stderr
    assert "2 profiles are incomplete" in shown.stdout


def test_the_start_up_is_measured_with_the_runs_own_arguments():
    """Each plan entry's start-up is its own run cut to two iterations: the probe's set-up
    (io's file, a workload's servers) with its parameters, never another probe's."""
    from vmtax.contract import probe_startup_args

    run = ["run", "io", "--runs", "1", "--iterations", "500", "--duration", "2", "--warmup",
           "10", "--timeout", "60", "--param", "size=16", "--tsc-hz", "2e9"]  # fmt: skip
    cut = probe_startup_args(run)
    assert cut == ["run", "io", "--runs", "1", "--iterations", "2", "--warmup", "0",
                   "--timeout", "60", "--param", "size=16", "--tsc-hz", "2e9"]  # fmt: skip
    assert probe_startup_args(["run", "http", "--runs", "1", "--timeout", "9"]) == [
        "run", "http", "--runs", "1", "--iterations", "2", "--warmup", "0", "--timeout", "9",
    ]  # fmt: skip


def test_a_workloads_agent_runs_get_what_the_fingerprint_found():
    """A workload passes the run's --tsc-hz and --brief-env to its agent runs on the target
    (so none measures its nesting again: 3,000 CPUIDs, each an exit in a guest), never to a
    client end on another machine."""
    from vmtax.workloads.base import Invocation

    args = ["run", "http", "--runs", "1", "--iterations", "9", "--param", "size=44",
            "--tsc-hz", "2000000000.0", "--brief-env"]  # fmt: skip
    inv = Invocation.from_args(args, 60.0)
    assert inv.env_args == ["--tsc-hz", "2000000000.0", "--brief-env"]
    assert inv.iterations == 9 and inv.params == {"size": "44"}
    # The real agent on this machine, run as a workload runs it: its header says the
    # nesting was not measured again.
    from vmtax.targets.local import LocalTarget
    from vmtax.workloads import REGISTRY
    from vmtax.workloads.base import Context

    ctx = Context(workload=REGISTRY["http"], target=LocalTarget(AGENT), inv=inv, params={},
                  env=lambda: None)  # fmt: skip
    header = json.loads(next(iter(ctx.agent("syscall", {}))))
    assert "--brief-env" in header["env"]["nesting"]["basis"], header["env"]["nesting"]


def test_this_machine_records_the_guests_own_qemu_by_the_pid_its_capabilities_give():
    """At L0 the recorder names the target's QEMU (other guests may run beside it), read
    through the target's capabilities (``vm_pid``). A KVM guest at L1 cannot boot on this
    machine, so a stand-in for the booted guest's process handle gives the pid."""
    from types import SimpleNamespace

    from vmtax.hostprof.recorder import _qemu_arg
    from vmtax.targets.local import LocalTarget
    from vmtax.targets.qemu import GuestSpec, QemuTarget

    target = QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=128, accel="kvm"))
    here = LocalTarget(level="L0")
    assert _qemu_arg(target, here) == ["--qemu", "auto"]  # not booted: no pid yet
    target.guest = SimpleNamespace(qemu_pid=4242)  # type: ignore[assignment]
    assert _qemu_arg(target, here) == ["--qemu", "4242"]
    assert _qemu_arg(target, LocalTarget(level="L1")) == ["--qemu", "auto"]  # inside a guest


def test_a_host_side_request_that_timed_out_is_made_once_more_and_then_given_up(
    tmp_path, monkeypatch
):
    """A request to a host side that hangs is killed at its timeout, and with a guest's host
    side the guest goes too (in CI once, L1's `exits start` did not answer in 120 s under
    load, and the run lost its profile). The recorder begins once more, on the booted-again
    side, and says so. Here the side is this machine's agent behind a script that hangs on
    its first request (a hung L1 agent cannot be made to order), and the timeout is 2 s."""
    import shlex

    from vmtax.hostprof import recorder
    from vmtax.targets.local import LocalTarget

    monkeypatch.setattr(recorder, "REQUEST_TIMEOUT_S", 2.0)
    hung = tmp_path / "hung-once"
    script = tmp_path / "agent"
    script.write_text(
        f"#!/bin/sh\nif [ ! -e {shlex.quote(str(hung))} ]; then : > {shlex.quote(str(hung))}; "
        f'exec sleep 60; fi\nexec {shlex.quote(AGENT)} "$@"\n'
    )
    script.chmod(0o755)
    said: list[str] = []
    err, before = recorder.begin("trace", LocalTarget(AGENT), LocalTarget(script), said.append)
    # The second begin got this machine's own answer, not the timeout.
    assert "tracefs is not mounted" in err and before is None, err
    assert len(said) == 1 and "did not finish within 2 s" in said[0], said
    assert "booting it again to begin once more" in said[0]
    # A side that hangs every time is asked twice, and its timeout is the profile's reason.
    hung.unlink()
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    said.clear()
    err, _ = recorder.begin("counts", LocalTarget(AGENT), LocalTarget(script), said.append)
    assert err.startswith("stats: ") and "did not finish within 2 s" in err, err
    assert len(said) == 1


def test_a_stop_whose_teardown_hangs_keeps_the_profile_it_printed(tmp_path, monkeypatch):
    """`exits stop` prints its profile before it removes the triggers, since the removal waits
    on every CPU and once hung in CI (a soft lockup of the emulated L1; 120 s, guest killed).
    The counts that came before the timeout are the profile: complete, saying the teardown
    did not finish, and no counter reading is asked of the guest that went. A hung L1 cannot
    be made to order: here the side is a script that prints what the agent prints, then
    hangs or reports a failed cleanup; the timeout is 2 s."""
    import shlex

    from vmtax.hostprof import recorder
    from vmtax.hostprof.store import _detail
    from vmtax.targets.local import LocalTarget

    monkeypatch.setattr(recorder, "REQUEST_TIMEOUT_S", 2.0)
    profile = {"type": "exits", "isa": "svm", "reasons": [{"code": 114, "count": 3010,
               "time_ns": 9, "timed": 3010, "untimed": 0}], "hits": 3010, "timed": 3010,
               "untimed": 0, "dropped": 0, "complete": True, "problems": [], "threads": [7],
               "window_ns": 5}  # fmt: skip
    script = tmp_path / "agent"

    def side_prints(after: str) -> LocalTarget:
        script.write_text(f"#!/bin/sh\necho {shlex.quote(json.dumps(profile))}\n{after}\n")
        script.chmod(0o755)
        return LocalTarget(script)

    got = recorder.end("trace", LocalTarget(AGENT), side_prints("exec sleep 60"), ("", None))
    assert got["complete"] and got["reasons"] == profile["reasons"], got
    assert "did not finish within 2 s" in got["teardown"] and "kvm_stats" not in got, got
    assert _detail(got)["teardown"] == got["teardown"]  # stored with the profile
    # A cleanup that failed makes the profile incomplete, saying so.
    cleanup = json.dumps({"type": "exits_cleanup", "problems": ["rmdir: busy"]})
    got = recorder.end("trace", LocalTarget(AGENT), side_prints(f"echo {shlex.quote(cleanup)}"),
                       ("", None))  # fmt: skip
    assert got["problems"] == ["cleanup: rmdir: busy"] and "teardown" not in got, got
    # Nothing printed before the hang: no profile, and the timeout is why.
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    got = recorder.end("trace", LocalTarget(AGENT), LocalTarget(script), ("", None))
    assert not got["complete"] and "did not finish within 2 s" in got["problems"][0], got


def test_once_a_sides_request_took_the_guest_the_other_sides_are_not_asked(
    tmp_path, monkeypatch, store
):
    """At L3 both host sides (L1 and L2) share the guest: when L1's `exits stop` times out,
    the guest goes, and L2's recording with it. Its profile says so, and no request boots
    another guest only to find no recording there. The sides are scripts (a hung L1 cannot
    be made to order): L1's hangs, L2's would leave a mark if it were asked."""
    import numpy as np

    from vmtax.hostprof import recorder
    from vmtax.hostprof.store import exit_profiles
    from vmtax.targets.local import LocalTarget

    monkeypatch.setattr(recorder, "REQUEST_TIMEOUT_S", 2.0)
    hung, asked = tmp_path / "l1", tmp_path / "l2"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    asked.write_text(f"#!/bin/sh\n: > {tmp_path / 'l2-was-asked'}\n")
    for script in (hung, asked):
        script.chmod(0o755)
    exp = store.create_experiment(
        command=["vmtax"], suite="t", seed=1, plan={}, vmtax_version="0", agent_version="0"
    )
    cfg = store.configuration(experiment_id=exp, level="L3", labels={}, fingerprint={},
                              target="qemu-L3", provenance={})  # fmt: skip
    run = store.add_run(experiment_id=exp, configuration_id=cfg, probe="cpuid", plan_index=0,
                        run_index=0, header=None, summary={"n": 1}, values=np.ones(1),
                        warmup_values=np.ones(1), status="ok")  # fmt: skip
    said: list[str] = []
    rec = recorder.Recorder(store, mode="trace", note=said.append)
    target = LocalTarget(AGENT, level="L3")
    rec._started[target.name] = {  # as before_run leaves two begun recordings
        "L1": (LocalTarget(hung, level="L1"), ("", None)),
        "L2": (LocalTarget(asked, level="L2"), ("", None)),
    }
    rec.after_run(target, None, run, "ok")  # type: ignore[arg-type]
    assert not (tmp_path / "l2-was-asked").exists()
    prof = exit_profiles(store, exp).set_index("recorded_at")
    assert not prof["complete"].any(), prof
    assert "did not finish within 2 s" in prof.loc["L1", "problems"][0]
    assert prof.loc["L2", "problems"] == ["stop: the guest went when L1's request timed out"]
