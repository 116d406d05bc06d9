"""Calls spread over forked worker processes, one per core.

A report's heavy steps (timing-artifact detection, making and rendering figures) are numpy
and matplotlib under the GIL, on data of up to millions of samples. Workers forked after
the calls exist inherit them with their data, so only an index crosses to a worker and only
the (small) result comes back; a pool of ordinary workers would pickle every sample.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_PENDING: Sequence[Callable[[], Any]] = ()


def workers_for(count: int) -> int:
    """How many processes ``count`` calls would get: one per usable core, at most one each."""
    return min(count, len(os.sched_getaffinity(0)))


def run_forked(calls: Sequence[Callable[[], Any]], *, first: Sequence[int] = ()) -> list[Any]:
    """Every call's result, in order; the calls run in forked workers (``first``, the
    indices of the largest, are started first so that no worker ends alone on one)."""
    global _PENDING
    if _PENDING:
        raise RuntimeError("run_forked is not reentrant")
    _PENDING = calls
    # The inherited objects out of the collector's reach: a worker's collection would
    # otherwise touch every one of them and so copy the parent's memory page by page.
    gc.freeze()
    try:
        # fork, whatever the platform default: the workers must inherit _PENDING.
        context = multiprocessing.get_context("fork")
        order = [*first, *(i for i in range(len(calls)) if i not in set(first))]
        with ProcessPoolExecutor(
            workers_for(len(calls)), mp_context=context, initializer=_own_std_streams
        ) as pool:
            futures = {i: pool.submit(_call_pending, i) for i in order}
            return [futures[i].result() for i in range(len(calls))]
    finally:
        _PENDING = ()
        gc.unfreeze()


def _own_std_streams() -> None:
    """New stdout/stderr objects in a worker: a thread of the parent (a progress spinner)
    may have held the old ones' locks at the fork, and that thread does not exist here."""
    sys.stdout = open(os.dup(1), "w", encoding="utf-8", errors="replace")  # noqa: SIM115
    sys.stderr = open(os.dup(2), "w", encoding="utf-8", errors="replace")  # noqa: SIM115


def _call_pending(index: int) -> Any:  # noqa: ANN401
    return _PENDING[index]()
