"""The report of a `vmtax run` at a terminal, written by a child process after the run ends.

Measuring ends, the table is printed and the prompt comes back; the report (most of a
minute on a busy two-core machine) follows in a child in its own session, so a Ctrl-C at
the terminal does not reach it and nothing measures beside it. The child starts once the
run has returned, runs at the lowest CPU priority, writes the file atomically
(``vmtax.outfile``: a reader never sees half of it, an interrupted child leaves none) and
says in one line on the terminal where the report is or why it was not written. Output
that is not a terminal (a script, CI) gets the report before the run returns, so the file is
there when the next command looks.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from vmtax.cli.report_output import described
from vmtax.errors import VmtaxError
from vmtax.stats.compare_options import CompareOptions

if TYPE_CHECKING:
    from vmtax.store import Store

_CHILD = "from vmtax.cli.background_report import main; main()"
#: The longest the child waits for the run to return before it writes the report anyway.
PARENT_WAIT_S = 60.0


def wanted() -> bool:
    """Whether a run's report goes to the background: someone is at a terminal."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def start(store: Store, exp_id: int, out: Path, options: CompareOptions) -> int | None:
    """Start the child writing experiment ``exp_id``'s report to ``out`` (its comparison
    made with ``options``); its process id, or None when it could not be started (the caller then
    writes the report itself)."""
    # The store's URL with its password goes through the environment, not the command
    # line, which every user of the machine can read.
    env = {**os.environ, "VMTAX_DB": store.url_with_password()}
    try:
        child = subprocess.Popen(
            # The run's pid last: the child waits for it to return before writing.
            [
                sys.executable,
                "-c",
                _CHILD,
                str(exp_id),
                str(out),
                json.dumps(asdict(options)),
                str(os.getpid()),
            ],
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError:
        return None
    return child.pid


def _after_the_run(parent: int) -> None:
    """Wait until the run that started this child (process ``parent``) has returned: the
    child is reparented then, or already was when it got here. So the prompt comes back
    first by construction, not by winning a race for the CPU on a loaded machine; a run
    still there after PARENT_WAIT_S is not waited for any longer."""
    deadline = time.monotonic() + PARENT_WAIT_S
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    """The child: write the report, then one line on stderr (exit 1 when not written)."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.report import stored_run_report

    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 19)  # after the measuring, and below anything else
    exp_id, out = int(sys.argv[1]), Path(sys.argv[2])
    _after_the_run(int(sys.argv[4]))
    options = CompareOptions(**json.loads(sys.argv[3]))
    try:
        result = stored_run_report(None, exp_id, out, options)
    except VmtaxError as exc:
        _say(f"vmtax: report of experiment {exp_id} not written: {exc.message}")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    _say(f"vmtax: report of experiment {exp_id} written: {described(result)}")


def _say(line: str) -> None:
    # The terminal may be gone by now: the report is on disk either way.
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)
