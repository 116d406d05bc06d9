"""`vmtax report SELECTORS... -o report.html`: one self-contained HTML (or markdown) report."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from vmtax.cli.run_cmd import _command_line
from vmtax.errors import UsageError, VmtaxError

FORMATS = ("html", "markdown")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("report")(report)


def report(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            help="Which runs: key=value[,key=value] (AND); several selectors are OR'ed. "
            "Default: exp=latest."
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
        typer.Option("--output", "-o", help="File to write; default report.html or report.md."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="html | markdown")] = "html",
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples for the CIs.")] = 10_000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap and permutations.")] = 0,
) -> None:
    """Write a report: summary, study-A tables, figures, artifacts, environment.

    HTML is one self-contained file (inline SVG, no script, font or URL): mail it.

    Markdown writes its figures as PNG files in NAME_figures/ beside it.

    Example: vmtax report exp=latest --baseline level=L0 -o report.html
    """
    from vmtax.report import write_report
    from vmtax.store import Store

    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if resamples < 100:
        raise UsageError(f"--resamples must be at least 100, got {resamples}")
    out = output or Path("report.html" if fmt == "html" else "report.md")
    if not out.parent.is_dir():
        raise VmtaxError(f"cannot write {out}: directory {out.parent} does not exist")
    store = Store.open(db, read_only=True)
    try:
        with _progress() as step:
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


def _wrote(result: Any) -> str:  # noqa: ANN401
    return (
        f"wrote {result.path} ({result.size / 1024:.0f} KiB, {result.figures} figures"
        + (f", PNGs in {result.extra}" if result.extra else "")
        + ")"
    )


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[str], None]]:
    """The report's steps on stderr, with the time taken so far (a spinner on a terminal;
    nothing when stderr is not one)."""
    from rich.console import Console

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
#: experiment id), or "none" for no report.
RUN_REPORT_ENV = "VMTAX_RUN_REPORT"
RUN_REPORT_DEFAULT = "vmtax-report-{id}.html"


def after_run(store: Any, exp_id: int) -> None:  # noqa: ANN401
    """The report of a finished `vmtax run`, written beside its table: where it went, or one
    line saying why it was not written (the runs are stored either way)."""
    from vmtax.report import write_report

    where = os.environ.get(RUN_REPORT_ENV, RUN_REPORT_DEFAULT).strip()
    if where.lower() in ("", "none", "0", "off"):
        return
    out = Path(where.replace("{id}", str(exp_id))).expanduser()
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
    typer.echo(f"report: {_wrote(result).removeprefix('wrote ')}")
