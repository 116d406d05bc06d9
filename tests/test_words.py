"""Words and numbers that say one thing: the notes under compare's table, and one number
format (thousands separated from 1,000 on) in the study-A table and compare's."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from vmtax.report import compare_format
from vmtax.report.terminal import fmt
from vmtax.stats.compare import compare
from vmtax.testing.runs import Config, runs_frame

pytestmark = pytest.mark.fast


def _imprecise_comparison():
    runs, _ = runs_frame(
        [Config("L0"), Config("L1", {"accel": "tcg"}, 5.0), Config("L2", {"accel": "tcg"}, 5.0)],
        runs=6,
        iterations=200,
        seed=21,
    )
    ids = dict(zip(runs["config"], runs["configuration_id"], strict=False))
    imprecise = {(ids["L1 accel=tcg"], "syscall"), (ids["L2 accel=tcg"], "syscall")}
    return compare(runs, "level=L1", resamples=999, imprecise=imprecise)


def test_imprecise_rows_get_one_left_aligned_note_that_does_not_contradict_a_verdict():
    comp = _imprecise_comparison()
    verdicts = set(comp.rows.loc[comp.rows["warnings"].str.contains("imprecise"), "verdict"])
    assert {"faster", "imprecise"} <= verdicts  # a clear verdict among the imprecise rows
    table = compare_format.comparison_table(comp)
    notes = str(table.caption).splitlines()
    about = [n for n in notes if "precision target" in n]
    assert len(about) == 1, notes  # one note, not one a row
    assert about[0].startswith("2 rows missed") and "stands on the test" in about[0]
    assert table.caption_justify == "left"
    out = io.StringIO()
    Console(file=out, width=300).print(table)
    note_line = next(line for line in out.getvalue().splitlines() if "precision target" in line)
    assert note_line.startswith("2 rows"), note_line  # not centred under the table
    markdown = compare_format.render_comparison(comp, "markdown")
    assert str(markdown).count("precision target") == 1


def test_one_number_format_in_every_terminal_table():
    # compare printed 3089 where the study-A table printed 3,089.
    for value, shown in [(3089.2, "3,089"), (12220.0, "12,220"), (1000.0, "1,000"),
                         (999.94, "999.9"), (115.83, "115.8"), (0.5, "0.5000")]:  # fmt: skip
        assert compare_format._num(value) == shown, value
    for value in (3089.2, 12220.0, 1000.0, 1395.4):
        assert compare_format._num(value) == fmt(value), value
