"""Render a ReportModel as markdown with its figures as PNG files in a folder beside it."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import jinja2

from vmtax.report.analysis import ReportModel
from vmtax.report.html import SECTIONS
from vmtax.report.svg import render_all
from vmtax.version import __version__

# Only what can start markup inline: with [ and ] escaped, parentheses and ! are inert.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def md_escape(text: object) -> str:
    """Escape markdown (and inline HTML) so user text renders as the same text."""
    return _SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")


def md_code(text: object) -> str:
    """Text inside single backticks: backticks and newlines cannot survive, so replace them."""
    return str(text).replace("`", "'").replace("\n", " ")


def figures_dir(output: Path) -> Path:
    """Where the PNGs of ``output`` go: ``<stem>_figures`` beside it."""
    return output.with_name(output.stem + "_figures")


def render_markdown(model: ReportModel, output: Path) -> str:
    """Write the PNG figures next to ``output`` and return the markdown text."""
    folder = figures_dir(output)
    folder.mkdir(parents=True, exist_ok=True)
    pngs = {}
    drawn = render_all(
        [(f.key, f.draw) for f in model.figures],
        "png",
        shares=[f.shares for f in model.figures],
    )
    for i, (fig, png) in enumerate(zip(model.figures, drawn, strict=True), start=1):
        name = f"{i:02d}-{fig.key}.png"
        (folder / name).write_bytes(png)
        pngs[fig.key] = quote(f"{folder.name}/{name}")  # a space in the name breaks a link
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vmtax.report", "templates"),
        autoescape=False,  # noqa: S701 - markdown, escaped by the md filter instead
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_escape
    env.filters["code"] = md_code
    return env.get_template("report.md.j2").render(
        m=model, pngs=pngs, sections=SECTIONS, version=__version__
    )
