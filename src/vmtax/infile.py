"""Every input file vmtax reads that may block: a FIFO with no writer yet, a slow pipe.

Opening a FIFO waits for a writer, and reading one waits for data. Both are fine, but the
standard library waits without a word: here, a wait that lasts more than a second is said
in one line on stderr, once. Ctrl-C (and SIGTERM, where the command turns it into Ctrl-C)
ends the wait as it ends any command: the signal interrupts the blocked ``open`` or
``read``, and Python retries that call only when the signal handler returns instead of
raising (PEP 475).
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: Seconds a wait lasts before it is said.
SAY_AFTER_S = 1.0
_CHUNK = 1 << 20


class TooLong(ValueError):
    """An input past its bound: a line longer than ``max_line`` bytes, or more than
    ``max_bytes`` in all (``/dev/zero`` never ends and has no newline)."""


def say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Watch:
    """A thread that says, once per kind of wait, what a blocked call is waiting for."""

    def __init__(self, say: Callable[[str], None], after: float) -> None:
        self._say = say
        self._after = after
        self._lock = threading.Lock()
        self._what: str | None = None
        self._since = 0.0
        self._said: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vmtax-input-wait", daemon=True)
        self._thread.start()

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        with self._lock:
            self._what, self._since = what, time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._what = None

    def _loop(self) -> None:
        while not self._stop.wait(max(0.01, min(0.2, self._after))):
            with self._lock:
                what = self._what
                due = (
                    what is not None
                    and what not in self._said
                    and time.monotonic() - self._since >= self._after
                )
                if due and what is not None:
                    self._said.add(what)
            if due and what is not None:
                self._say(what)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def lines(
    path: str | Path,
    *,
    say: Callable[[str], None] = say_on_stderr,
    after: float = SAY_AFTER_S,
    max_line: int | None = None,
    max_bytes: int | None = None,
) -> Iterator[Iterator[bytes]]:
    """The lines of ``path`` (bytes, newline kept), read as they come; a wait longer than
    ``after`` seconds for a writer or for data is said through ``say``. OSError as ``open``
    and ``read`` raise it; TooLong past ``max_line`` bytes in one line or ``max_bytes`` in
    all (None: no bound)."""
    watch = _Watch(say, after)
    try:
        with watch.waiting(f"vmtax: waiting for a writer to open {path} (Ctrl-C to stop)"):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            kind = "FIFO" if stat.S_ISFIFO(os.fstat(fd).st_mode) else "file"
            yield _read_lines(fd, watch, f"vmtax: waiting for data on {kind} {path} "
                              "(it ends when its writer closes it; Ctrl-C to stop)",
                              max_line, max_bytes)  # fmt: skip
        finally:
            os.close(fd)
    finally:
        watch.close()


def _read_lines(
    fd: int, watch: _Watch, what: str, max_line: int | None, max_bytes: int | None
) -> Iterator[bytes]:
    rest = b""
    total = 0
    while True:
        with watch.waiting(what):
            chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise TooLong(f"more than {max_bytes:,} bytes")
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        # Only the unfinished line can grow past a chunk: a line is held to max_line + _CHUNK.
        if max_line is not None and len(rest) > max_line:
            raise TooLong(f"a line longer than {max_line:,} bytes")
        for part in parts:
            yield part + b"\n"
    if rest:
        yield rest


def read_text(
    path: str | Path, *, say: Callable[[str], None] = say_on_stderr, after: float = SAY_AFTER_S
) -> str:
    """The whole of ``path`` as UTF-8 text, by the rules of :func:`lines` (UnicodeDecodeError
    for bytes that are not UTF-8)."""
    with lines(path, say=say, after=after) as got:
        return b"".join(got).decode("utf-8")
