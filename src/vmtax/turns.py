"""Turns: targets that share one machine run their steps in the plan's order, one at a time.

A lock alone gives mutual exclusion, not order: CPython's lock is not FIFO, so one level could
take it several times in a row and the plan's seeded order would not be what runs. ``Turns``
hands the machine to the slots in the planned sequence; a slot asks for its turn before each
run and waits until the sequence reaches it. Steps added beyond the plan (adaptive sampling)
go round robin over the slots still running. A slot that finishes or fails leaves, and its
remaining planned turns are skipped, so nobody waits for it. No turn is handed out until
every slot is ready (its guest booted), so a run never waits behind another level's boot and
its recorded start and end are its own.

Python's threading and queue modules have no ordered hand-off between threads, hence this
small condition-variable turnstile.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class Turns:
    def __init__(self, planned: Iterable[int], slots: Iterable[int]) -> None:
        self._planned = deque(planned)
        self._active = set(slots)
        self._unready = set(self._active)
        self._last: int | None = None
        self._cond = threading.Condition()

    def _whose_turn(self) -> int | None:
        if self._unready:
            return None
        while self._planned and self._planned[0] not in self._active:
            self._planned.popleft()
        if self._planned:
            return self._planned[0]
        if not self._active:
            return None
        ordered = sorted(self._active)
        after = [s for s in ordered if self._last is None or s > self._last]
        return (after or ordered)[0]

    @contextmanager
    def turn(self, slot: int, stop: threading.Event) -> Iterator[bool]:
        """Wait for ``slot``'s turn; yields False (no turn taken) once ``stop`` is set."""
        with self._cond:
            while self._whose_turn() != slot and not stop.is_set():
                self._cond.wait(0.2)
            # Once stopped, not even a turn that has just come is taken: its run would start
            # after Ctrl-C, where a target on this machine still runs it (LocalTarget).
            granted = self._whose_turn() == slot and not stop.is_set()
        if not granted:
            yield False
            return
        try:
            yield True
        finally:
            with self._cond:
                if self._planned and self._planned[0] == slot:
                    self._planned.popleft()
                self._last = slot
                self._cond.notify_all()

    def ready(self, slot: int) -> None:
        """``slot`` is prepared (booted) and can take turns."""
        with self._cond:
            self._unready.discard(slot)
            self._cond.notify_all()

    def leave(self, slot: int) -> None:
        """``slot`` runs nothing more: its planned turns are skipped."""
        with self._cond:
            self._active.discard(slot)
            self._unready.discard(slot)
            self._cond.notify_all()
