"""The CLI's SIGPIPE handling is its own: a process calling main() in-process (as the tests'
``cli`` fixture does) keeps its handler, and the console command still ends quietly when the
reader of its output goes away."""

from __future__ import annotations

import signal
import subprocess
import sys


def test_main_leaves_the_callers_sigpipe_handler_alone(cli):
    before = signal.getsignal(signal.SIGPIPE)
    assert before != signal.SIG_DFL  # Python ignores SIGPIPE; pytest runs with that
    assert cli("refs", "list").returncode == 0
    assert signal.getsignal(signal.SIGPIPE) == before
    assert cli("compare", "--format", "nope", "--baseline", "level=L0").returncode == 2
    assert signal.getsignal(signal.SIGPIPE) == before


def test_a_closed_pipe_ends_the_command_quietly():
    # `vmtax refs show ... | head -c 1`: the reader leaves after one byte; no traceback.
    cmd = [sys.executable, "-c", "from vmtax.cli import main; main()"]
    writer = subprocess.Popen(
        [*cmd, "refs", "show", "fitzgerald2014"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert writer.stdout is not None
    writer.stdout.read(1)
    writer.stdout.close()
    _, err = writer.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
    assert writer.returncode in (0, -signal.SIGPIPE)
