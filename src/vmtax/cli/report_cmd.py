"""`vmtax report SELECTORS... -o report.html`: one self-contained HTML (or markdown) report."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from sqlalchemy.engine import make_url

from vmtax import limits, outfile
from vmtax.cli import background_report, options
from vmtax.cli.signals import sigterm_as_interrupt
from vmtax.errors import UsageError, VmtaxError
from vmtax.experiment.request import command_line as _command_line
from vmtax.report import write_report
from vmtax.store import Store

if TYPE_CHECKING:
    from vmtax.report import Written

FORMATS = ("html", "markdown")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("report")(report)


def report(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            callback=options.selectors,
            help="Which runs: key=value[,key=value] (AND); several selectors are OR'ed. "
            "Default: exp=latest.",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="Selector of the baseline configuration; default: the lowest level present."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="File to write; default report.html or report.md. " + outfile.HELP,
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="html | markdown")] = "html",
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
    resamples: Annotated[
        int,
        typer.Option(
            callback=options.resamples(100),
            help="Resamples of the permutation tests and artifact checks.",
        ),
    ] = 10_000,
    seed: Annotated[
        int,
        typer.Option(
            callback=options.seed, help=f"Seed of the permutations, 0..{limits.MAX_SEED}."
        ),
    ] = 0,
) -> None:
    """Write a report: summary, study-A tables, figures, artifacts, environment.

    HTML is one self-contained file (inline SVG, no script, font or URL): mail it.

    Markdown writes its figures as PNG files in NAME_figures/ beside it.

    Example: vmtax report exp=latest --baseline level=L0 -o report.html
    """
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if resamples < 100:
        raise UsageError(f"--resamples must be at least 100, got {resamples}")
    out = output or Path("report.html" if fmt == "html" else "report.md")
    outfile.destination(out)  # a FIFO, device or directory is refused before any work
    store = Store.open(db, read_only=True)
    try:
        # SIGTERM stops a report as Ctrl-C does: one line, exit 130, no partial file.
        with sigterm_as_interrupt(), _progress() as step:
            result = write_report(
                store,
                list(selectors or ["exp=latest"]),
                out,
                fmt=fmt,
                baseline=baseline,
                command=_command_line(sys.argv[1:], store.url_display),
                resamples=resamples,
                seed=seed,
                progress=step,
            )
    finally:
        store.close()
    typer.echo(_wrote(result))


def _wrote(result: Written) -> str:
    return (
        f"wrote {result.path} ({result.size / 1024:.0f} KiB, {result.figures} figures"
        + (f", PNGs in {result.extra}" if result.extra else "")
        + ")"
    )


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[str], None]]:
    """The report's steps on stderr, with the time taken so far (a spinner on a terminal;
    nothing when stderr is not one)."""
    err = Console(stderr=True)
    start = time.monotonic()
    if not err.is_terminal:
        yield lambda _name: None
        return
    with err.status("report: starting") as status:

        def step(name: str) -> None:
            status.update(f"report: {name} ({time.monotonic() - start:.0f} s)")

        yield step


#: Where `vmtax run` writes the report of the experiment it just made: a path ({id} is the
#: experiment id, {store} names the store), or "none" for no report.
RUN_REPORT_ENV = "VMTAX_RUN_REPORT"
#: {store} keeps runs on two stores in one directory from overwriting each other's report.
RUN_REPORT_DEFAULT = "vmtax-report-{store}-{id}.html"


def store_tag(url_display: str) -> str:
    """A short, file-name-safe name of a store: the SQLite file's stem (or the database's
    name) and 6 hex digits of its URL, e.g. ``lab-3f2a1c``: two stores never share one,
    two files both called lab.db included."""
    try:
        database = make_url(url_display).database or "store"
    except Exception:  # noqa: BLE001 - any unparsable URL still gets its hash
        database = "store"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(database).stem)[:40] or "store"
    return f"{stem}-{hashlib.sha256(url_display.encode()).hexdigest()[:6]}"


def after_run(store: Store, exp_id: int) -> None:
    """The report of a finished `vmtax run`, written beside its table: where it went, or one
    line saying why it was not written (the runs are stored either way)."""
    where = os.environ.get(RUN_REPORT_ENV, RUN_REPORT_DEFAULT).strip()
    if where.lower() in ("", "none", "0", "off"):
        return
    runs = store.runs([f"exp={exp_id}"])
    if not (runs["status"] == "ok").any():
        return  # nothing to report: the run's own error says why, in one line
    name = where.replace("{id}", str(exp_id)).replace("{store}", store_tag(store.url_display))
    out = Path(name).expanduser()
    replaced = out.exists()
    # At a terminal the run ends when the measuring does: a child writes the report
    # (vmtax.cli.background_report); elsewhere it is written before the run returns.
    pid = background_report.start(store, exp_id, out) if background_report.wanted() else None
    if pid is not None:
        if replaced:
            print(f"vmtax: replacing the earlier {out}", file=sys.stderr)
        typer.echo(
            f"report: {out} (being written in the background by process {pid}; a line "
            "says when it is there)"
        )
        return
    try:
        with _progress() as step:
            result = write_report(
                store,
                [f"exp={exp_id}"],
                out,
                command=["vmtax", "report", f"exp={exp_id}", "-o", str(out)],
                progress=step,
            )
    except VmtaxError as exc:
        print(f"vmtax: report not written: {exc.message}", file=sys.stderr)
        return
    if replaced:
        # Same store and id: an older file of a store made again at that URL. Say so.
        print(f"vmtax: replaced the earlier {out}", file=sys.stderr)
    typer.echo(f"report: {_wrote(result).removeprefix('wrote ')}")
