"""The console script's entry point: Ctrl-C and SIGTERM are handled before the CLI loads.

Importing ``vmtax.cli`` (typer, rich and every command's module) takes a second or more, and
a Ctrl-C in that second used to end in a KeyboardInterrupt traceback, since the CLI's own
handling starts only in ``vmtax.cli.main``. This module imports nothing heavy: it installs
handlers that print the one line and exit 130, then loads the CLI and hands over to it.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

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
        sys.exit(130)


if __name__ == "__main__":
    main()
