"""Ctrl-C or SIGTERM while `vmtax` is still starting (importing its commands) ends with one
line and exit 130, never a KeyboardInterrupt traceback: the console script's entry point,
``vmtax.entry:main``, handles both before it imports the CLI.

Each case starts the entry point as the console script does, waits until its handlers are in
(the kernel's list of caught signals names SIGTERM, which Python itself leaves alone), then
sends the signal that many milliseconds later: 0 and 50 land while the commands are being
imported (a second or more), the later ones during the import or in the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "from vmtax.entry import main; main()"
DELAYS_MS = (0, 50, 100, 200, 400, 800)


def test_the_console_script_is_the_light_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["vmtax"] == "vmtax.entry:main"


def _handlers_in(pid: int, deadline: float) -> bool:
    """Whether the process catches SIGTERM yet (SigCgt in /proc/PID/status)."""
    bit = 1 << (signal.SIGTERM - 1)
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        caught = next(ln for ln in status.splitlines() if ln.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & bit:
            return True
        time.sleep(0.002)
    return False


CASES = [(signal.SIGINT, ms) for ms in DELAYS_MS] + [(signal.SIGTERM, 50), (signal.SIGTERM, 400)]


@pytest.mark.parametrize(
    ("signum", "delay_ms"), CASES, ids=[f"{signal.Signals(s).name}-{ms}ms" for s, ms in CASES]
)
def test_a_signal_while_starting_is_one_line_and_130(tmp_path, signum, delay_ms):
    # `results list` on a store that does not exist yet: a command that imports the whole CLI
    # and opens a store, so a late signal lands in the command, an early one in the imports.
    argv = [sys.executable, "-c", ENTRY, "results", "list", "--db", f"sqlite:///{tmp_path}/v.db"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _handlers_in(proc.pid, time.monotonic() + 60), "the entry point never started"
        time.sleep(delay_ms / 1000)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 1 and "no such file" in err:
        # The command had finished before the signal came (a quiet machine, a long delay):
        # its own end, one line saying that the store does not exist (in a clean run it was
        # done within 800 ms).
        assert delay_ms >= 200 and err.count("\n") == 1, err
        return
    assert "Traceback" not in err, err
    assert err.count("\n") <= 1 and err.strip() == "vmtax: error: interrupted", err
    assert proc.returncode == 130, (proc.returncode, err)


def test_without_the_entry_point_the_same_signal_was_a_traceback(tmp_path):
    """The case the entry point exists for: the CLI imported directly, as the console script
    did before, and SIGINT during the import."""
    code = "import os; os.write(1, b'.'); from vmtax.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        assert proc.stdout is not None and proc.stdout.read(1) == "."
        proc.send_signal(signal.SIGINT)  # the import of the commands has just begun
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "KeyboardInterrupt" in err and proc.returncode != 130, (proc.returncode, err)


@pytest.mark.parametrize(
    ("code", "status", "stderr"),
    [(3, 3, ""), (None, 0, ""), ("vmtax: a message", 1, "vmtax: a message\n"), (256 + 2, 2, "")],
)
def test_the_exit_skips_the_teardown_but_not_the_atexit_handlers_or_the_output(
    tmp_path, code, status, stderr
):
    """A command ends through ``exit_now``: the atexit handlers run (they stop guests and
    remove temporary files), buffered output reaches the reader, the status is sys.exit's."""
    mark = tmp_path / "atexit-ran"
    script = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))\n"
        "sys.stdout.write('buffered, no newline')\n"
        "from vmtax.entry import exit_now\n"
        f"exit_now({code!r})\n"
        "print('not reached')\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert (res.returncode, res.stdout, res.stderr) == (status, "buffered, no newline", stderr)
    assert mark.read_text() == "ran"


def test_the_exit_waits_for_a_thread_still_working(tmp_path):
    """A non-daemon thread still alive takes the ordinary exit, which joins it first."""
    done = tmp_path / "thread-done"
    script = (
        "import threading, time\n"
        "def work():\n"
        "    time.sleep(0.5)\n"
        f"    open({str(done)!r}, 'w').write('done')\n"
        "threading.Thread(target=work).start()\n"
        "from vmtax.entry import exit_now\n"
        "exit_now(4)\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert res.returncode == 4 and done.read_text() == "done", res.stderr
