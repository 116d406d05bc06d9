"""Reports: a self-contained HTML page or markdown with PNG figures, rendered from what
``report.gather`` read (the only part of the report that sees a store).

Example::

    from vmtax.store import Store
    from vmtax.report import gather, write_report
    with Store.open(None, read_only=True) as store:
        data = gather.load(store, ["exp=latest"])
    write_report(data, Path("report.html"))

``vmtax.experiment.report.write_report`` does both steps, as `vmtax report` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vmtax import outfile
from vmtax.errors import VmtaxError
from vmtax.stats.compare_options import CompareOptions

if TYPE_CHECKING:
    from vmtax.report.analysis import ReportModel
    from vmtax.report.inputs import ReportInput


@dataclass
class Written:
    path: Path
    size: int
    figures: int
    extra: Path | None = None


def write_report(
    data: ReportInput,
    output: Path,
    *,
    fmt: str = "html",
    options: CompareOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> Written:
    """Render the report of ``data`` (``report.gather.load``) and write it to ``output``;
    ``options`` are its comparison's (the defaults when None), as `vmtax compare`'s.

    ``progress`` is called with the name of each step as it starts (statistics, timing
    artifacts, figures, writing)."""
    # heavy: matplotlib, Jinja2, scipy and statsmodels, only when a report is written
    from vmtax.report import analysis
    from vmtax.report.sweep import sections, standalone
    from vmtax.report.threads import one_blas_thread

    step = progress or (lambda _name: None)
    sweeps = sections(data.sweeps)
    if data.sweeps_only:
        _atomic_write(output, standalone(sweeps, fmt))
        return Written(path=output, size=output.stat().st_size, figures=len(sweeps))
    # The heavy steps run a process per core already: BLAS threads on top only spin.
    with one_blas_thread():
        model = analysis.build(data, options=options, progress=step)
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
