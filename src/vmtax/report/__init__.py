"""Reports: a self-contained HTML page or markdown with PNG figures, drawn from the store.

Example::

    from vmtax.store import Store
    from vmtax.report import write_report
    write_report(Store.open(), ["exp=latest"], Path("report.html"))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vmtax import outfile
from vmtax.errors import VmtaxError

if TYPE_CHECKING:
    from vmtax.report.analysis import ReportModel
    from vmtax.store import Store


@dataclass
class Written:
    path: Path
    size: int
    figures: int
    extra: Path | None = None


def write_report(
    store: Store,
    selectors: Sequence[str],
    output: Path,
    *,  # noqa: ANN401
    fmt: str = "html",
    baseline: str | None = None,
    command: Sequence[str] = (),
    resamples: int = 10_000,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Written:
    """Build the report of the runs ``selectors`` pick and write it to ``output``.

    ``progress`` is called with the name of each step as it starts (loading, statistics,
    timing artifacts, figures, writing)."""
    # heavy: matplotlib, scipy and statsmodels, only when a report is written
    from vmtax.report import analysis, exits, inputs

    step = progress or (lambda _name: None)
    step("loading runs and samples")
    # heavy: matplotlib and Jinja2, only when a report is written
    from vmtax.report.sweep import sections, selected_sweeps, standalone

    sweeps = sections(store, selected_sweeps(store, selectors))
    if sweeps and not (store.runs(list(selectors))["status"] == "ok").any():
        # The selectors picked sweeps and no runs: the report is the sweeps alone.
        _atomic_write(output, standalone(sweeps, fmt))
        return Written(path=output, size=output.stat().st_size, figures=len(sweeps))
    data = inputs.load(store, selectors, baseline, command)
    data.extra["exit_profiles"] = exits.load(store, data.runs["experiment_id"])
    data.extra["explained"] = exits.explained(store, data.runs, data.extra["exit_profiles"])
    data.extra["progress"] = step
    model = analysis.build(data, resamples=resamples, seed=seed)
    model.sweeps = sweeps
    step("writing " + ("markdown and PNG figures" if fmt == "markdown" else "HTML"))
    return write_model(model, output, fmt=fmt)


def write_model(model: ReportModel, output: Path, *, fmt: str = "html") -> Written:
    """Render an already built ReportModel to ``output`` (html or markdown)."""
    # heavy: matplotlib and Jinja2, only when a report is written
    from vmtax.report.html import render_html
    from vmtax.report.markdown import figures_dir, render_markdown

    extra = None
    try:
        if fmt == "markdown":
            text = render_markdown(model, output)
            extra = figures_dir(output)
        else:
            text = render_html(model)
        _atomic_write(output, text)
    except OSError as exc:
        raise VmtaxError(f"cannot write {output}: {exc.strerror or exc}") from None
    return Written(path=output, size=output.stat().st_size, figures=len(model.figures), extra=extra)


def _atomic_write(path: Path, text: str) -> None:
    # A reader (or a browser reloading) never sees half a report; -o's rules: outfile.
    outfile.write_text(path, text)
