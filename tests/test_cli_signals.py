"""The CLI's SIGPIPE handling is its own: a process calling main() in-process (as the tests'
``cli`` fixture does) keeps its handler, and the console command still ends quietly when the
reader of its output goes away: exit 0, the same for every command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from vmtax.targets.base import find_agent

CMD = [sys.executable, "-c", "from vmtax.cli import main; main()"]


@pytest.mark.fast
def test_main_leaves_the_callers_sigpipe_handler_alone(cli):
    before = signal.getsignal(signal.SIGPIPE)
    assert before != signal.SIG_DFL  # Python ignores SIGPIPE; pytest runs with that
    assert cli("refs", "list").returncode == 0
    assert signal.getsignal(signal.SIGPIPE) == before
    assert cli("compare", "--format", "nope", "--baseline", "level=L0").returncode == 2
    assert signal.getsignal(signal.SIGPIPE) == before


@pytest.mark.fast
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
    assert writer.returncode == 0  # one way for every command: the reader had what it wanted


@pytest.fixture(scope="module")
def store_with_a_run(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("pipe")
    suite = tmp / "s.toml"
    suite.write_text(
        "name = 's'\n[defaults]\nruns = 2\niterations = 50\nduration = 0.05\n"
        "[[probes]]\nprobe = 'cpuid'\n[[probes]]\nprobe = 'syscall'\n"
    )
    db = f"sqlite:///{tmp / 'p.db'}"
    env = os.environ | {"VMTAX_RUN_REPORT": "none", "VMTAX_PROBE": str(find_agent())}
    subprocess.run([*CMD, "run", "--suite", str(suite), "--db", db], check=True, env=env,
                   capture_output=True)  # fmt: skip
    return db


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("results", "show", "1"),
        ("results", "list"),
        ("results", "export", "1", "--format", "csv", "-o", "-"),
        ("compare", "1", "--baseline", "probe=cpuid"),
        ("refs", "show", "fitzgerald2014"),
    ],
)
def test_a_reader_gone_before_the_first_byte_is_exit_0_in_every_command(store_with_a_run, args):
    # `results show N | head -1` exited 141 (killed by SIGPIPE) and export said "cannot write
    # -: Broken pipe" with exit 1, while a `compare | head` whose output fitted the pipe
    # exited 0. Here the reading end is closed before the command starts, so every write fails.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [*CMD, *args, "--db", store_with_a_run] if args[0] != "refs" else [*CMD, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert b"Traceback" not in done.stderr and b"Broken pipe" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
