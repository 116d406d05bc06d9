"""The console script's entry point: Ctrl-C and SIGTERM are handled before the CLI loads.

Importing ``vmtax.cli`` (typer, rich and every command's module) takes a second or more, and
a Ctrl-C in that second used to end in a KeyboardInterrupt traceback, since the CLI's own
handling starts only in ``vmtax.cli.main``. This module imports nothing heavy: it installs
handlers that print the one line and exit 130, then loads the CLI and hands over to it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import NoReturn

INTERRUPTED = b"vmtax: error: interrupted\n"


def _while_loading(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    # Nothing is open or written yet: end at once, without unwinding a half-done import.
    os.write(2, INTERRUPTED)
    os._exit(130)


def main() -> None:
    """``vmtax``: handle SIGINT and SIGTERM while the CLI loads, then run it."""
    signal.signal(signal.SIGINT, _while_loading)
    signal.signal(signal.SIGTERM, _while_loading)
    try:
        # heavy (typer, rich, every command's module): imported once the handlers are in
        from vmtax.cli import main as cli_main

        # From here the CLI's own handling: Ctrl-C and SIGTERM raise KeyboardInterrupt, which
        # every command turns into a clean stop (agents killed, runs marked interrupted).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        cli_main()
    except KeyboardInterrupt:
        # One that lands before the CLI's own try block (or after it) ends the same way.
        os.write(2, INTERRUPTED)
        exit_now(130)
    except SystemExit as done:  # how the CLI ends, every time
        exit_now(done.code)
    exit_now(0)


def exit_now(code: object) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's teardown.

    With the command done, the teardown only frees the two thousand modules the CLI loaded:
    0.5 to 1.5 s on a 2-core machine after every command, a measured run's table already
    printed. The atexit handlers still run (they stop guests and remove temporary files)
    and the streams are flushed; while a thread other than the main one still works, the
    ordinary exit waits for it instead."""
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        raise SystemExit(code)
    # CPython's own runner of the atexit handlers, the one the ordinary exit calls: no
    # public function runs them, and os._exit alone would skip them.
    atexit._run_exitfuncs()
    if code is None or isinstance(code, int):
        status = code or 0
    else:  # sys.exit("message") prints it and exits 1
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a reader gone away: nothing more to tell it
            stream.flush()
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
