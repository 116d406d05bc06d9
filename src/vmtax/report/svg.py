"""Turn matplotlib figures into inline SVG (for HTML) or PNG bytes (for markdown).

Text stays text (``svg.fonttype = 'none'``): the browser draws it with its own sans-serif
font, so nothing is embedded or fetched, and labels remain searchable. matplotlib escapes
text for XML, so a user label cannot become markup. Images inside a figure (heatmaps) are
embedded as base64 PNG by matplotlib itself.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, overload

import matplotlib
from matplotlib.figure import Figure

from vmtax.report.forked import run_forked, workers_for

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.family": ["sans-serif"],
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.titleweight": "bold",
    # A title at a fixed height: no figure has tick labels on top, and placing titles
    # automatically measured every axes' decorations once per draw.
    "axes.titley": 1.0,
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


@overload
def render_all(
    figures: list[tuple[str, Callable[[], Figure]]],
    kind: Literal["svg"] = "svg",
    shares: Sequence[Hashable | None] = (),
) -> list[str]: ...


@overload
def render_all(
    figures: list[tuple[str, Callable[[], Figure]]],
    kind: Literal["png"],
    shares: Sequence[Hashable | None] = (),
) -> list[bytes]: ...


def render_all(
    figures: list[tuple[str, Callable[[], Figure]]],
    kind: Literal["svg", "png"] = "svg",
    shares: Sequence[Hashable | None] = (),
) -> Sequence[str | bytes]:
    """Make every figure (``(key, draw)``) and render it as SVG markup (``kind="svg"``,
    salted by its key) or PNG bytes, in order.

    Making and drawing figures is matplotlib in Python under the GIL, and most of a report's
    time, so with many figures both are spread over forked processes, one per core.
    ``shares``, beside each figure, names the set-up it draws on with others (a mesh's
    frame: see ``figures.release``), None for none. The first figure of each set-up is drawn
    here, before the processes fork, and every process inherits that set-up built and
    drawn on once, where each made its own.
    """
    calls = [partial(_make_and_render, kind, key, draw) for key, draw in figures]
    if workers_for(len(calls)) < 2 or len(calls) < PARALLEL_FIGURES:
        return [call() for call in calls]
    firsts = {share: i for i, share in reversed(list(enumerate(shares))) if share is not None}
    drawn = {i: calls[i]() for i in sorted(firsts.values())}
    rest = [i for i in range(len(calls)) if i not in drawn]
    # Meshes have the most axes: they go first.
    meshes = [j for j, i in enumerate(rest) if figures[i][0].startswith("mesh")]
    if rest:
        drawn.update(zip(rest, run_forked([calls[i] for i in rest], first=meshes), strict=True))
    return [drawn[i] for i in range(len(calls))]


def _make_and_render(kind: str, key: str, draw: Callable[[], Figure]) -> str | bytes:
    # figures imports this module (RC): imported here, where figures is already loaded.
    from vmtax.report.figures import release

    fig = draw()
    try:
        return _render(kind, key, fig)
    finally:
        release(fig)  # a mesh's axes are drawn on again by the next mesh


def _render(kind: str, key: str, fig: Figure) -> str | bytes:
    return to_svg(fig, key) if kind == "svg" else to_png(fig)


def to_png(fig: Figure, dpi: int = 110) -> bytes:
    """PNG bytes of the figure (markdown reports link figures as files)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
