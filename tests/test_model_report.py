"""The report's predicted-vs-measured table (the nested-cost model on the selected runs)."""

from __future__ import annotations

import numpy as np
import pytest

from test_model import _measured_levels, _noisy, _populate
from vmtax.experiment.report import write_report
from vmtax.stats.compare_options import CompareOptions


@pytest.mark.slow
def test_markdown_report_shows_predicted_vs_measured(store, tmp_path):
    _populate(store, _measured_levels(np.random.default_rng(5)))
    out = tmp_path / "report.md"
    write_report(store, ["exp=latest"], out, fmt="markdown", options=CompareOptions(resamples=200))
    text = out.read_text()
    head = (
        "Predicted (and decomposed) vs measured: calibrated on L2 (the VM) and L3 (the nested VM)"
    )
    assert head in text
    section = text.split("Predicted (and decomposed) vs measured", 1)[1].split("## 3.", 1)[0]
    # L4 was measured: its row has the measured mean and the error; it is a prediction (no
    # data from L4 went into it).
    l4 = [line for line in section.splitlines() if line.startswith("| cpuid | L4 |")]
    assert len(l4) == 1 and l4[0].count("|") == 12
    cells = [c.strip() for c in l4[0].strip("|").split("|")]
    assert cells[2] == "prediction" and cells[3] == "held out"
    assert cells[6] and cells[7].startswith(("+", "-"))
    # The ratio baseline beside it, with its error, and the score of both.
    assert cells[8] and cells[9].startswith(("+", "-"))
    assert "model: median" in section and "ratio baseline: median" in section


@pytest.mark.fast
def test_report_without_two_levels_of_an_exit_probe_has_no_prediction(store, tmp_path):
    _populate(store, {"L2": {"memory": _noisy(np.random.default_rng(0), 30.0)}})
    out = tmp_path / "report.html"
    write_report(store, ["exp=latest"], out, options=CompareOptions(resamples=200))
    assert "vs measured" not in out.read_text()
