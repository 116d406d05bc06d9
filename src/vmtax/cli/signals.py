"""Signals the long-running commands (run, sweep) treat alike."""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
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
def interrupts_not_dropped() -> Iterator[None]:
    """While it lasts, an interruption that Python drops is raised again.

    A KeyboardInterrupt raised where Python cannot let an exception out (a weakref callback,
    such as the one importlib uses to clean up a module's import lock, or a ``__del__``) is
    printed as "Exception ignored in ..." and dropped, and the command went on to its end as if
    no Ctrl-C or SIGTERM had come. Such an interrupt goes to ``sys.unraisablehook``. Here the
    hook prints nothing and sends SIGINT to the main thread again, from a thread of its own:
    sent at once, it would be raised inside the hook, where it is dropped again. A real signal
    (not ``_thread.interrupt_main``) also wakes a main thread blocked in a system call. Should
    it land in such a place once more, the hook sends it again."""
    previous = sys.unraisablehook
    main = _thread.get_ident()

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if unraisable.exc_type is KeyboardInterrupt and INTERRUPTED[0]:
            _thread.start_new_thread(signal.pthread_kill, (main, signal.SIGINT))
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


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
