"""`vmtax run` at a terminal ends when the measuring does: its report is written after it
by a child in its own session (out of reach of the terminal's Ctrl-C), atomically, and a
line on the terminal says when it is there. Elsewhere (a pipe, as in the other tests) the
report is written before the run returns."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vmtax.targets.base import find_agent


def _vmtax() -> str:
    return shutil.which("vmtax") or str(Path(sys.executable).parent / "vmtax")


def _read_all(fd: int, into: list[str]) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every holder of the terminal's other end has gone
            return
        if not chunk:
            return
        into.append(chunk.decode("utf-8", "replace"))


@pytest.mark.slow
def test_at_a_terminal_the_run_returns_first_and_its_report_follows(tmp_path):
    report = tmp_path / "r-1.html"
    env = {**os.environ, "VMTAX_PROBE": str(find_agent()),
           "VMTAX_RUN_REPORT": str(tmp_path / "r-{id}.html")}  # fmt: skip
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [_vmtax(), "run", "--probe", "cpuid", "--runs", "2", "--duration", "0.05", "--db",
         f"sqlite:///{tmp_path / 'b.db'}"],
        stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=tmp_path,
    )  # fmt: skip
    os.close(slave)
    seen: list[str] = []
    reader = threading.Thread(target=_read_all, args=(master, seen), daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=300) == 0, "".join(seen)
        assert not report.exists()  # the run returned before its report was written
        time.sleep(0.5)  # the terminal's last lines
        found = re.search(r"report: \S+ \(being written in the background by process (\d+);",
                          "".join(seen))  # fmt: skip
        assert found, "".join(seen)
        child = int(found.group(1))
        assert os.getsid(child) == child != os.getsid(0)  # a Ctrl-C here does not reach it
        reader.join(timeout=300)  # the child holds the terminal until it has written
    finally:
        os.close(master)
    text = "".join(seen)
    assert f"vmtax: report of experiment 1 written: {report} (" in text, text
    assert "Traceback" not in text
    assert report.read_text().rstrip().endswith("</html>")
    assert not list(tmp_path.glob(".r-1.html.*"))  # no temporary file left beside it


@pytest.mark.fast
def test_the_child_waits_for_the_run_that_started_it_and_only_for_it(monkeypatch):
    from vmtax.cli import background_report

    # Started by a run that has returned already (reparented before it looked): no wait.
    t0 = time.monotonic()
    background_report._after_the_run(os.getpid())  # this process is nobody's parent here
    assert time.monotonic() - t0 < 0.5
    # Its run still there (this test's own parent stands in for it): it waits, up to the cap.
    monkeypatch.setattr(background_report, "PARENT_WAIT_S", 0.4)
    t0 = time.monotonic()
    background_report._after_the_run(os.getppid())
    assert 0.4 <= time.monotonic() - t0 < 5
