"""How the commands show a report being written: its steps on stderr, and the line that
says where it is (`vmtax report`, `vmtax run` and the child writing a run's report)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from vmtax.experiment.report import RunReport
    from vmtax.report import Written


def described(result: Written) -> str:
    """Where a report is and what it holds: ``report.html (407 KiB, 9 figures)``."""
    return (
        f"{result.path} ({result.size / 1024:.0f} KiB, {result.figures} figures"
        + (f", PNGs in {result.extra}" if result.extra else "")
        + ")"
    )


@contextlib.contextmanager
def progress_steps() -> Iterator[Callable[[str], None]]:
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


def show_run_report(report: RunReport | None) -> None:
    """What became of the report a run wrote beside its table (experiment.report.after_run):
    where it went, or one line saying why it was not written (the runs are stored either
    way)."""
    if report is None:
        return
    if report.problem is not None:
        print(f"vmtax: report not written: {report.problem}", file=sys.stderr)
        return
    if report.pid is not None:
        if report.replaced:
            print(f"vmtax: replacing the earlier {report.path}", file=sys.stderr)
        typer.echo(
            f"report: {report.path} (being written in the background by process {report.pid}; "
            "a line says when it is there)"
        )
        return
    if report.replaced:
        # Same store and id: an older file of a store made again at that URL. Say so.
        print(f"vmtax: replaced the earlier {report.path}", file=sys.stderr)
    if report.written is not None:
        typer.echo(f"report: {described(report.written)}")
