"""The report's figures, drawn with matplotlib from frames the analysis step prepared.

Each function takes plain data (no store, no statistics) and returns a ``Figure``. Figures are
built with the object API (``Figure``, not pyplot): no global state, safe in threads.
What is drawn large is kept small on purpose:
- heatmaps are reduced to at most ``MAX_CELLS`` x ``MAX_CELLS`` cells by taking the maximum
  of each block (a spike survives the reduction; a mean would smear it away) and drawn as one
  raster image, which the SVG embeds as a PNG;
- histograms use a fixed number of bins, so their size does not grow with the sample count.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial, wraps
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import StepPatch
from matplotlib.textpath import TextToPath
from matplotlib.ticker import (
    EngFormatter,
    FuncFormatter,
    LogFormatter,
    LogLocator,
    MaxNLocator,
)

from vmtax.report.svg import RC

MAX_CELLS = 200
HIST_BINS = 120
MAX_MARKERS = 60
ZOOM = 120  # iterations shown cell by cell beside a block-reduced mesh
MARK_COLOR = "#00B4FF"
WIDTH = 7.2  # inches; the page shows figures at most ~900 px wide

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#999999",
    "#000000",
    "#F0E442",
)


def palette(configs: Sequence[str]) -> dict[str, str]:
    """One colour per configuration, stable in the order given (the report's order)."""
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(dict.fromkeys(configs))}


def _styled(func: Callable[..., Figure]) -> Callable[..., Figure]:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with matplotlib.rc_context(RC):
            return plain_log_labels(func(*args, **kwargs))

    return wrapper


def si_label(value: float) -> str:
    """20000 -> "20k", 1.5e6 -> "1.5M", 0.02 -> "0.02"."""
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def si_tick(value: float, _pos: int | None = None) -> str:
    """si_label as a tick formatter (a module function: figures are pickled to render)."""
    return si_label(value)


class PlainLogFormatter(LogFormatter):
    """matplotlib's choice of which log ticks to label, labelled as plain text ("20k")
    rather than mathtext (2×10⁴): parsing the mathtext took a quarter of a report's
    drawing time, and most of the rest of it went to laying out those labels."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return si_label(x)


#: Minor ticks of a log axis: at 2 and 5 times each power. matplotlib's default, every
#: integer multiple, made up to 40 ticks per axis, and making a tick (two lines, a grid
#: line, two labels) was the largest single cost of drawing the report's figures.
LOG_MINOR_SUBS = (2.0, 5.0)


def plain_log_labels(fig: Figure) -> Figure:
    """Every log axis of ``fig`` (colour bars of log norms included) gets plain labels,
    and minor ticks at ``LOG_MINOR_SUBS`` only."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            base = getattr(axis.get_transform(), "base", 10)
            minor = axis.get_minor_formatter()
            only_base = isinstance(minor, LogFormatter) and minor.labelOnlyBase
            axis.set_major_formatter(PlainLogFormatter(base))
            axis.set_minor_formatter(PlainLogFormatter(base, labelOnlyBase=only_base))
            if isinstance(axis.get_minor_locator(), LogLocator):
                axis.set_minor_locator(LogLocator(base, subs=LOG_MINOR_SUBS))
    return fig


class SiFormatter(EngFormatter):
    """Engineering ticks of a linear axis: "250k", "1.5M" (plain numbers such as 1000000
    2000000 ran together). Below 1 the number is written plainly ("0.25"): a milli prefix
    beside a unit such as ms would read as part of the unit."""

    def __init__(self) -> None:
        super().__init__(sep="")

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:.6g}" if abs(x) < 1 else super().__call__(x, pos)


_TEXT = TextToPath()


def text_inches(text: str, size: float) -> tuple[float, float]:
    """Width and height in inches of ``text`` (one line per newline) at ``size`` points in
    the report's font, from the font's metrics alone. A fixed layout built from these
    costs nothing; a layout engine draws the whole figure once more to find its margins."""
    lines = text.split("\n")
    prop = FontProperties(size=size)
    width = max(_TEXT.get_text_width_height_descent(t, prop, ismath=False)[0] for t in lines)
    return width / 72, len(lines) * size * 1.25 / 72


def _place(
    fig: Figure, left: float, right: float, top: float, bottom: float, gap: float = 0
) -> None:
    """The subplots' area by its margins in inches (``gap``: between columns)."""
    width, height = fig.get_size_inches()
    columns = max(1, len(fig.axes))
    panel = (width - left - right - gap * (columns - 1)) / columns
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        top=1 - top / height,
        bottom=bottom / height,
        wspace=gap / panel if columns > 1 else None,
    )


def _short(label: str, width: int = 28) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _wrap(label: str, width: int = 26, lines: int = 2) -> str:
    """Wrap a long configuration name onto a few lines; cut what still does not fit."""
    parts = textwrap.wrap(label, width=width, break_long_words=True) or [""]
    if len(parts) > lines:
        parts = parts[: lines - 1] + [_short(" ".join(parts[lines - 1 :]), width)]
    return "\n".join(parts)


def _spans_decades(values: np.ndarray, ratio: float = 10.0) -> bool:
    finite = values[np.isfinite(values) & (values > 0)]
    return finite.size > 1 and finite.max() / finite.min() >= ratio


def _value_label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _yerr(mean: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray | None:
    low_err = (mean - low).to_numpy(dtype=float)
    high_err = (high - mean).to_numpy(dtype=float)
    if np.all(np.isnan(low_err)) and np.all(np.isnan(high_err)):
        return None
    return np.vstack([np.nan_to_num(low_err), np.nan_to_num(high_err)]).clip(min=0)


#: The fixed layout's margins, in inches: an axes title above (10 pt bold and its pad), the
#: tick labels and the axis label below, and the tick marks with their pad beside.
TITLE_IN = 0.34
XAXIS_IN = 0.52
TICKS_IN = 0.12
VALUE_FONT = 7.0  # the value written beside each bar
VALUE_OFFSET = 4.0  # points between a whisker's end and its value

LEVEL_PANELS = (
    ("throughput", "throughput_unit", "Throughput", "higher is better"),
    ("resp", "unit", "Response time", "lower is better"),
)


def value_room(
    ends: np.ndarray, sizes: Sequence[float], length: float, *, start: float, log: bool
) -> float:
    """The axis limit at which a label of ``sizes[i]`` inches still fits past ``ends[i]``
    on an axis ``length`` inches long that starts at ``start`` (log: in decades)."""

    def pos(v: float) -> float:
        return float(np.log10(v)) if log else float(v)

    lo, far = pos(start), pos(start)
    for end, size in zip(ends, sizes, strict=True):
        if not np.isfinite(end) or (log and end <= 0):
            continue
        free = max(length - size - VALUE_OFFSET / 72 - 0.06, length * 0.3)
        far = max(far, lo + (pos(end) - lo) * length / free)
    if far <= lo:
        far = lo + 1.0
    return float(10**far) if log else far


def _log_start(values: np.ndarray) -> float:
    positive = values[np.isfinite(values) & (values > 0)]
    return float(positive.min()) / 2 if positive.size else 1.0


def _pooled(key: Hashable, make: Callable[[], tuple[Figure, Any]]) -> tuple[Figure, Any]:
    """A figure and its axes for ``key`` (kind and layout): a released one, every axes' data
    taken off and its x axis linear again, else ``make()``'s (see :func:`release`)."""
    frame = _POOL.pop(key, None)
    if frame is None:
        frame = make()
    else:
        for ax in frame[0].axes:
            _clear_data(ax)
            ax.set_xscale("linear")
    _lend(frame[0], key, frame)
    return frame


def _new_level_frame(rows: int, panels: int) -> tuple[Figure, Sequence[Any]]:
    fig = Figure(figsize=(WIDTH, 1.0 + 0.5 * rows))
    with matplotlib.rc_context({"axes.grid.axis": "x"}):  # cheaper than removing it later
        return fig, fig.subplots(1, panels, squeeze=False)[0]


@_styled
def level_bars(rows: pd.DataFrame, probe: str, colors: Mapping[str, str]) -> Figure:
    """Throughput (left) and mean response time (right) per configuration, 95% CI bars.

    ``rows``: one row per configuration with config, throughput_mean, throughput_ci_low,
    throughput_ci_high, throughput_unit, resp_mean, resp_ci_low, resp_ci_high, unit. A probe
    that reports no throughput gets the response-time panel alone. An axis turns
    logarithmic when its means span two decades or more, so no bar vanishes. Each mean is
    written past the end of its whisker, where neither covers the other; linear axes are
    labelled in engineering units ("250k").
    """
    panels = [p for p in LEVEL_PANELS if rows[f"{p[0]}_mean"].astype(float).notna().any()]
    panels = panels or [LEVEL_PANELS[1]]
    fig, axes = _pooled(
        ("levels", len(rows), len(panels)),
        partial(_new_level_frame, len(rows), len(panels)),
    )
    labels = [_wrap(c) for c in rows["config"]]
    left = max(text_inches(t, RC["font.size"])[0] for t in labels) + TICKS_IN + 0.05
    right, gap = 0.15, 0.35
    _place(fig, left=left, right=right, top=TITLE_IN, bottom=XAXIS_IN, gap=gap)
    length = (WIDTH - left - right - gap * (len(panels) - 1)) / len(panels)
    y = np.arange(len(rows))
    bar_colors = [colors.get(c, PALETTE[0]) for c in rows["config"]]
    for ax, (metric, unit_col, title, hint) in zip(axes, panels, strict=True):
        mean = rows[f"{metric}_mean"].astype(float)
        high = rows[f"{metric}_ci_high"].astype(float)
        low = rows[f"{metric}_ci_low"].astype(float)
        unit = next((str(u) for u in rows[unit_col] if isinstance(u, str) and u), "")
        err = _yerr(mean, low, high)
        log = _spans_decades(mean.to_numpy(), 100.0)
        ax.barh(
            y,
            mean.fillna(0).to_numpy(),
            xerr=err,
            color=bar_colors,
            height=0.6,
            log=log,
            error_kw={"ecolor": "#333333", "capsize": 3, "elinewidth": 1},
        )
        ends = np.fmax(mean.to_numpy(), high.to_numpy())
        texts = [_value_label(m) if np.isfinite(m) else "" for m in mean]
        for yi, end, text in zip(y, ends, texts, strict=True):
            if text:  # past the whisker's end: the two never cross
                ax.annotate(
                    text,
                    (end, yi),
                    xytext=(VALUE_OFFSET, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=VALUE_FONT,
                    color="#333333",
                )
        sizes = [text_inches(t, VALUE_FONT)[0] for t in texts]
        values = np.concatenate([mean.to_numpy(), low.to_numpy()])
        start = _log_start(values) if log else min(0.0, float(np.nanmin(values, initial=0.0)))
        ax.set_xlim(start, value_room(ends, sizes, length, start=start, log=log))
        if not log:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=6 if len(panels) == 1 else 4))
            ax.xaxis.set_major_formatter(SiFormatter())
        ax.set_yticks(y, labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # first configuration on top
        ax.set_title(title, loc="left")
        ax.set_xlabel(f"{unit}, {hint}" + (" (log scale)" if log else ""))
    for ax in axes[1:]:  # same configurations in the same order: label them once
        ax.tick_params(labelleft=False)
    return fig


def _legend_rows(labels: Sequence[str], room: float, size: float) -> tuple[int, float]:
    """Columns and height in inches of a legend of ``labels`` in ``room`` inches of width
    (the handle and the gaps beside each label take about 4 font sizes)."""
    if not labels:
        return 1, 0.0
    cell = max(text_inches(t, size)[0] for t in labels) + 4 * size / 72
    columns = int(max(1, min(len(labels), room // cell)))
    rows = -(-len(labels) // columns)
    return columns, rows * size * 1.5 / 72 + 0.1


def _legend_above(ax: Any, room: float, size: float = 8.0) -> float:  # noqa: ANN401
    """The axes' legend between its title and its data, where it covers nothing; returns
    the inches it takes (the caller leaves that much room above the axes)."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return 0.0
    columns, height = _legend_rows(labels, room, size)
    ax.legend(
        handles,
        labels,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        borderaxespad=0.4,
        ncols=columns,
        fontsize=size,
    )
    ax.set_title(ax.get_title(loc="left"), loc="left", pad=6 + height * 72)
    return height


@_styled
def overhead_bars(rows: pd.DataFrame, colors: Mapping[str, str]) -> Figure:
    """Overhead vs the baseline: a group per probe, a bar per configuration, CI whiskers.

    ``rows``: probe, config, overhead, ci_low, ci_high, is_baseline. A log axis is used when
    the overheads span a decade or more (nested costs multiply); bars then grow from 1.0.
    Each overhead is written above its whisker (upright when bars are narrower than the
    label), and the legend sits under the axis, off the bars.
    """
    rows = rows[~rows["is_baseline"].astype(bool)]  # the baseline is the dashed 1.0 line
    probes = list(dict.fromkeys(rows["probe"]))
    configs = list(dict.fromkeys(rows["config"]))
    n_cfg = max(len(configs), 1)
    width = 0.8 / n_cfg
    crowded = len(probes) * n_cfg > 8
    names = [_short(p, 18) for p in probes]
    tick_w, tick_h = max((text_inches(t, RC["font.size"]) for t in names), default=(0.0, 0.0))
    ticks = tick_w * 0.5 + tick_h * 0.87 if crowded else tick_h  # rotated 30 degrees
    columns, legend_h = _legend_rows([_short(c, 60) for c in configs], WIDTH - 0.4, 7.5)
    bottom = TICKS_IN + ticks + 0.12 + legend_h
    fig = Figure(figsize=(WIDTH, 2.9 + bottom))
    with matplotlib.rc_context({"axes.grid.axis": "y"}):
        ax = fig.subplots()
    left, top = 0.68, TITLE_IN
    _place(fig, left=left, right=0.1, top=top, bottom=bottom)
    length = fig.get_size_inches()[1] - top - bottom
    values = rows[["overhead", "ci_low", "ci_high"]].to_numpy(dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    log = positive.size > 0 and positive.max() / positive.min() >= 10.0
    base = 1.0 if log else 0.0
    upright = n_cfg > 1  # a bar narrower than its label: the label stands on end
    ends: list[float] = []
    sizes: list[float] = []
    for j, config in enumerate(configs):
        sub = rows[rows["config"] == config].set_index("probe").reindex(probes)
        x = np.arange(len(probes)) + (j - (n_cfg - 1) / 2) * width
        mean = sub["overhead"].astype(float)
        err = _yerr(mean, sub["ci_low"].astype(float), sub["ci_high"].astype(float))
        height = mean.to_numpy() - base
        ax.bar(
            x,
            height,
            bottom=base,
            width=width * 0.92,
            color=colors.get(config),
            label=_short(config, 60),
            yerr=err,
            error_kw={"ecolor": "#333333", "capsize": 2, "elinewidth": 0.9},
        )
        tops = np.fmax(mean.to_numpy(), sub["ci_high"].astype(float).to_numpy())
        for xi, m, top_value in zip(x, mean, tops, strict=True):
            if not np.isfinite(m):
                continue
            text = f"{m:.3g}×"
            ax.annotate(  # above the whisker, so the two never cross
                text,
                (xi, top_value),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                rotation=90 if upright else 0,
                fontsize=6.5,
                color="#333333",
            )
            w, h = text_inches(text, 6.5)
            ends.append(float(top_value))
            sizes.append(w if upright else h)
    ax.axhline(1.0, color="#222222", linewidth=1.1, linestyle="--", zorder=3)
    if log:
        ax.set_yscale("log")
        # Leave room under the 1.0 line so it shows, and bars below 1 (cheaper) fit.
        start = min(0.7, float(positive.min()) * 0.8)
    else:
        start = 0.0
    sizes = [s - (VALUE_OFFSET - 3) / 72 for s in sizes]  # value_room allows 4 pt, here 3
    ax.set_ylim(start, value_room(np.asarray(ends), sizes, length, start=start, log=log))
    ax.set_xticks(
        np.arange(len(probes)),
        names,
        rotation=30 if crowded else 0,
        ha="right" if crowded else "center",
        rotation_mode="anchor",
    )
    ax.set_xlim(-0.5, len(probes) - 0.5)
    ax.set_ylabel("overhead, × baseline" + (" (log scale)" if log else ""))
    ax.set_title("Overhead vs baseline (dashed line 1.0 = baseline), whiskers = 95% CI", loc="left")
    fig.legend(
        loc="lower center", bbox_to_anchor=(0.5, 0.02 / fig.get_size_inches()[1]),
        ncols=columns, fontsize=7.5, borderaxespad=0.0,
    )  # fmt: skip
    return fig


def _new_distribution_frame() -> tuple[Figure, Any]:
    fig = Figure(figsize=(WIDTH, 2.8))
    return fig, fig.subplots()


@_styled
def distribution(
    probe: str, unit: str, series: Mapping[str, np.ndarray], colors: Mapping[str, str]
) -> Figure:
    """Histogram overlay of per-iteration values, one outline per configuration.

    Fixed ``HIST_BINS`` bins (log-spaced when the values are skewed); heights are the
    fraction of that configuration's iterations, so configurations with different sample
    counts compare. The top 0.1% is left out of the range and counted.
    """
    pooled = (
        np.concatenate([v[np.isfinite(v)] for v in series.values()]) if series else np.array([])
    )
    if pooled.size == 0:
        fig, ax = _new_distribution_frame()  # never lent: its axes are turned off
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        return fig
    fig, ax = _pooled(("distribution",), _new_distribution_frame)
    # The top 0.1% is left out of the range (a few huge outliers would squeeze the bulk into
    # one bin) and counted under the axis instead. Log-x when the range spans a decade.
    lo, hi = float(pooled.min()), float(np.quantile(pooled, 0.999))
    if hi <= lo:
        hi = lo + max(abs(lo) * 0.01, 1e-9)
    log = lo > 0 and hi / lo >= 10.0
    edges = np.geomspace(lo, hi, HIST_BINS + 1) if log else np.linspace(lo, hi, HIST_BINS + 1)
    beyond = int((pooled > hi).sum())
    clipped_note = (
        f"; {beyond:,} values above {hi:.4g} not shown (max {pooled.max():.4g})" if beyond else ""
    )
    top = 0.0
    for config, values in series.items():
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        counts, _ = np.histogram(values, bins=edges)
        frac = counts / values.size
        top = max(top, float(frac.max()))
        color = colors.get(config, PALETTE[0])
        # Added as artists, not through ax.stairs: autoscaling walked every step of every
        # outline in Python, a tenth of the figure's time. The limits are set below.
        ax.add_artist(StepPatch(frac, edges, fill=True, alpha=0.18, color=color, linewidth=0))
        ax.add_artist(
            StepPatch(
                frac,
                edges,
                fill=False,
                color=color,
                linewidth=1.3,
                label=f"{_short(config, 40)} (n={values.size:,})",
            )
        )
    if log:
        ax.set_xscale("log")
    pad = (hi / lo) ** 0.02 if log else (hi - lo) * 0.02
    ax.set_xlim(lo / pad, hi * pad) if log else ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(0, top * 1.05 or 1.0)
    ax.set_xlabel(unit + (" (log scale)" if log else "") + clipped_note)
    ax.set_ylabel("fraction of iterations")
    ax.set_title(f"{probe}: distribution of per-iteration values", loc="left")
    left, right = 0.68, 0.15
    legend = _legend_above(ax, WIDTH - left - right)
    fig.set_size_inches(WIDTH, 2.8 + legend)
    _place(fig, left=left, right=right, top=TITLE_IN + legend, bottom=XAXIS_IN)
    return fig


def reduce_max(matrix: np.ndarray, max_cells: int = MAX_CELLS) -> tuple[np.ndarray, int, int]:
    """Block-maximum reduction of a runs x iterations matrix to at most max_cells per side.

    Returns the reduced matrix and the block sizes (rows, columns). NaN cells (runs shorter
    than the longest) are ignored inside a block.
    """
    rows, cols = matrix.shape
    br = max(1, -(-rows // max_cells))
    bc = max(1, -(-cols // max_cells))
    pr, pc = -(-rows // br) * br, -(-cols // bc) * bc
    padded = np.full((pr, pc), np.nan)
    padded[:rows, :cols] = matrix
    blocks = padded.reshape(pr // br, br, pc // bc, bc)
    with np.errstate(all="ignore"):
        valid = np.isfinite(blocks).any(axis=(1, 3))
        reduced = np.where(
            valid, np.nanmax(np.where(np.isfinite(blocks), blocks, -np.inf), axis=(1, 3)), np.nan
        )
    return reduced, br, bc


@dataclass
class HeatPanel:
    """One configuration's runs x iterations matrix and the periodic indices detected in it."""

    config: str
    matrix: np.ndarray
    periodic: Sequence[int] = field(default_factory=list)
    period: float | None = None


def _marks(ax: Any, marks: np.ndarray, top: float, lo: float, hi: float) -> None:  # noqa: ANN401
    """Periodic indices as triangles above the image; as thin ticks when they crowd."""
    shown = marks[(marks >= lo) & (marks < hi)]
    if not shown.size:
        return
    if shown.size <= MAX_MARKERS:
        ax.plot(
            shown + 0.5,
            np.full(shown.size, top),
            linestyle="none",
            marker="v",
            markersize=5,
            color=MARK_COLOR,
            clip_on=False,
            zorder=5,
        )
    else:
        ax.plot(
            shown + 0.5,
            np.full(shown.size, top),
            linestyle="none",
            marker="|",
            markersize=5,
            markeredgewidth=0.5,
            color=MARK_COLOR,
            clip_on=False,
            zorder=5,
        )


def _norm(values: np.ndarray) -> Normalize:
    """Colour limits at the 0.5th and 99.9th percentiles: one burst saturates (the colour
    bar's arrow says so) instead of washing out the 2x lines; log when spanning a decade."""
    if values.size == 0:
        return Normalize(0, 1)
    lo, hi = (float(v) for v in np.quantile(values, [0.005, 0.999]))
    hi = hi if hi > lo else lo + max(abs(lo) * 0.01, 1e-9)
    norm = LogNorm(lo, hi) if lo > 0 and hi / lo >= 10 else Normalize(lo, hi)
    return norm


@dataclass(frozen=True)
class _MeshScale:
    """A configuration's mesh (block-reduced: each cell the max of block_rows x block_cols
    iterations), its colour scale, and whether the bar shows values beyond it (``extend``)."""

    reduced: np.ndarray
    block_rows: int
    block_cols: int
    norm: Normalize
    extend: str


def _mesh_scale(matrix: np.ndarray, zoom: bool) -> _MeshScale | None:
    """The mesh of a runs x iterations matrix and its scale; None when it has no value."""
    reduced, br, bc = reduce_max(matrix)
    finite = reduced[np.isfinite(reduced)]
    if finite.size == 0:
        return None
    cells = matrix[:, : min(matrix.shape[1], ZOOM)]
    # One scale for the mesh and its zoom, so one colour bar reads both.
    norm = _norm(np.concatenate([finite, cells[np.isfinite(cells)]]) if zoom else finite)
    top = norm.vmax
    extend = "max" if top is not None and float(finite.max()) > top else "neither"
    return _MeshScale(reduced, br, bc, norm, extend)


def _colorbar(frame: _MeshFrame, row: int, image: Any, unit: str | None, extend: str) -> None:  # noqa: ANN401
    """Row ``row``'s colour bar for ``image``: the frame's own, moved to this image's scale,
    where the frame has drawn one before (with the same ``extend``: see _mesh_frame)."""
    cbar = frame.bars[row]
    if cbar is not None:
        cbar.update_normal(image)
    else:
        cbar = frame.fig.colorbar(image, cax=frame.grid[row][-1], extend=extend)
        frame.bars[row] = cbar
    if unit:
        cbar.set_label(unit, fontsize=7.5)
    cbar.ax.tick_params(which="both", labelsize=6.5)


#: The mesh figure's fixed layout, in inches. A layout engine found the same places, but
#: measuring every label of every panel to do so took 40% of a report's drawing time.
MESH_MARGIN = {"left": 0.5, "right": 0.1, "top": 0.5, "bottom": 0.42, "row_gap": 0.44}
MESH_COLORBAR = {"pad": 0.06, "width": 0.09, "labels": 0.68}  # tick labels and the unit
ZOOM_GAP = 0.3  # inches between a mesh and its zoom: half of each one's end tick label


@dataclass
class _MeshFrame:
    """A mesh figure's axes and colour bars, kept to draw the next mesh of the same layout
    on (see :func:`release`)."""

    fig: Figure
    grid: list[list[Any]]
    bars: list[Any]  # per row, its colour bar once it has one (else None)


#: Figures already rendered, kept to draw the next figure of the same kind and layout on,
#: by (kind, layout): a new figure makes every axes and its ticks (each two lines, a grid
#: line and two labels) anew, and that was half of a mesh's cost and a third of a bar
#: chart's; a figure drawn on again only moves them (the same SVG, byte for byte).
_POOL: dict[Hashable, Any] = {}
#: The attribute of a lent figure that names its pool key and what goes back to the pool.
_FRAME_ATTR = "_vmtax_frame"


def release(fig: Figure) -> None:
    """Hand a rendered figure back: a pooled one is drawn on by the next figure of its kind
    and layout, so the figure must not be used after this. Other figures are left alone."""
    lent = getattr(fig, _FRAME_ATTR, None)
    if lent is not None:
        delattr(fig, _FRAME_ATTR)
        key, frame = lent
        _POOL[key] = frame


def _lend(fig: Figure, key: Hashable, frame: Any) -> None:  # noqa: ANN401 - any frame
    """Mark ``fig`` as drawn on ``frame``, which :func:`release` returns to the pool."""
    setattr(fig, _FRAME_ATTR, (key, frame))


def _clear_data(ax: Any) -> None:  # noqa: ANN401
    """Take every artist a figure function added off a pooled axes (its containers, patches,
    lines, collections, texts and images); the axes, its ticks and spines stay. A legend is
    replaced by the next figure's own."""
    for container in [*ax.containers]:
        container.remove()
    for artist in [*ax.patches, *ax.lines, *ax.collections, *ax.texts, *ax.images]:
        artist.remove()


def _mesh_frame(rows: int, zoom: bool, extends: Sequence[str | None]) -> _MeshFrame:
    """A frame for a mesh of ``rows`` configurations: a released one of that layout, its
    data taken off, else a new one. A row's colour bar cannot be taken off a frame, nor its
    arrow (``extends``: "max" or "neither", None for a row without values, whose panels are
    turned off), so a frame whose bars differ is not drawn on."""
    frame = _POOL.pop(("mesh", rows, zoom), None)
    if frame is not None and any(
        bar is not None and (i >= len(extends) or bar.extend != extends[i])
        for i, bar in enumerate(frame.bars)
    ):
        frame = None
    if frame is None:
        fig = Figure(figsize=(WIDTH, 0.6 + 1.6 * rows))
        with matplotlib.rc_context({"axes.grid": False}):  # cheaper than removing it per axes
            frame = _MeshFrame(fig, _mesh_axes(fig, rows, zoom), [None] * rows)
    else:
        for row in frame.grid:
            for ax in row[:-1]:
                for artist in [*ax.images, *ax.lines]:
                    artist.remove()
                ax.relim()  # the limits come from this mesh's data alone
                for loc in ("left", "right"):
                    ax.set_title("", loc=loc)
                ax.set_xlabel("")
                ax.set_ylabel("")
            for ax in row:
                ax.set_axis_on()
    _lend(frame.fig, ("mesh", rows, zoom), frame)
    return frame


def _mesh_axes(fig: Figure, rows: int, zoom: bool) -> list[list[Any]]:
    """Per row, left to right: the mesh, with ``zoom`` the zoom panel, and the colour bar
    both share (one scale per configuration; a bar is an axes, and axes are costly)."""
    width, height = fig.get_size_inches()
    m, cb = MESH_MARGIN, MESH_COLORBAR
    bar = cb["pad"] + cb["width"] + cb["labels"]
    room = width - m["left"] - m["right"] - bar - (ZOOM_GAP if zoom else 0.0)
    widths = [room * 0.75, room * 0.25] if zoom else [room]
    panel_h = (height - m["top"] - m["bottom"] - m["row_gap"] * (rows - 1)) / rows
    out = []
    for row in range(rows):
        bottom = m["bottom"] + (rows - 1 - row) * (panel_h + m["row_gap"])
        x, axes = m["left"], []
        for w in widths:
            axes.append(fig.add_axes((x / width, bottom / height, w / width, panel_h / height)))
            x += w + ZOOM_GAP
        cax_x = x - ZOOM_GAP + cb["pad"]
        rect = (cax_x / width, bottom / height, cb["width"] / width, panel_h / height)
        axes.append(fig.add_axes(rect))
        out.append(axes)
    return out


def mesh_layout(panels: Sequence[HeatPanel]) -> tuple[int, bool]:
    """The layout of ``heatmap(panels)``'s frame: its rows (one per configuration) and
    whether they have zooms. Meshes of one layout draw on one frame, in turn."""
    return max(len(panels), 1), any(p.matrix.shape[1] > MAX_CELLS for p in panels)


@_styled
def heatmap(probe: str, unit: str, panels: Sequence[HeatPanel]) -> Figure:
    """Run x iteration mesh per configuration (study D), periodic indices marked on top.

    When a run is longer than ``MAX_CELLS`` iterations the full mesh is block-reduced and a
    second axis shows the first ``ZOOM`` iterations cell by cell, where a periodic line is
    still a line.
    """
    n, zoom = mesh_layout(panels)
    scales = [_mesh_scale(p.matrix, zoom) for p in panels]
    frame = _mesh_frame(n, zoom, [s.extend if s else None for s in scales])
    fig, grid = frame.fig, frame.grid
    shapes: list[str] = []
    for index, (row, panel, scale) in enumerate(zip(grid, panels, scales, strict=False)):
        ax = row[0]
        if scale is None:
            for a in row:
                a.set_axis_off()
            continue
        reduced, br, bc, norm = scale.reduced, scale.block_rows, scale.block_cols, scale.norm
        rows, cols = panel.matrix.shape
        width = min(cols, ZOOM)
        cells = panel.matrix[:, :width]
        image = ax.imshow(
            reduced,
            aspect="auto",
            cmap="magma",
            norm=norm,
            origin="lower",
            extent=(0, cols, -0.5, rows - 0.5),
            interpolation="nearest",
        )
        shapes.append(
            f"{rows} runs × {cols:,} iterations"
            + (f", each cell the max of {br}×{bc}" if br * bc > 1 else "")
        )
        room = 62 if zoom else 84  # characters that fit above the mesh at this font size
        ax.set_title(
            _short(panel.config, room - 26 if len(panel.periodic) else room),
            loc="left",
            fontsize=8,
            fontweight="normal",
        )
        ax.set_ylabel("run")
        marks = np.asarray(sorted(set(panel.periodic)), dtype=float)
        _marks(ax, marks, rows - 0.5, 0, cols)
        if marks.size:
            period = f" (period {panel.period:g})" if panel.period else ""
            ax.set_title(
                f"▼ {marks.size} periodic{period}",
                loc="right",
                fontsize=7.5,
                color="#0077AA",
                fontweight="normal",
            )
        if zoom:
            zax = row[1]
            zax.imshow(
                cells,
                aspect="auto",
                cmap="magma",
                norm=norm,
                origin="lower",
                extent=(0, width, -0.5, rows - 0.5),
                interpolation="nearest",
            )
            _marks(zax, marks, rows - 0.5, 0, width)
            zax.set_title(
                f"first {width} iterations", loc="left", fontsize=7.5, fontweight="normal"
            )
            zax.tick_params(labelleft=False)
            zax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
            zax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=3))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.xaxis.set_major_formatter(FuncFormatter(si_tick))
        _colorbar(frame, index, image, unit, scale.extend)
    for a in grid[-1][:-1]:
        a.set_xlabel("iteration")
    detail = shapes[0] if len(set(shapes)) == 1 else "; ".join(dict.fromkeys(shapes))
    head = f"{probe}: run × iteration mesh"
    fig.suptitle(
        f"{head} ({_short(detail, 84 - len(head))})",
        x=0.01,
        ha="left",
        fontsize=9.5,
        fontweight="bold",
    )
    return fig


@_styled
def exit_reasons(
    frame: pd.DataFrame,
    *,
    title: str,
    xlabel: str = "exit-handling time, normalised to the reference total",
    total: str = "total {:.3f}",
) -> Figure:
    """Stacked bars of exit-handling cost by reason group, one bar per configuration.

    ``frame``: columns config, group, value (already normalised to the reference
    configuration's total, as study E does). Bars are horizontal; the total is written at
    the end of each bar.
    """
    pivot = frame.pivot_table(
        index="config", columns="group", values="value", aggfunc="sum", sort=False
    ).fillna(0.0)
    pivot = pivot.loc[:, pivot.sum(axis=0) > 0]
    order = pivot.sum(axis=0).sort_values(ascending=False).index
    pivot = pivot[order]
    fig = Figure(figsize=(WIDTH, 1.2 + 0.55 * len(pivot)))
    with matplotlib.rc_context({"axes.grid.axis": "x"}):
        ax = fig.subplots()
    left = np.zeros(len(pivot))
    y = np.arange(len(pivot))
    for i, group in enumerate(pivot.columns):
        width = pivot[group].to_numpy()
        ax.barh(
            y,
            width,
            left=left,
            height=0.55,
            color=PALETTE[i % len(PALETTE)],
            label=_short(str(group), 24),
            edgecolor="white",
            linewidth=0.5,
        )
        left = left + width
    for yi, end in zip(y, left, strict=True):
        ax.annotate(
            total.format(end),
            (end, yi),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    names = [_wrap(str(c), 30) for c in pivot.index]
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlim(0, left.max() * 1.18 if left.size and left.max() > 0 else 1)
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left")
    margin = max((text_inches(t, RC["font.size"])[0] for t in names), default=0.0)
    margin += TICKS_IN + 0.05
    legend = _legend_above(ax, WIDTH - margin - 0.2, 7.5)
    fig.set_size_inches(WIDTH, 1.2 + 0.55 * len(pivot) + legend)
    _place(fig, left=margin, right=0.2, top=TITLE_IN + legend, bottom=XAXIS_IN)
    return fig


@_styled
def scaling(
    frame: pd.DataFrame,
    *,
    x_label: str,
    y_label: str,
    title: str,
    reference: pd.DataFrame | None = None,
) -> Figure:
    """Scaling curves: y against a swept x, one line per series, optional error bars.

    ``frame``: series, x, y, and optionally yerr and point (a short label per point).
    ``reference``: optional x, y of a dashed guide line (for example perfect scaling).
    """
    fig = Figure(figsize=(WIDTH, 3.0))
    ax = fig.subplots()
    if reference is not None and not reference.empty:
        ax.plot(
            reference["x"],
            reference["y"],
            linestyle="--",
            color="#888888",
            linewidth=1,
            label=f"proportional to {x_label}",
        )
    for i, (series, sub) in enumerate(frame.groupby("series", sort=False)):
        sub = sub.sort_values("x")
        color = PALETTE[i % len(PALETTE)]
        yerr = sub["yerr"].to_numpy(dtype=float) if "yerr" in sub else None
        ax.errorbar(
            sub["x"],
            sub["y"],
            yerr=yerr,
            marker="o",
            markersize=4,
            color=color,
            capsize=3,
            linewidth=1.4,
            label=_short(str(series), 40),
        )
        if "point" in sub:
            for xv, yv, text in zip(sub["x"], sub["y"], sub["point"], strict=True):
                ax.annotate(
                    str(text),
                    (xv, yv),
                    xytext=(4, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                )
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, loc="left")
    ax.margins(x=0.08, y=0.15)
    if (frame["y"] >= 0).all():
        ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(SiFormatter())
    left, right = 0.68, 0.15
    legend = _legend_above(ax, WIDTH - left - right)
    fig.set_size_inches(WIDTH, 3.0 + legend)
    _place(fig, left=left, right=right, top=TITLE_IN + legend, bottom=XAXIS_IN)
    return fig
