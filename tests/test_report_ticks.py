"""No tick label of one panel runs into another's (once "80000100000" in a report)."""

from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from vmtax.report.analysis import build
from vmtax.report.gather import load
from vmtax.stats.compare_options import CompareOptions
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.slow


def overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of drawn tick labels (inside their axis' limits) of different axes that overlap."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for index, ax in enumerate(fig.axes):
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = min(limits), max(limits)
            slack = 1e-9 * abs(hi - lo)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - slack <= tick.get_loc() <= hi + slack:
                    continue  # matplotlib does not draw it
                for label in (tick.label1, tick.label2):
                    if label.get_visible() and label.get_text():
                        boxes.append((index, label.get_text(), label.get_window_extent(renderer)))
    return [
        (a[1], b[1])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[0] != b[0] and a[2].overlaps(b[2])
    ]


@pytest.mark.parametrize("iterations", [12_000])  # block-reduced meshes beside a zoom
def test_no_figure_has_tick_labels_that_run_together(store, iterations):
    populate(
        store, levels=("L0", "L1", "L2"), probes=("cpuid", "io"), runs=6, iterations=iterations
    )
    model = build(load(store, ["exp=latest"], "level=L0"), options=CompareOptions(resamples=999))
    for spec in model.figures:
        assert overlapping_tick_labels(spec.draw()) == [], spec.key
