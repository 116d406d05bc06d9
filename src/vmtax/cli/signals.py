"""Signals the long-running commands (run, sweep) treat alike."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM gets the same clean stop as Ctrl-C: kill agents, mark the experiment
    interrupted (inside, SIGTERM raises KeyboardInterrupt)."""
    try:
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread (e.g. called from a test's thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
