"""Render a ReportModel as one self-contained HTML file (inline CSS and SVG, no script)."""

from __future__ import annotations

from importlib import resources

import jinja2
from markupsafe import Markup

from vmtax.report.analysis import ReportModel
from vmtax.report.svg import render_all
from vmtax.version import __version__

SECTIONS = (
    ("levels", "Throughput and response time by configuration"),
    ("overhead", "Overhead vs baseline"),
    ("distribution", "Latency distributions"),
    ("mesh", "Run × iteration meshes"),
    ("exits", "Exit reasons"),
    ("scaling", "Scaling curves"),
)


def environment() -> jinja2.Environment:
    """Jinja2 with autoescape on for every template: user text never becomes markup."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("vmtax.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
    )


def render_html(model: ReportModel) -> str:
    """The report as one HTML document."""
    css = resources.files("vmtax.report").joinpath("templates", "report.css").read_text()
    # matplotlib's SVG escapes every text node itself; the markup is trusted, the text in it
    # is not user-controlled markup.
    drawn = render_all(
        [(f.key, f.draw) for f in model.figures],
        "svg",
        shares=[f.shares for f in model.figures],
    )
    svgs = {f.key: Markup(svg) for f, svg in zip(model.figures, drawn, strict=True)}  # noqa: S704
    # The stylesheet ships in the package; no user input reaches it.
    style = Markup(css)  # noqa: S704
    template = environment().get_template("report.html.j2")
    return template.render(m=model, css=style, svgs=svgs, sections=SECTIONS, version=__version__)
