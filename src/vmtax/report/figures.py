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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatter, MaxNLocator

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


def plain_log_labels(fig: Figure) -> Figure:
    """Every log axis of ``fig`` (colour bars of log norms included) gets plain labels."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            base = getattr(axis.get_transform(), "base", 10)
            minor = axis.get_minor_formatter()
            only_base = isinstance(minor, LogFormatter) and minor.labelOnlyBase
            axis.set_major_formatter(PlainLogFormatter(base))
            axis.set_minor_formatter(PlainLogFormatter(base, labelOnlyBase=only_base))
    return fig


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


@_styled
def level_bars(rows: pd.DataFrame, probe: str, colors: Mapping[str, str]) -> Figure:
    """Throughput (left) and mean response time (right) per configuration, 95% CI bars.

    ``rows``: one row per configuration with config, throughput_mean, throughput_ci_low,
    throughput_ci_high, throughput_unit, resp_mean, resp_ci_low, resp_ci_high, unit. An axis
    turns logarithmic when its means span two decades or more, so no bar vanishes.
    """
    fig = Figure(figsize=(WIDTH, 1.3 + 0.5 * len(rows)), layout="constrained")
    axes = fig.subplots(1, 2)
    labels = [_wrap(c) for c in rows["config"]]
    y = np.arange(len(rows))
    bar_colors = [colors.get(c, PALETTE[0]) for c in rows["config"]]
    panels = (
        ("throughput", "throughput_unit", "Throughput", "higher is better"),
        ("resp", "unit", "Response time", "lower is better"),
    )
    for ax, (metric, unit_col, title, hint) in zip(axes, panels, strict=True):
        mean = rows[f"{metric}_mean"].astype(float)
        unit = next((str(u) for u in rows[unit_col] if isinstance(u, str) and u), "")
        if mean.isna().all():
            ax.set_axis_off()
            ax.text(
                0.5,
                0.5,
                f"{title}: not reported by this probe",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="#666666",
            )
            continue
        err = _yerr(
            mean, rows[f"{metric}_ci_low"].astype(float), rows[f"{metric}_ci_high"].astype(float)
        )
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
        for yi, m in zip(y, mean, strict=True):
            if np.isfinite(m):
                ax.annotate(
                    _value_label(m),
                    (m, yi),
                    xytext=(6, -7),
                    textcoords="offset points",
                    fontsize=7,
                    color="#333333",
                )
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        ax.set_title(title, loc="left")
        ax.set_xlabel(f"{unit}, {hint}" + (" (log scale)" if log else ""))
        ax.margins(x=0.12)
    if axes[0].axison:  # same configurations in the same order: label them once
        axes[1].tick_params(labelleft=False)
    return fig


@_styled
def overhead_bars(rows: pd.DataFrame, colors: Mapping[str, str]) -> Figure:
    """Overhead vs the baseline: a group per probe, a bar per configuration, CI whiskers.

    ``rows``: probe, config, overhead, ci_low, ci_high, is_baseline. A log axis is used when
    the overheads span a decade or more (nested costs multiply); bars then grow from 1.0.
    """
    rows = rows[~rows["is_baseline"].astype(bool)]  # the baseline is the dashed 1.0 line
    probes = list(dict.fromkeys(rows["probe"]))
    configs = list(dict.fromkeys(rows["config"]))
    n_cfg = max(len(configs), 1)
    width = 0.8 / n_cfg
    fig = Figure(figsize=(WIDTH, 3.4 + 0.18 * ((n_cfg + 1) // 2)), layout="constrained")
    ax = fig.subplots()
    values = rows[["overhead", "ci_low", "ci_high"]].to_numpy(dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    log = positive.size > 0 and positive.max() / positive.min() >= 10.0
    base = 1.0 if log else 0.0
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
        for xi, m, top in zip(x, mean, tops, strict=True):
            if np.isfinite(m):  # above the whisker, so the two never cross
                ax.annotate(
                    f"{m:.3g}×",
                    (xi, top),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=6.5,
                    color="#333333",
                )
    ax.axhline(1.0, color="#222222", linewidth=1.1, linestyle="--", zorder=3)
    if log:
        ax.set_yscale("log")
        # Leave room under the 1.0 line so it shows, and bars below 1 (cheaper) fit.
        ax.set_ylim(min(0.7, float(positive.min()) * 0.8), float(positive.max()) * 2.5)
    crowded = len(probes) * n_cfg > 8
    ax.set_xticks(
        np.arange(len(probes)),
        [_short(p, 18) for p in probes],
        rotation=30 if crowded else 0,
        ha="right" if crowded else "center",
        rotation_mode="anchor",
    )
    ax.grid(axis="x", visible=False)
    ax.set_ylabel("overhead, × baseline" + (" (log scale)" if log else ""))
    ax.set_title("Overhead vs baseline (dashed line 1.0 = baseline), whiskers = 95% CI", loc="left")
    fig.legend(loc="outside lower center", ncols=min(n_cfg, 2), fontsize=7.5)
    ax.margins(y=0.12)
    return fig


@_styled
def distribution(
    probe: str, unit: str, series: Mapping[str, np.ndarray], colors: Mapping[str, str]
) -> Figure:
    """Histogram overlay of per-iteration values, one outline per configuration.

    Fixed ``HIST_BINS`` bins (log-spaced when the values are skewed); heights are the
    fraction of that configuration's iterations, so configurations with different sample
    counts compare. The top 0.1% is left out of the range and counted.
    """
    fig = Figure(figsize=(WIDTH, 2.8), layout="constrained")
    ax = fig.subplots()
    pooled = (
        np.concatenate([v[np.isfinite(v)] for v in series.values()]) if series else np.array([])
    )
    if pooled.size == 0:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        return fig
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
    for config, values in series.items():
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        counts, _ = np.histogram(values, bins=edges)
        frac = counts / values.size
        color = colors.get(config, PALETTE[0])
        ax.stairs(frac, edges, fill=True, alpha=0.18, color=color)
        ax.stairs(
            frac,
            edges,
            color=color,
            linewidth=1.3,
            label=f"{_short(config, 40)} (n={values.size:,})",
        )
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(unit + (" (log scale)" if log else "") + clipped_note)
    ax.set_ylabel("fraction of iterations")
    ax.set_title(f"{probe}: distribution of per-iteration values", loc="left")
    ax.legend(loc="upper right")
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


def _colorbar(fig: Figure, image: Any, cax: Any, unit: str | None) -> None:  # noqa: ANN401
    data = image.get_array()
    over = np.nanmax(data) > image.norm.vmax if np.isfinite(data).any() else False
    cbar = fig.colorbar(image, cax=cax, extend="max" if over else "neither")
    if unit:
        cbar.set_label(unit, fontsize=7.5)
    cbar.ax.tick_params(which="both", labelsize=6.5)


#: The mesh figure's fixed layout, in inches. A layout engine found the same places, but
#: measuring every label of every panel to do so took 40% of a report's drawing time.
MESH_MARGIN = {"left": 0.5, "right": 0.1, "top": 0.5, "bottom": 0.42, "row_gap": 0.44}
MESH_COLORBAR = {"pad": 0.06, "width": 0.09, "labels": 0.68}  # tick labels and the unit


def _mesh_axes(fig: Figure, rows: int, zoom: bool) -> list[list[Any]]:
    """Per row: the mesh, its colour bar, and with ``zoom`` the zoom panel and its bar."""
    width, height = fig.get_size_inches()
    m, cb = MESH_MARGIN, MESH_COLORBAR
    bar = cb["pad"] + cb["width"] + cb["labels"]
    room = width - m["left"] - m["right"] - bar * (2 if zoom else 1)
    widths = [room * 0.75, room * 0.25] if zoom else [room]
    panel_h = (height - m["top"] - m["bottom"] - m["row_gap"] * (rows - 1)) / rows
    out = []
    for row in range(rows):
        bottom = m["bottom"] + (rows - 1 - row) * (panel_h + m["row_gap"])
        x, axes = m["left"], []
        for w in widths:
            axes.append(fig.add_axes((x / width, bottom / height, w / width, panel_h / height)))
            cax_x = x + w + cb["pad"]
            rect = (cax_x / width, bottom / height, cb["width"] / width, panel_h / height)
            axes.append(fig.add_axes(rect))
            x += w + bar
        out.append(axes)
    return out


@_styled
def heatmap(probe: str, unit: str, panels: Sequence[HeatPanel]) -> Figure:
    """Run x iteration mesh per configuration (study D), periodic indices marked on top.

    When a run is longer than ``MAX_CELLS`` iterations the full mesh is block-reduced and a
    second axis shows the first ``ZOOM`` iterations cell by cell, where a periodic line is
    still a line.
    """
    n = max(len(panels), 1)
    zoom = any(p.matrix.shape[1] > MAX_CELLS for p in panels)
    fig = Figure(figsize=(WIDTH, 0.6 + 1.6 * n))
    grid = _mesh_axes(fig, n, zoom)
    shapes: list[str] = []
    for row, panel in zip(grid, panels, strict=False):
        ax = row[0]
        reduced, br, bc = reduce_max(panel.matrix)
        finite = reduced[np.isfinite(reduced)]
        if finite.size == 0:
            for a in row:
                a.set_axis_off()
            continue
        norm = _norm(finite)
        rows, cols = panel.matrix.shape
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
            zax = row[2]
            width = min(cols, ZOOM)
            cells = panel.matrix[:, :width]
            zimage = zax.imshow(
                cells,
                aspect="auto",
                cmap="magma",
                norm=_norm(cells[np.isfinite(cells)]),
                origin="lower",
                extent=(0, width, -0.5, rows - 0.5),
                interpolation="nearest",
            )
            _marks(zax, marks, rows - 0.5, 0, width)
            zax.set_title(
                f"first {width} iterations", loc="left", fontsize=7.5, fontweight="normal"
            )
            zax.tick_params(labelleft=False)
            zax.grid(False)
            zax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
            _colorbar(fig, zimage, row[3], None)
        ax.grid(False)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.xaxis.set_major_formatter(FuncFormatter(si_tick))
        _colorbar(fig, image, row[1], unit)
    for a in grid[-1][::2]:
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
    fig = Figure(figsize=(WIDTH, 1.4 + 0.55 * len(pivot)), layout="constrained")
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
    ax.set_yticks(y, [_wrap(str(c), 30) for c in pivot.index])
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlim(0, left.max() * 1.18 if left.size and left.max() > 0 else 1)
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.12), ncols=4, fontsize=7.5)
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
    fig = Figure(figsize=(WIDTH, 3.0), layout="constrained")
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
    ax.legend(loc="best")
    ax.margins(x=0.08, y=0.15)
    if (frame["y"] >= 0).all():
        ax.set_ylim(bottom=0)
    return fig
