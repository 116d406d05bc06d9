"""The report's figures and words without overlaps: a value label never covers a whisker,
tick labels of one axis never run together, a legend covers no data, no text leaves its
figure, and the report's title and notes say what they mean once. Measured on the figure
objects with matplotlib's Agg renderer (text extents come from the font): deterministic,
and cheaper than a browser. The page itself is checked in test_report_page.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from vmtax.report import analysis, figures, gather, write_model
from vmtax.stats.compare_options import CompareOptions
from vmtax.testing.report_store import populate

pytestmark = pytest.mark.fast


def drawn(fig):
    """The figure drawn once (every text laid out) and its renderer."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def whisker_boxes(fig, renderer) -> list[Bbox]:
    """One box per whisker segment and per cap of every error bar in ``fig``, in pixels."""
    boxes = []
    for ax in fig.axes:
        for child in ax.get_children():
            if isinstance(child, LineCollection):  # the whiskers: one segment each
                pad = max(child.get_linewidths()) * fig.dpi / 72 / 2
                for seg in child.get_segments():
                    xy = ax.transData.transform(np.asarray(seg))
                    (x0, y0), (x1, y1) = xy.min(axis=0), xy.max(axis=0)
                    boxes.append(Bbox([[x0 - pad, y0 - pad], [x1 + pad, y1 + pad]]))
            elif isinstance(child, Line2D) and child.get_marker() in ("|", "_"):  # the caps
                half = child.get_markersize() * fig.dpi / 72 / 2
                for x, y in ax.transData.transform(np.asarray(child.get_xydata())):
                    boxes.append(Bbox([[x - half, y - half], [x + half, y + half]]))
    return boxes


def value_labels(fig):
    return [t for ax in fig.axes for t in ax.texts if isinstance(t, Annotation) and t.get_text()]


def assert_labels_clear_of_whiskers(fig) -> None:
    renderer = drawn(fig)
    whiskers = whisker_boxes(fig, renderer)
    labels = value_labels(fig)
    assert whiskers and labels  # the check has something to check
    for label in labels:
        box = label.get_window_extent(renderer)
        hits = [w for w in whiskers if box.overlaps(w)]
        assert not hits, f"{label.get_text()!r} at {box} covers a whisker at {hits[0]}"
        inside = label.axes.get_window_extent(renderer)
        assert inside.x0 - 1 <= box.x0 and box.x1 <= inside.x1 + 1, label.get_text()
        assert inside.y0 - 1 <= box.y0 and box.y1 <= inside.y1 + 1, label.get_text()


def tick_labels(ax, renderer):
    """The drawn tick labels (inside the axis' limits) of each axis of ``ax``."""
    out = []
    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        lo, hi = min(limits), max(limits)
        slack = 1e-9 * abs(hi - lo)
        boxes = []
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            if not lo - slack <= tick.get_loc() <= hi + slack:
                continue
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text():
                    boxes.append((label.get_text(), label.get_window_extent(renderer)))
        out.append(boxes)
    return out


def level_rows(resp: list[float], spread: float = 0.05, throughput: bool = True) -> pd.DataFrame:
    """describe()'s columns for one probe, a row per configuration."""
    n = len(resp)
    mean = np.asarray(resp, dtype=float)
    thr = 1e9 / mean if throughput else np.full(n, np.nan)
    return pd.DataFrame(
        {
            "config": [f"L{i} accel=tcg vcpus=2" for i in range(n)],
            "throughput_mean": thr,
            "throughput_ci_low": thr * (1 - spread),
            "throughput_ci_high": thr * (1 + spread),
            "throughput_unit": ["ops/s" if throughput else None] * n,
            "resp_mean": mean,
            "resp_ci_low": mean * (1 - spread),
            "resp_ci_high": mean * (1 + spread),
            "unit": ["ns"] * n,
        }
    )


def overhead_rows(configs: int, probes: int = 12) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = []
    for j in range(configs):
        for i in range(probes):
            value = float(rng.uniform(1.2, 40.0)) * (j + 1)
            rows.append(
                {
                    "probe": f"probe{i}",
                    "config": f"L{j + 1} accel=tcg",
                    "overhead": value,
                    "ci_low": value / 1.6,
                    "ci_high": value * (1.03 if i % 2 else 6.0),  # short and long whiskers
                    "is_baseline": False,
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("spread", [0.02, 0.05, 0.6])
def test_level_bars_write_each_mean_clear_of_its_whisker(spread):
    # A short whisker ends where the value used to be written; a long one far past it.
    fig = figures.level_bars(level_rows([96_454.0, 130_184.0], spread), "timer", {})
    assert_labels_clear_of_whiskers(fig)


def test_level_bars_on_a_log_axis_write_each_mean_clear_of_its_whisker():
    fig = figures.level_bars(level_rows([5_361.0, 1_923_000.0], 0.04), "cpuid", {})
    assert fig.axes[-1].get_xscale() == "log"
    assert_labels_clear_of_whiskers(fig)


@pytest.mark.parametrize("configs", [1, 2, 3])
def test_overhead_values_clear_of_every_whisker(configs):
    fig = figures.overhead_bars(overhead_rows(configs), {})
    assert_labels_clear_of_whiskers(fig)


#: The least room between two tick labels of one axis, in font sizes: 0.5 is about two
#: spaces. The labels "100000" "200000" ... once stood 3 pixels apart and read as one number.
TICK_GAP = 0.5


@pytest.mark.parametrize(
    ("resp", "throughput"),
    [([150_000.0, 420_000.0], False), ([300_000.0, 610_000.0], True), ([1.01e6, 4.01e6], True)],
)
def test_the_timer_charts_tick_labels_do_not_run_together(resp, throughput):
    # Response times of a timer probe: hundreds of thousands of ns and more, on a panel half
    # the figure's width when the probe also reports throughput.
    fig = figures.level_bars(level_rows(resp, 0.1, throughput), "timer", {})
    renderer = drawn(fig)
    for ax in fig.axes:
        xticks, _ = tick_labels(ax, renderer)
        boxes = sorted(xticks, key=lambda item: item[1].x0)
        size = ax.get_xticklabels()[0].get_fontsize() * fig.dpi / 72
        for (text, box), (other, other_box) in zip(boxes, boxes[1:], strict=False):
            assert other_box.x0 - box.x1 >= TICK_GAP * size, (text, other)
        labels = [t for t, _ in boxes]
        assert all(len(t) <= 5 for t in labels), labels  # engineering units: "2M", "250k"


def test_a_probe_without_throughput_gets_one_panel_and_no_filler():
    fig = figures.level_bars(level_rows([340.0, 2_400.0], throughput=False), "write", {})
    assert len(fig.axes) == 1
    assert fig.axes[0].get_title(loc="left") == "Response time"
    assert not [t for t in fig.texts + fig.axes[0].texts if "not reported" in t.get_text()]


def legend_boxes(fig, renderer):
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return [lg.get_window_extent(renderer) for lg in legends if lg is not None]


def assert_legends_cover_nothing(fig, key: str) -> None:
    renderer = drawn(fig)
    axes = [ax.get_window_extent(renderer) for ax in fig.axes if ax.axison]
    for legend in legend_boxes(fig, renderer):
        assert not [a for a in axes if legend.overlaps(a)], key
        for ax in fig.axes:  # nor the title above it
            for loc in ("left", "center", "right"):
                title = ax.get_title(loc=loc)
                if title:
                    box = ax.title if loc == "center" else getattr(ax, f"_{loc}_title")
                    assert not legend.overlaps(box.get_window_extent(renderer)), (key, title)


def test_the_distribution_legend_is_off_the_data():
    # Two configurations, the slower one's values reaching the upper right corner, where the
    # legend used to be.
    rng = np.random.default_rng(2)
    series = {
        "L0 host_hypervisor=kvm": rng.lognormal(7.4, 0.3, 900),
        "L1 accel=tcg vcpus=2 " + "x" * 30: rng.lognormal(9.8, 0.2, 400),
    }
    fig = figures.distribution("pagefault", "ns", series, {})
    assert legend_boxes(fig, drawn(fig))
    assert_legends_cover_nothing(fig, "dist")


def text_outside(fig) -> list[str]:
    """Every drawn text (titles, axis labels, values, legends, tick labels inside their
    axis' limits) that reaches past the figure's edge."""
    renderer = drawn(fig)
    page = fig.bbox
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.texts]
    for ax in fig.axes:
        texts = [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        texts += list(ax.texts)
        legend = ax.get_legend()
        texts += legend.get_texts() if legend is not None else []
        boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        boxes += [box for axis in tick_labels(ax, renderer) for box in axis]
    for legend in fig.legends:
        boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in legend.get_texts()]
    return [
        text
        for text, box in boxes
        if text
        and (box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1)
        or (box.y0 < page.y0 - 1 or box.y1 > page.y1 + 1)
    ]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A report of three levels, with long configuration names, built from a real store."""
    from vmtax.store import Store

    tmp = tmp_path_factory.mktemp("layout")
    with Store.open(f"sqlite:///{tmp / 'l.db'}") as store:
        populate(
            store, levels=("L0", "L1", "L2"), probes=("cpuid", "timer", "pagefault"), runs=4,
            iterations=300, labels={"note": "a label long enough to wrap onto a second line"},
        )  # fmt: skip
        data = gather.load(store, ["exp=latest"], None)
    return analysis.build(data, options=CompareOptions(resamples=200))


def test_no_figure_of_a_report_has_a_legend_on_its_data_or_text_off_the_page(model):
    for spec in model.figures:
        fig = spec.draw()
        assert_legends_cover_nothing(fig, spec.key)
        assert text_outside(fig) == [], spec.key


def test_the_title_names_the_experiment_not_the_selector(model):
    assert model.title == "vmtax report: experiment 1"


def test_a_one_configuration_report_says_its_table_note_once(tmp_path):
    from vmtax.store import Store

    with Store.open(f"sqlite:///{tmp_path / 'one.db'}") as store:
        populate(
            store, levels=("L0",), probes=("cpuid", "syscall", "timer"), runs=3, iterations=200
        )
        populate(store, levels=("L0",), probes=("cpuid",), runs=3, iterations=200, seed=2)
        data = gather.load(store, ["exp=latest,probe=cpuid"], None)
        first = gather.load(store, ["exp=1"], None)
    model = analysis.build(first, options=CompareOptions(resamples=200))
    assert [t.note for t in model.studya_tables] == ["", "", ""]
    text = write_model(model, tmp_path / "one.html").path.read_text()
    assert text.count("ΔL(n−1): relative change") == 1
    narrowed = analysis.build(data, options=CompareOptions(resamples=200))
    assert narrowed.title == "vmtax report: experiment 2 (exp=latest,probe=cpuid)"
