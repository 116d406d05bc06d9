"""Turn matplotlib figures into inline SVG (for HTML) or PNG bytes (for markdown).

Text stays text (``svg.fonttype = 'none'``): the browser draws it with its own sans-serif
font, so nothing is embedded or fetched, and labels remain searchable. matplotlib escapes
text for XML, so a user label cannot become markup. Images inside a figure (heatmaps) are
embedded as base64 PNG by matplotlib itself.
"""

from __future__ import annotations

import io
import re

import matplotlib
from matplotlib.figure import Figure

RC = {
    "svg.fonttype": "none",
    "font.family": ["sans-serif"],
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": 8.0,
    "image.interpolation": "nearest",
}

_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)
_SVG_TAG = re.compile(r"<svg\b[^>]*>")
_SIZE_ATTR = re.compile(r'\s(?:width|height)="[^"]*"')


def to_svg(fig: Figure, key: str) -> str:
    """SVG markup for inline use: no XML prologue, sized by CSS through its viewBox.

    ``key`` salts matplotlib's hashed ids, so that clip paths of different figures in one
    page never share an id, and the same input gives the same bytes.
    """
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"vmtax-{key}", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    # The prologue (XML declaration, DOCTYPE) is invalid inside HTML; the RDF metadata only
    # names namespaces by URL, which would muddy the "no URL in the file" check.
    svg = _METADATA.sub("", _PROLOGUE.sub("", buf.getvalue(), count=1), count=1)
    tag = _SVG_TAG.search(svg)
    if tag is None:
        raise ValueError("matplotlib produced no <svg> element")
    start = _SIZE_ATTR.sub("", tag.group(0))
    return svg[: tag.start()] + start + svg[tag.end() :]


#: Below this many figures a process pool costs more than it saves.
PARALLEL_FIGURES = 4


def render_all(figures: list[tuple[str, Figure]], kind: str = "svg") -> list[str | bytes]:
    """Every figure as SVG markup (``kind="svg"``, salted by its key) or PNG bytes, in order.

    Drawing is matplotlib in Python under the GIL, and most of a report's time, so with many
    figures the drawing is spread over one process per core (a Figure pickles with its data).
    """
    import os

    workers = min(len(figures), len(os.sched_getaffinity(0)))
    if workers < 2 or len(figures) < PARALLEL_FIGURES:
        return [_render(kind, key, fig) for key, fig in figures]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_render, kind, key, fig) for key, fig in figures]
        return [f.result() for f in futures]


def _render(kind: str, key: str, fig: Figure) -> str | bytes:
    return to_svg(fig, key) if kind == "svg" else to_png(fig)


def to_png(fig: Figure, dpi: int = 110) -> bytes:
    """PNG bytes of the figure (markdown reports link figures as files)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
