"""Forked workers for the report's heavy steps: calls that could not be pickled (lambdas
over large arrays) run in real worker processes, and their results come back in order."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vmtax.report.forked import run_forked, workers_for

pytestmark = pytest.mark.fast


def test_unpicklable_calls_run_in_other_processes_in_order():
    if workers_for(2) < 2:
        pytest.skip("one usable core: nothing is forked")
    data = np.arange(4_000_000, dtype=np.float64).reshape(8, -1)  # 32 MB, never pickled
    calls = [lambda row=row: (os.getpid(), float(data[row].sum())) for row in range(8)]
    results = run_forked(calls, first=[7, 6])
    assert [total for _, total in results] == [float(row.sum()) for row in data]
    assert os.getpid() not in {pid for pid, _ in results}


def test_a_failing_call_raises_in_the_caller_and_the_next_batch_runs():
    def boom():
        raise ValueError("no such probe")

    with pytest.raises(ValueError, match="no such probe"):
        run_forked([lambda: 1, boom, lambda: 3])
    assert run_forked([lambda: "again", lambda: "fine"]) == ["again", "fine"]


def _titled_with_its_process(key: str):  # noqa: ANN202 - a matplotlib Figure
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1))
    fig.suptitle(f"{key} drawn by {os.getpid()}")
    return fig


def test_the_first_figure_of_each_shared_set_up_is_drawn_before_the_fork():
    # The first of each set-up is drawn in this process, so that every worker inherits it
    # made; the rest, and the figures that share nothing, in workers; all in order.
    from functools import partial

    from vmtax.report.svg import render_all

    if workers_for(2) < 2:
        pytest.skip("one usable core: nothing is forked")
    keys = [f"fig{i}" for i in range(7)]
    shares = [None, ("mesh", 2), ("mesh", 2), ("mesh", 3), None, ("mesh", 3), ("mesh", 2)]
    drawn = render_all([(k, partial(_titled_with_its_process, k)) for k in keys], shares=shares)
    here = f"drawn by {os.getpid()}<"
    assert [f"{key} drawn by" in svg for key, svg in zip(keys, drawn, strict=True)] == [True] * 7
    assert [here in svg for svg in drawn] == [False, True, False, True, False, False, False]
    # Every figure the first of its set-up: all drawn here, and nothing forked.
    alone = render_all([(k, partial(_titled_with_its_process, k)) for k in keys], shares=keys)
    assert all(here in svg for svg in alone)
