"""`vmtax report SELECTORS... -o report.html`: one self-contained HTML (or markdown) report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vmtax import limits, outfile
from vmtax.cli import options
from vmtax.cli.report_output import described, progress_steps
from vmtax.cli.signals import sigterm_as_interrupt
from vmtax.errors import UsageError
from vmtax.stats.compare_options import BOOT_COST_S, CompareOptions

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
    boot_cost: options.BootCost = BOOT_COST_S,
    by: options.By = None,
) -> None:
    """Write a report: summary, study-A tables, figures, artifacts, environment.

    HTML is one self-contained file (inline SVG, no script, font or URL): mail it.

    Markdown writes its figures as PNG files in NAME_figures/ beside it.

    Example: vmtax report exp=latest --baseline level=L0 -o report.html

    Example: vmtax report exp=latest --boot-cost 40 (a guest boots in 40 s here)

    Example: vmtax report exp=latest --by group --baseline group=bare -o fleet.html
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.report import stored_report

    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if resamples < 100:
        raise UsageError(f"--resamples must be at least 100, got {resamples}")
    out = output or Path("report.html" if fmt == "html" else "report.md")
    outfile.destination(out)  # a FIFO, device or directory is refused before any work
    # SIGTERM stops a report as Ctrl-C does: one line, exit 130, no partial file.
    with sigterm_as_interrupt(), progress_steps() as step:
        result = stored_report(
            db,
            list(selectors or ["exp=latest"]),
            out,
            argv=sys.argv[1:],
            fmt=fmt,
            baseline=baseline,
            options=CompareOptions(resamples=resamples, seed=seed, boot_cost_s=boot_cost, by=by),
            progress=step,
        )
    typer.echo(f"wrote {described(result)}")
