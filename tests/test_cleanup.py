"""No QEMU process or temporary file outlives its run: on success, error, Ctrl-C and exit.

``leak_check`` is session-scoped: it takes its snapshot when this module starts (before the
QEMU, SSH and fleet tests, which sort after it) and compares at the very end of the session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import background
from test_faults_qemu import _qemu_of
from vmtax.doctor.leftovers import pid_start
from vmtax.store import Store
from vmtax.targets.base import TargetError, find_agent
from vmtax.targets.images import build_minimal
from vmtax.targets.qemu import GuestSpec, QemuTarget

pytestmark = pytest.mark.slow


def qemu_pids() -> set[int]:
    # By process name: a command line that only names QEMU (`ldd qemu-system-x86_64`, run
    # while an image is built) is not a guest.
    out = subprocess.run(["pgrep", "^qemu-system"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def own_qemu_pids() -> set[int]:
    """The guests whose files are in this process's temporary directory, as every guest's
    scratch directory is: under pytest-xdist each worker has its own (conftest.py), and
    another worker's guests are not this session's leftovers. By command line, not by parent:
    a guest whose vmtax was killed belongs to init."""
    mine = os.path.join(tempfile.gettempdir(), "")
    own = set()
    for pid in qemu_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if mine in cmdline:
            own.add(pid)
    return own


def vmtax_temp() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("vmtax-*")}


@pytest.fixture(scope="session", autouse=True)
def leak_check():
    before_pids, before_tmp = own_qemu_pids(), vmtax_temp()
    yield
    background.drain()  # the long boots that ran beside the tests (tests/background.py)
    deadline = time.monotonic() + 10
    while own_qemu_pids() - before_pids and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not own_qemu_pids() - before_pids, "QEMU processes left after the test session"
    assert not vmtax_temp() - before_tmp, "temporary files left after the test session"


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VMTAX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield build_minimal(find_agent())


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_a_guest_that_fails_to_start_leaves_nothing(image):
    before = vmtax_temp()
    target = QemuTarget(
        "L1", GuestSpec(vcpus=1, memory_mb=256, accel="tcg", cpu="no-such-cpu-model"), image=image
    )
    with pytest.raises(TargetError, match="QEMU failed to start"):
        target.prepare()
    assert target.guest is None and vmtax_temp() == before


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    return script


def test_ctrl_c_during_a_run_kills_qemu_and_removes_its_files(image, tmp_path):
    script = _script(
        tmp_path,
        f"""
        import sys
        from vmtax.targets.images import Image
        from vmtax.targets.qemu import GuestSpec, QemuTarget
        from pathlib import Path
        import json
        image = Image("minimal", {image.digest!r}, Path({str(image.directory)!r}), {{}})
        t = QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=512, accel="tcg"), image=image)
        try:
            t.prepare()
            print(json.dumps([t.guest.qemu_pid, str(t.guest.workdir)]), flush=True)
            for line in t.run_agent(["run", "cpu", "--runs", "500", "--duration", "0.5"], 600):
                pass
        finally:
            t.close()
        """,
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        import json

        assert child.stdout is not None
        pid, workdir = json.loads(child.stdout.readline())
        assert Path(workdir).is_dir() and pid in qemu_pids()
        time.sleep(1)
        child.send_signal(signal.SIGINT)  # what Ctrl-C sends
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode != 0
    assert _wait(lambda: pid not in qemu_pids(), 10)
    assert not Path(workdir).exists()


def test_exiting_without_close_still_kills_qemu_at_exit(image, tmp_path):
    script = _script(
        tmp_path,
        f"""
        import json
        from pathlib import Path
        from vmtax.targets.images import Image
        from vmtax.targets.qemu import GuestSpec, QemuGuest
        image = Image("minimal", {image.digest!r}, Path({str(image.directory)!r}), {{}})
        g = QemuGuest(image, GuestSpec(vcpus=1, memory_mb=512, accel="tcg"))
        g.start()
        print(json.dumps([g.qemu_pid, str(g.workdir)]), flush=True)
        raise SystemExit(3)  # no stop(): the atexit hook must do it
        """,
    )
    import json

    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    pid, workdir = json.loads(out.stdout.splitlines()[0])
    assert _wait(lambda: pid not in qemu_pids(), 10)
    assert not Path(workdir).exists()


def test_ctrl_c_of_vmtax_run_with_a_level_leaves_no_qemu(tmp_path):
    vmtax = shutil.which("vmtax") or pytest.fail("the vmtax command is not installed")
    env = dict(os.environ, VMTAX_CACHE_DIR=str(tmp_path / "cache"))
    child = subprocess.Popen(
        [
            vmtax,
            "run",
            "--levels",
            "L1",
            "--accel",
            "tcg",
            "--probe",
            "cpu",
            "--runs",
            "50",
            "--db",
            f"sqlite:///{tmp_path / 'c.db'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # Its own guest, found under it: other guests on the machine are not its.
        assert _wait(lambda: _qemu_of(child.pid), 60), "no QEMU started"
        guests = set(_qemu_of(child.pid))
        time.sleep(2)
        child.send_signal(signal.SIGINT)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130
    assert _wait(lambda: not guests & qemu_pids(), 10)


def test_sigterm_of_vmtax_run_with_two_levels_boots_no_more_guests(tmp_path):
    # Levels take turns (one boot or run at a time): the level that waits for its turn must
    # not boot its guest after the interrupt, as it once did (two more QEMUs after SIGTERM).
    vmtax = shutil.which("vmtax") or pytest.fail("the vmtax command is not installed")
    env = dict(os.environ, VMTAX_CACHE_DIR=str(tmp_path / "cache"))
    argv = [vmtax, "run", "--levels", "L1,L2", "--accel", "tcg", "--probe", "cpu",
            "--runs", "50", "--db", f"sqlite:///{tmp_path / 't.db'}"]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    seen_after: dict[int, str] = {}
    try:
        assert _wait(lambda: _qemu_of(child.pid), 120), "no QEMU started"
        time.sleep(2)
        at_signal = set(_qemu_of(child.pid))
        child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            for pid in set(_qemu_of(child.pid)) - seen_after.keys():
                with contextlib.suppress(OSError):
                    seen_after[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().decode()[-200:]
            time.sleep(0.05)
        stderr = child.communicate(timeout=5)[1].decode()
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, stderr
    assert "interrupted" in stderr
    booted = {pid: argv for pid, argv in seen_after.items() if pid not in at_signal}
    assert not booted, f"a guest was booted after SIGTERM: {booted}; stderr: {stderr}"
    assert _wait(lambda: not (at_signal | seen_after.keys()) & qemu_pids(), 10)


def test_ctrl_c_of_a_sweep_while_its_guest_boots_kills_the_boot_and_stores_no_unit(tmp_path):
    # The sweep's units run in a thread of the engine; Ctrl-C reaches the main thread, which
    # must cancel the guest still booting (not wait out its boot) and store nothing of the
    # unit. A TCG boot takes 10 s or more here; the signal comes 1 s into it.
    vmtax = shutil.which("vmtax") or pytest.fail("the vmtax command is not installed")
    env = dict(os.environ, VMTAX_CACHE_DIR=str(tmp_path / "cache"))
    db = f"sqlite:///{tmp_path / 's.db'}"
    argv = [vmtax, "sweep", "--level", "L1", "--accel", "tcg", "--steps", "1", "--replicates",
            "1", "--no-intervals", "--warmup", "0", "--window", "2", "--interval", "1", "--db",
            db]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                             text=True, start_new_session=True)  # fmt: skip
    try:
        assert _wait(lambda: _qemu_of(child.pid), 120), "no QEMU started"
        guests = set(_qemu_of(child.pid))
        time.sleep(1)
        assert guests & qemu_pids(), "the guest ended before the signal"
        signalled = time.monotonic()
        os.killpg(child.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        stderr = child.communicate(timeout=60)[1]
        took = time.monotonic() - signalled
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "vmtax: error: interrupted", stderr
    assert took < 8, f"the sweep took {took:.1f} s to stop: it waited for the boot"
    assert _wait(lambda: not guests & qemu_pids(), 10)
    with Store.open(db, read_only=True) as store:
        assert store.experiment(1)["status"] == "interrupted"
        assert len(store.sweeps.steps(1)) == 0


def test_sigkill_of_vmtax_run_leaves_no_qemu_and_no_scratch_dir(tmp_path, cli, monkeypatch):
    # SIGKILL runs no cleanup code in vmtax: the guest goes because the agent's watchdog,
    # which QEMU runs under, sees vmtax's end of its pipe close.
    from test_fleet_netns import vmtax_cmd, vmtax_env
    from test_leftovers import fake_guest, scratch

    tmp = tmp_path / "tmp"  # vmtax's temporary directory, so others' guests do not count
    tmp.mkdir()
    db = f"sqlite:///{tmp_path / 'k.db'}"
    env = dict(vmtax_env(), VMTAX_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp))
    argv = [*vmtax_cmd(), "run", "--levels", "L0,L1", "--accel", "tcg", "--probe", "syscall",
            "--runs", "20", "--db", db]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        assert _wait(lambda: _qemu_of(child.pid) or child.poll() is not None, 300)
        guests = set(_qemu_of(child.pid))
        assert guests, f"no QEMU started: {child.communicate()[1][-2000:]!r}"
        owner = {"host": socket.gethostname(), "pid": child.pid, "pid_start": pid_start(child.pid)}
        time.sleep(1)  # the guest is booting
        assert list(tmp.glob("vmtax-qemu-*"))
        child.kill()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert _wait(lambda: not guests & qemu_pids(), 5), "QEMU outlived its vmtax"
    assert _wait(lambda: not list(tmp.glob("vmtax-qemu-*")), 5), "scratch directory left"
    # A guest left by an older vmtax (made by hand, as this one no longer leaves any) stops
    # the resumed runs, in one line that names it, before anything is measured.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with Store.open(db, read_only=True) as store:
        stored = len(store.runs())
    with fake_guest(scratch(tmp, owner)) as leftover:
        resumed = cli("run", "--resume", "latest", "--db", db)
    assert resumed.returncode == 1, resumed.stderr
    (line,) = resumed.stderr.strip().splitlines()
    assert line.startswith("vmtax: error: ") and f"QEMU pid {leftover.pid} (" in line
    assert "vmtax doctor --clean" in line
    with Store.open(db, read_only=True) as store:
        assert len(store.runs()) == stored


def test_the_watchdog_exits_as_its_child_and_removes_only_a_vmtax_directory(tmp_path):
    agent = str(find_agent())
    refused = subprocess.run([agent, "watchdog", "--fd", "0", "--dir", str(tmp_path), "--",
                              "true"], capture_output=True, text=True)  # fmt: skip
    assert refused.returncode == 2 and "not a vmtax scratch directory" in refused.stderr
    assert tmp_path.is_dir()
    scratch = tmp_path / "vmtax-qemu-w"
    scratch.mkdir()
    lifeline_r, lifeline_w = os.pipe()
    try:
        for script, code in (("exit 7", 7), ("kill -9 $$", -9)):
            out = subprocess.run(
                [agent, "watchdog", "--fd", str(lifeline_r), "--dir", str(scratch), "--",
                 "sh", "-c", script],
                pass_fds=(lifeline_r,), capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert out.returncode == code and out.stdout.strip().isdigit(), out.stderr
            assert scratch.is_dir()  # its controller lives: the directory is the controller's
    finally:
        os.close(lifeline_r)
        os.close(lifeline_w)
