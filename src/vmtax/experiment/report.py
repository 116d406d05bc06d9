"""The report of an experiment: gathered from the store once (``report.gather``), then
rendered (``report.write_report``). `vmtax report` writes it on demand; after a run,
``experiment.run`` and ``experiment.resume`` write it beside the runs (``after_run``), so
`vmtax run` and ``vmtax.api.run`` leave the same file. The caller only chooses whether a
child process writes it (``Reporting.background``) and how its steps are shown. A report of
a stored experiment reads the store through ``store.reader.StoreReader``: a SQLite store
without SQLAlchemy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vmtax.errors import UsageError, VmtaxError
from vmtax.experiment.command import command_line
from vmtax.outfile import destination
from vmtax.report import Written
from vmtax.report import write_report as render
from vmtax.stats.compare_options import CompareOptions
from vmtax.store.reader import StoreReader

if TYPE_CHECKING:
    from vmtax.store import Store

#: Where a run writes the report of the experiment it just made: a path ({id} is the
#: experiment id, {store} names the store), or "none" for no report.
RUN_REPORT_ENV = "VMTAX_RUN_REPORT"
#: {store} keeps runs on two stores in one directory from overwriting each other's report.
RUN_REPORT_DEFAULT = "vmtax-report-{store}-{id}.html"

Steps = Callable[[str], None]


def write_report(
    store: Store | StoreReader,
    selectors: Sequence[str],
    output: Path,
    *,
    fmt: str = "html",
    baseline: str | None = None,
    command: Sequence[str] = (),
    options: CompareOptions | None = None,
    progress: Steps | None = None,
) -> Written:
    """Build the report of the runs ``selectors`` pick and write it to ``output``;
    ``options`` are its comparison's (the defaults when None), as `vmtax compare`'s.

    ``progress`` is called with the name of each step as it starts (loading, statistics,
    timing artifacts, figures, writing)."""
    # heavy: the sweep summary's and sampling's statistics (scipy), only when a report is written
    from vmtax.report.gather import load

    step = progress or (lambda _name: None)
    step("loading runs and samples")
    data = load(store, selectors, baseline, command, by=options.by if options else None)
    return render(data, output, fmt=fmt, options=options, progress=step)


def stored_report(
    db: str | None,
    selectors: Sequence[str],
    output: Path,
    *,
    argv: Sequence[str],
    fmt: str = "html",
    baseline: str | None = None,
    options: CompareOptions | None = None,
    progress: Steps | None = None,
) -> Written:
    """`vmtax report`: the report of a store opened read-only (``db``: a URL, a path, or None
    for the default); ``argv``, the command line it is recorded with."""
    with StoreReader.open(db) as store:
        return write_report(
            store, selectors, output, fmt=fmt, baseline=baseline,
            command=command_line(list(argv), store.url_display), options=options,
            progress=progress,
        )  # fmt: skip


def write_run_report(
    store: Store | StoreReader,
    exp_id: int,
    out: Path,
    progress: Steps | None = None,
    options: CompareOptions | None = None,
) -> Written:
    """The report of one run's experiment, as `vmtax report exp=ID -o OUT` writes it with
    the same options (the run's --boot-cost)."""
    options = options or CompareOptions()
    command = ["vmtax", "report", f"exp={exp_id}", "-o", str(out), *_given(options)]
    return write_report(
        store, [f"exp={exp_id}"], out, command=command, progress=progress, options=options
    )


def _given(options: CompareOptions) -> list[str]:
    """`vmtax report`'s options that differ from their defaults, as its command line."""
    default = CompareOptions()
    flags = [("--resamples", "resamples"), ("--seed", "seed"), ("--boot-cost", "boot_cost_s")]
    out: list[str] = []
    for flag, name in flags:
        if getattr(options, name) != getattr(default, name):
            out += [flag, f"{getattr(options, name):g}"]
    if options.by:
        out += ["--by", options.by]
    return out


def stored_run_report(
    db: str | None, exp_id: int, out: Path, options: CompareOptions | None = None
) -> Written:
    """``write_run_report`` on a store opened read-only (``db``: None for ``$VMTAX_DB``)."""
    with StoreReader.open(db) as store:
        return write_run_report(store, exp_id, out, options=options)


def _quiet() -> AbstractContextManager[Steps]:
    return contextlib.nullcontext(lambda _name: None)


@dataclass(frozen=True)
class Reporting:
    """How the report after a run is written. ``background(store, exp_id, out)`` starts a
    child process writing it and returns its pid (None: it could not, and the report is
    written here); ``steps()`` shows the steps of a report written here; ``options`` are
    its comparison's (the run's --boot-cost)."""

    background: Callable[[Store, int, Path, CompareOptions], int | None] | None = None
    steps: Callable[[], AbstractContextManager[Steps]] = _quiet
    options: CompareOptions = CompareOptions()
    #: False: no report at all (a calibration's experiment is read through its profile).
    write: bool = True


@dataclass(frozen=True)
class RunReport:
    """What became of the report after a run: ``written`` (here), or ``pid`` (a child
    writes it), or ``problem`` (one line: why it was not written)."""

    path: Path
    replaced: bool
    written: Written | None = None
    pid: int | None = None
    problem: str | None = None


def run_report_path(store: Store, exp_id: int) -> Path | None:
    """Where the report of experiment ``exp_id`` goes (``VMTAX_RUN_REPORT``); None when
    reports are off or the experiment has no completed run to report."""
    where = os.environ.get(RUN_REPORT_ENV, RUN_REPORT_DEFAULT).strip()
    if _off(where):
        return None
    runs = store.runs([f"exp={exp_id}"])
    if not (runs["status"] == "ok").any():
        return None  # nothing to report: the run's own error says why, in one line
    name = where.replace("{id}", str(exp_id)).replace("{store}", store_tag(store.url_display))
    return Path(name).expanduser()


def after_run(store: Store, exp_id: int, how: Reporting) -> RunReport | None:
    """The report of a finished run, written beside its runs (which are stored either way);
    None when there is none to write."""
    if not how.write:
        return None
    out = run_report_path(store, exp_id)
    if out is None:
        return None
    replaced = out.exists()
    start = how.background
    pid = start(store, exp_id, out, how.options) if start is not None else None
    if pid is not None:
        return RunReport(out, replaced, pid=pid)
    try:
        with how.steps() as step:
            written = write_run_report(store, exp_id, out, progress=step, options=how.options)
    except VmtaxError as exc:
        return RunReport(out, replaced, problem=exc.message)
    return RunReport(out, replaced, written=written)


def check_template() -> None:
    """VMTAX_RUN_REPORT may name {id} and {store} and nothing else, in a directory that
    exists: refused in one line before anything runs (it made a file named after the
    unknown field, once the runs were done)."""
    where = os.environ.get(RUN_REPORT_ENV, RUN_REPORT_DEFAULT).strip()
    if _off(where):
        return
    left = re.search(r"\{[^{}]*\}?|\}", where.replace("{id}", "").replace("{store}", ""))
    if left:
        raise UsageError(
            f"{RUN_REPORT_ENV}={where!r}: {left.group()!r} is not a field; the fields are "
            "{id} (the experiment) and {store} (the store's tag), or 'none' for no report"
        )
    example = Path(where.replace("{id}", "1").replace("{store}", "store")).expanduser()
    if "{" not in str(Path(where).parent):
        try:
            destination(example)
        except VmtaxError as exc:
            raise UsageError(f"{RUN_REPORT_ENV}={where!r}: {exc.message}") from None


def store_tag(url_display: str) -> str:
    """A short, file-name-safe name of a store: the SQLite file's stem (or the database's
    name) and 6 hex digits of its URL, e.g. ``lab-3f2a1c``: two stores never share one,
    two files both called lab.db included."""
    # heavy: SQLAlchemy's URL parser, only where a run names its report (it has a Store)
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url_display).database or "store"
    except Exception:  # noqa: BLE001 - any unparsable URL still gets its hash
        database = "store"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(database).stem)[:40] or "store"
    return f"{stem}-{hashlib.sha256(url_display.encode()).hexdigest()[:6]}"


def _off(where: str) -> bool:
    return where.lower() in ("", "none", "0", "off")
