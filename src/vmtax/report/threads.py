"""One BLAS thread while a report is made.

A report spreads its heavy steps over forked processes, one per core (``report.forked``).
The OpenBLAS that numpy and scipy load starts a thread per core as well, and its threads
wait for work by spinning: on top of a process per core, a BLAS call burnt about twice its
CPU time (the 36 kernel density estimates of a two-level report's modality measures took
1.5 CPU-s instead of 0.6 on a loaded 2-core VM, the report's timing artifacts 7.0 instead
of 5.5). The results are the same: one thread does the same arithmetic. threadpoolctl sets
every loaded BLAS (numpy's and scipy's each ship one) and restores it after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Inside: every loaded BLAS runs its calls on one thread (forked processes inherit
    it); after: as many as before."""
    # heavy: threadpoolctl reads the loaded libraries, only when a report is made
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def blas_threads() -> list[int]:
    """The thread count of every loaded BLAS (for tests)."""
    # heavy: as above
    from threadpoolctl import threadpool_info

    return [int(lib["num_threads"]) for lib in threadpool_info() if lib["user_api"] == "blas"]
