"""Unit tests of the report's drawing pieces: block reduction, axis choices, SVG output."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer

from vmtax.report import figures, refdata
from vmtax.report.markdown import md_escape
from vmtax.report.svg import to_png, to_svg

pytestmark = pytest.mark.fast

EVIL = '<script>alert(1)</script> & "quoted"'


def _overhead_rows(values):
    return pd.DataFrame(
        {
            "probe": ["cpuid"] * len(values) + ["syscall"] * len(values),
            "config": [f"L{i + 1} accel=tcg" for i in range(len(values))] * 2,
            "overhead": list(values) * 2,
            "ci_low": [v * 0.95 for v in values] * 2,
            "ci_high": [v * 1.05 for v in values] * 2,
            "is_baseline": [False] * (2 * len(values)),
        }
    )


def test_reduce_max_caps_the_cell_count_and_keeps_a_single_spike():
    matrix = np.ones((50, 10_000))
    matrix[7, 4321] = 100.0
    reduced, br, bc = figures.reduce_max(matrix)
    assert reduced.shape[0] <= figures.MAX_CELLS and reduced.shape[1] <= figures.MAX_CELLS
    assert (br, bc) == (1, 50)
    assert reduced.max() == 100.0
    assert reduced[7, 4321 // 50] == 100.0
    assert np.count_nonzero(reduced == 100.0) == 1


def test_reduce_max_leaves_small_matrices_alone_and_ignores_padding():
    matrix = np.arange(12.0).reshape(3, 4)
    reduced, br, bc = figures.reduce_max(matrix)
    assert (br, bc) == (1, 1)
    np.testing.assert_array_equal(reduced, matrix)
    ragged = np.full((3, 401), np.nan)
    ragged[:, :300] = 1.0
    reduced, _, bc = figures.reduce_max(ragged)
    assert bc == 3
    assert np.isnan(reduced[:, -1]).all()  # a block of padding only stays empty
    assert np.nanmax(reduced) == 1.0


def test_overhead_axis_is_log_only_when_overheads_span_a_decade():
    nested = figures.overhead_bars(_overhead_rows([30.0, 400.0]), {})
    assert nested.axes[0].get_yscale() == "log"
    flat = figures.overhead_bars(_overhead_rows([1.1, 1.4]), {})
    assert flat.axes[0].get_yscale() == "linear"


def test_overhead_bars_leave_out_the_baseline_and_draw_the_unity_line():
    rows = _overhead_rows([2.0])
    rows.loc[len(rows)] = ["cpuid", "L0", 1.0, np.nan, np.nan, True]
    fig = figures.overhead_bars(rows, {})
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [c.get_label() for c in bars] == ["L1 accel=tcg"]
    assert any(line.get_ydata()[0] == 1.0 for line in ax.get_lines())


def test_distribution_uses_log_x_for_skewed_values_and_fixed_bins():
    rng = np.random.default_rng(0)
    near = {"L0": rng.normal(100, 5, 10_000), "L1": rng.normal(110, 5, 10_000)}
    fig = figures.distribution("cpuid", "ns", near, {})
    assert fig.axes[0].get_xscale() == "linear"
    far = {"L0": rng.lognormal(4, 0.1, 10_000), "L2": rng.lognormal(10, 0.1, 100_000)}
    fig = figures.distribution("cpuid", "ns", far, {})
    assert fig.axes[0].get_xscale() == "log"
    # one filled and one outlined stairs per configuration, each with HIST_BINS bins
    patches = fig.axes[0].patches
    assert len(patches) == 4


def test_heatmap_marks_periodic_indices_and_zooms_long_runs():
    matrix = np.ones((6, 1_000))
    matrix[:, ::97] = 2.0
    panel = figures.HeatPanel("L1", matrix, periodic=list(range(0, 1_000, 97)), period=97)
    fig = figures.heatmap("cpuid", "ns", [panel])
    titles = [ax.get_title(loc="right") for ax in fig.axes]
    assert any("11 periodic (period 97)" in t for t in titles)
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 2  # the reduced mesh and the cell-by-cell zoom
    assert images[0].get_array().shape == (6, 200)
    assert images[1].get_array().shape == (6, figures.ZOOM)


def test_svg_is_inline_ready_and_escapes_text():
    fig = figures.overhead_bars(_overhead_rows([2.0]).assign(config=EVIL), {})
    svg = to_svg(fig, "x")
    assert svg.startswith("<svg")
    root = svg.split(">", 1)[0]
    assert "viewBox" in root and " width=" not in root and " height=" not in root
    assert "<script" not in svg
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;" in svg
        or '&lt;script&gt;alert(1)&lt;/script&gt; &amp; "quoted"' in svg
    )
    urls = set(re.findall(r"https?://[^\"'\s)]+", svg))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def test_svg_ids_differ_between_figures_of_one_page():
    rows = _overhead_rows([2.0, 3.0])
    a = to_svg(figures.overhead_bars(rows, {}), "one")
    b = to_svg(figures.overhead_bars(rows, {}), "two")
    ids_a = set(re.findall(r'clipPath id="([^"]+)"', a))
    ids_b = set(re.findall(r'clipPath id="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b
    assert to_svg(figures.overhead_bars(rows, {}), "one") == a  # same input, same bytes


def test_png_output_is_a_png():
    assert to_png(figures.overhead_bars(_overhead_rows([2.0]), {})).startswith(b"\x89PNG")


def test_markdown_escape_neutralises_markup():
    assert md_escape("<b>|x|</b> *a* [l](u)") == r"\<b\>\|x\|\</b\> \*a\* \[l\](u)"


def test_reference_exit_profile_matches_the_published_totals():
    exits = refdata.virtage_exit_profile()
    totals = exits.groupby("config")["value"].sum()
    assert abs(totals["SPT (shadow page tables)"] - 1.0) < 0.01
    assert abs(totals["EPT (extended page tables)"] - 0.234) < 0.001
    fig = figures.exit_reasons(exits, title="t")
    assert len(fig.axes[0].get_yticks()) == 2


def test_reference_scaling_sweeps_vcpus_per_architecture():
    curves, guide = refdata.fitzgerald_cpu_scaling()
    assert sorted(curves.groupby("series")["x"].apply(sorted).iloc[0]) == [2, 3, 4]
    assert set(curves["series"]) == {"s390x, not over-committed", "x86_64, not over-committed"}
    fig = figures.scaling(curves, reference=guide, x_label="vCPUs", y_label="TPSec", title="t")
    assert fig.axes[0].get_ylim()[0] == 0


def _skewed_panels(configs: int, iterations: int) -> list[figures.HeatPanel]:
    rng = np.random.default_rng(3)
    return [
        figures.HeatPanel(
            f"L{i} " + "label=" + "x" * 60,
            # Spans decades (a log norm); run counts differ, so the title lists every shape.
            rng.lognormal(7 + i, 1.5, size=(7 - 2 * i, iterations)),
        )
        for i in range(configs)
    ]


def test_log_axes_are_labelled_in_plain_text():
    assert [figures.si_label(v) for v in (20_000, 1.5e6, 3e9, 0.02, 100)] == [
        "20k",
        "1.5M",
        "3G",
        "0.02",
        "100",
    ]
    svg = to_svg(figures.heatmap("cpuid", "ns", _skewed_panels(2, 5_000)), "m")
    assert "mathdefault" not in svg and "$" not in svg
    assert re.search(r">10k<", svg), "the colour bars' decades are labelled 1k, 10k, ..."


def test_the_mesh_layout_keeps_every_label_inside_and_off_the_next_panel():
    # One to three configurations, with and without the zoom panel.
    for configs, iterations in ((1, 150), (2, 5_000), (3, 200_000)):
        fig = figures.heatmap("pingpong", "ns", _skewed_panels(configs, iterations))
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # lays out every text
        renderer = canvas.get_renderer()
        page = fig.bbox
        for ax in fig.axes:
            box = ax.get_tightbbox(renderer)
            assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1, (configs, ax.get_label())
            assert page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, (configs, ax.get_label())
        title = fig.get_suptitle()
        assert fig._suptitle.get_window_extent(renderer).x1 <= page.x1, title
        # Per row, left to right: mesh[, zoom], the colour bar both share. The mesh's labels
        # stop before the zoom; no two panels (or a panel and the bar) overlap.
        per_row = 3 if iterations > figures.MAX_CELLS else 2
        rows = [fig.axes[i : i + per_row] for i in range(0, len(fig.axes), per_row)]
        assert len(rows) == configs
        for row in rows:
            if per_row == 3:
                mesh = row[0].get_tightbbox(renderer)
                assert mesh.x1 < row[1].get_window_extent(renderer).x0
            frames = [ax.get_window_extent(renderer) for ax in row]
            for left, right in zip(frames, frames[1:], strict=False):
                assert left.x1 <= right.x0
        for upper, lower in zip(rows, rows[1:], strict=False):
            # The lower row's title and the upper row's tick labels do not collide.
            assert upper[0].get_window_extent(renderer).y0 > lower[0].get_tightbbox(renderer).y1


def _mesh_cases() -> list[tuple[str, list[figures.HeatPanel]]]:
    """Meshes of one layout that differ in all a frame keeps between them: log and linear
    colour scales, a saturated one (the bar's arrow) and not, marks and none, long runs
    (the zoom) and short, a configuration with no values (its panels off)."""
    rng = np.random.default_rng(8)
    flat = figures.HeatPanel("L0", rng.normal(100, 1, size=(6, 150)))
    spiky = rng.normal(100, 1, size=(6, 150))
    spiky[2, 7] = 1e4
    marked = figures.HeatPanel("L1", spiky, periodic=list(range(0, 150, 25)), period=25)
    empty = figures.HeatPanel("L2", np.full((3, 150), np.nan))
    # A timer's ticks: the top value is common, so no colour bar has an arrow; and runs
    # narrower than the mesh before, marked, so a frame's old limits would widen the axes.
    ticks = figures.HeatPanel("L0", rng.integers(3, 6, size=(5, 200)).astype(float))
    narrow = rng.integers(3, 6, size=(5, 100)).astype(float)
    narrow[:, ::20] = 9.0
    marked_narrow = figures.HeatPanel("L1", narrow, periodic=list(range(0, 100, 20)), period=20)
    # Narrower than the meshes drawn before on the same frame, with marks: a frame's old
    # limits would widen these axes.
    short = figures.HeatPanel("L0", rng.normal(100, 1, size=(6, 100)))
    late = rng.normal(100, 1, size=(6, 120))
    late[1, 5] = 1e4
    late_marked = figures.HeatPanel("L1", late, periodic=list(range(0, 120, 30)), period=30)
    return [
        ("cpuid", _skewed_panels(2, 5_000)),
        ("syscall", [flat, marked]),
        ("write", [marked, empty]),
        ("timer", _skewed_panels(2, 150)),
        ("memory", [short, late_marked]),
        ("io", [empty, flat]),
        ("pingpong", [ticks, marked_narrow]),
        ("ctxswitch", [flat, marked]),
        ("wakeup", _skewed_panels(2, 5_000)[::-1]),
    ]


def test_a_mesh_drawn_on_a_released_frame_is_the_fresh_meshs_svg():
    # Each mesh drawn on a new figure, then each drawn on the frame the one before it left:
    # the same bytes, so nothing of a mesh (an image, a mark, a title, a colour bar's scale
    # or arrow, a panel turned off, the limits) is left on the next.
    cases = _mesh_cases()
    fresh = [to_svg(figures.heatmap(probe, "ns", panels), probe) for probe, panels in cases]
    for order in (range(len(cases)), reversed(range(len(cases)))):
        for i in order:
            probe, panels = cases[i]
            fig = figures.heatmap(probe, "ns", panels)
            assert to_svg(fig, probe) == fresh[i], probe
            figures.release(fig)
    # A figure not released is never drawn on again: the next mesh gets a new one.
    kept = figures.heatmap(*cases[0][0:1], "ns", cases[0][1])
    other = figures.heatmap(cases[-1][0], "ns", cases[-1][1])
    assert other is not kept and to_svg(kept, "cpuid") == fresh[0]


@pytest.fixture
def empty_pool(monkeypatch):
    """No frame left by an earlier test: the first figure of each layout is a new one."""
    monkeypatch.setattr(figures, "_POOL", {})


def _level_rows(resp, spread=0.05, throughput=True, names=None):
    mean = np.asarray(resp, dtype=float)
    thr = 1e9 / mean if throughput else np.full(mean.size, np.nan)
    names = names or [f"L{i} accel=tcg vcpus=2" for i in range(mean.size)]
    return pd.DataFrame(
        {
            "config": names,
            "throughput_mean": thr,
            "throughput_ci_low": thr * (1 - spread),
            "throughput_ci_high": thr * (1 + spread),
            "throughput_unit": ["ops/s" if throughput else None] * mean.size,
            "resp_mean": mean,
            "resp_ci_low": mean * (1 - spread),
            "resp_ci_high": mean * (1 + spread),
            "unit": ["ns"] * mean.size,
        }
    )


def _drawn_again_is_drawn_fresh(draw, cases) -> None:
    """Each case drawn on a new figure, then each drawn on the figure the case before it
    released, forwards and backwards: the same bytes, so nothing of one (a bar, a value, a
    whisker, a legend, a log scale, its locators, a label, the margins) is left on the next."""
    made = [draw(*case) for case in cases]
    fresh = [to_svg(fig, f"case{i}") for i, fig in enumerate(made)]
    children = [[(len(ax.get_children()), len(ax.containers)) for ax in f.axes] for f in made]
    for order in (range(len(cases)), reversed(range(len(cases)))):
        for i in order:
            fig = draw(*cases[i])
            assert to_svg(fig, f"case{i}") == fresh[i], i
            assert [(len(ax.get_children()), len(ax.containers)) for ax in fig.axes] == children[i]
            figures.release(fig)


def test_a_level_chart_drawn_on_a_released_figure_is_the_fresh_charts_svg(empty_pool):
    long_names = ["L0 host_hypervisor=kvm " + "x" * 40, f"L1 {EVIL}"]
    rows = [
        _level_rows([96_454.0, 130_184.0]),
        _level_rows([5_361.0, 1_923_000.0], 0.04),  # log response time, log throughput
        _level_rows([340.0, 2_400.0], throughput=False),  # one panel
        _level_rows([300_000.0, 610_000.0], 0.6, names=long_names),
        _level_rows([1.5, 2.5], float("nan")),  # no intervals: no whiskers
        _level_rows([12.0, 7_000.0], 0.1, throughput=False),  # one panel, log
        _level_rows([10.0, 20.0, 4_000.0]),  # three rows
        _level_rows([2_000.0, 3_000.0, 3_500.0], 0.2),
    ]
    _drawn_again_is_drawn_fresh(figures.level_bars, [(r, "timer", {}) for r in rows])


def test_a_distribution_drawn_on_a_released_figure_is_the_fresh_ones_svg(empty_pool):
    rng = np.random.default_rng(3)
    outliers = np.concatenate([rng.normal(100, 5, 5_000), np.full(20, 9_000.0)])
    series = [
        {"L0": rng.normal(100, 5, 4_000), "L1": rng.normal(110, 5, 2_000)},
        {"L0": rng.lognormal(4, 0.1, 3_000), f"L2 {EVIL}": rng.lognormal(10, 0.1, 9_000)},
        {"L0": outliers},  # the top 0.1% not shown, and said under the axis
        {f"L{i} accel=tcg " + "y" * 30: rng.normal(50 + i, 2, 500) for i in range(5)},
        {"L0": np.array([])},  # no samples: a figure of its own, never lent
        {"L0": rng.exponential(1_000.0, 6_000), "L1": rng.normal(5_000, 10, 300)},
    ]
    _drawn_again_is_drawn_fresh(figures.distribution, [("cpuid", "ns", s, {}) for s in series])
