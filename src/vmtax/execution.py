"""The execution engine: lanes of units, measured and stored one after another.

An execution is a set of lanes (``Lane``), each a row of the progress display whose units run
one after another in its own thread: a run's lanes are its targets (``vmtax.runner``: a unit
is one run), a sweep's one lane is its rounds of guests (``vmtax.sweep.run``: a unit is one
step of one replicate). ``Engine`` drives the lanes in a bounded thread pool and stops them
on Ctrl-C or SIGTERM (``Lane.cancel`` kills what is in flight); ``Storing`` is the one place
they write to the store, and ends the experiment ok, failed or interrupted however the
execution ends; ``Progress`` is the one shape of what a display is told.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Protocol

from vmtax.store.runtimes import RunTimes

if TYPE_CHECKING:
    from vmtax.store import Store


class Progress(Protocol):
    """What an execution tells a progress display, a row per lane (a run's targets, or a
    sweep): its total, a line per run or unit done, and its last line. `vmtax run` draws a
    rich bar per row on stderr, `vmtax sweep` prints each unit's line."""

    def add_target(self, name: str, total: int) -> None: ...
    def advance(self, name: str, description: str) -> None: ...
    def finish(self, name: str, description: str, *, failed: bool) -> None: ...


class NoProgress:
    """A progress display that shows nothing (an execution nobody watches)."""

    def add_target(self, name: str, total: int) -> None:
        del name, total

    def advance(self, name: str, description: str) -> None:
        del name, description

    def finish(self, name: str, description: str, *, failed: bool) -> None:
        del name, description, failed


class Storing:
    """The one place an execution writes to the store: its runs (``add_run``), a sweep's
    units (``add_unit``), and the experiment's status, set once however the execution ends
    (``settling``). Targets run in threads and share one store connection, so every write
    holds one lock."""

    def __init__(self, store: Store, experiment_id: int) -> None:
        self.store = store
        self.experiment_id = experiment_id
        #: The status ``settling`` stores: ok until the execution says otherwise.
        self.status = "ok"
        self._lock = threading.Lock()

    def call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        with self._lock:
            return fn(**kwargs)

    def add_run(self, **kwargs: Any) -> int:
        """One run and its samples (``Store.add_run``), committed before it returns."""
        return int(self.call(self.store.add_run, experiment_id=self.experiment_id, **kwargs))

    def add_unit(
        self, row: dict[str, Any], samples: Sequence[dict[str, Any]], times: RunTimes
    ) -> int:
        """One sweep unit with its samples, committed whole (``store.sweeps.add_step``)."""
        row = {"experiment_id": self.experiment_id, **row}
        row.update(started_at=times.started_at, ended_at=times.end().ended_at)
        return int(self.call(self.store.sweeps.add_step, step=row, samples=samples))

    @contextlib.contextmanager
    def settling(
        self, cleanup: Callable[[], None] = lambda: None, *, only_if_stopped: bool = False
    ) -> Iterator[None]:
        """Store the experiment's status when the block ends, then ``cleanup()``; Ctrl-C
        waits for both (a second Ctrl-C halfway left the experiment "running"). An error
        ends it failed, Ctrl-C interrupted, unless it was marked already. ``only_if_stopped``:
        a stage before the execution, which stores a status only when it does not end well."""
        try:
            yield
        except BaseException as exc:
            if self.status == "ok":
                self.status = "failed" if isinstance(exc, Exception) else "interrupted"
            raise
        finally:
            if self.status != "ok" or not only_if_stopped:
                with interrupts_deferred():
                    self.call(
                        self.store.finish_experiment,
                        experiment_id=self.experiment_id,
                        status=self.status,
                    )
                    cleanup()


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends (cleanup that must finish: the stored
    status, the guests); one that came meanwhile is raised then, unless an exception is
    already on its way out. Outside the main thread signals cannot be set: nothing changes."""
    got: list[int] = []

    def note(signum: int, _frame: object) -> None:
        got.append(signum)

    try:
        previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if got and sys.exc_info()[0] is None:
        raise KeyboardInterrupt


class Stopped(Exception):  # noqa: N818 - not an error: the lane saw the stop and ended
    """Raised in a lane that noticed the execution's stop (Ctrl-C) in the middle of a unit:
    the unit is not stored, and the lane ends quietly."""


class Lane(Protocol):
    """One row of an execution, run in its own thread: its units one after another, each
    measured and stored before the next (``run_unit``), and its last line at the end.

    ``units()`` may do what comes before the first unit (boot, fingerprint) and may decide as
    it goes (adaptive sampling; a lane given up after a failure): it is resumed only after
    the previous unit's progress line is out. ``cancel()`` comes from another thread on
    Ctrl-C: it kills what is in flight, so that the lane's thread ends soon."""

    name: str
    #: Units it means to run (its progress row's total).
    total: int

    def units(self) -> Iterable[Any]: ...
    def run_unit(self, unit: Any) -> str: ...
    def end(self, error: BaseException | None) -> tuple[str, bool]: ...
    def cancel(self) -> None: ...


class Engine:
    """Drives an execution's lanes: each in a thread of a bounded pool, its units in order,
    a progress line per unit and a last line per lane. The main thread only waits, in short
    steps, so that Ctrl-C and SIGTERM reach it at once; then every lane is cancelled, the
    threads are waited for and the interrupt goes on to the caller (``Storing.settling``
    marks the experiment)."""

    def __init__(
        self,
        progress: Progress | None = None,
        *,
        max_workers: int = 4,
        stop: threading.Event | None = None,
    ) -> None:
        self.progress: Progress = progress or NoProgress()
        self.max_workers = max(1, max_workers)
        self.stop = stop or threading.Event()

    def run(self, lanes: Sequence[Lane]) -> list[BaseException | None]:
        """Run every lane to its end; each lane's error (None when it ended well). A Ctrl-C,
        here or raised in a lane, is raised once every lane has stopped."""
        for lane in lanes:
            self.progress.add_target(lane.name, lane.total)
        if not lanes:
            return []
        pool = ThreadPoolExecutor(
            max_workers=min(self.max_workers, len(lanes)), thread_name_prefix="vmtax-lane"
        )
        futures: list[Future[None]] = [pool.submit(self._drive, lane) for lane in lanes]
        try:
            pending = set(futures)
            while pending:
                # Short waits keep the main thread responsive to signals.
                _, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
                stopped = [f for f in futures if f.done() and _interrupt(f.exception())]
                if stopped:
                    raise stopped[0].exception()  # type: ignore[misc]
        except BaseException:
            self.stop.set()
            for lane in lanes:
                with contextlib.suppress(Exception):
                    lane.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return [f.exception() for f in futures]

    def _drive(self, lane: Lane) -> None:
        error: BaseException | None = None
        try:
            for unit in lane.units():
                if self.stop.is_set():
                    return
                line = lane.run_unit(unit)
                self.progress.advance(lane.name, line)
        except Stopped:
            return
        except BaseException as exc:
            error = exc
            raise
        finally:
            last, failed = lane.end(error)
            if not self.stop.is_set() and not _interrupt(error):
                self.progress.finish(lane.name, last, failed=failed)


def _interrupt(exc: BaseException | None) -> bool:
    """Whether a lane's error is a Ctrl-C (or SIGTERM made one), not a failure of its own."""
    return exc is not None and not isinstance(exc, Exception)
