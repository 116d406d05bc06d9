"""Signals the long-running commands (run, sweep) treat alike."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

#: Whether SIGINT or SIGTERM has come (set by interrupt before it raises).
INTERRUPTED = [False]


def interrupt(signum: int, frame: object) -> None:
    """Ctrl-C's default, remembered: an import it breaks (a C extension initialising) comes
    out as an ImportError that does not say it was interrupted."""
    del signum, frame
    INTERRUPTED[0] = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM gets the same clean stop as Ctrl-C: kill agents, mark the experiment
    interrupted (inside, SIGTERM raises KeyboardInterrupt)."""
    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (e.g. called from a test's thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
