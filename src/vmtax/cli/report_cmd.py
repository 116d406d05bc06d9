"""`vmtax report SELECTORS... -o report.html`: one self-contained HTML (or markdown) report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

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
    store = Store.open(db)
    try:
        result = write_report(
            store,
            list(selectors or ["exp=latest"]),
            out,
            fmt=fmt,
            baseline=baseline,
            command=["vmtax", *sys.argv[1:]],
            resamples=resamples,
            seed=seed,
        )
    finally:
        store.close()
    typer.echo(
        f"wrote {result.path} ({result.size / 1024:.0f} KiB, {result.figures} figures"
        + (f", PNGs in {result.extra}" if result.extra else "")
        + ")"
    )
