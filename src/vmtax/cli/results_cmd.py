"""`vmtax results list | show ID | export ID`: browse and export stored experiments."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from vmtax import outfile
from vmtax.cli import options
from vmtax.errors import UsageError

results_app = typer.Typer(
    help="Browse and export stored experiments.\n\nExample: vmtax results show latest",
    no_args_is_help=True,
)

DbOption = Annotated[
    str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.add_typer(results_app, name="results")


@results_app.command("list")
def list_cmd(db: DbOption = None) -> None:
    """List the stored experiments, newest last.

    An experiment left 'running' by a controller that died (killed, machine rebooted) is
    marked interrupted here; `vmtax run --resume ID` finishes it.

    Example: vmtax results list --db sqlite:///lab.db
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import out_console
    from vmtax.experiment import results

    store = results.open_store(db)
    df = results.listing(store)
    table = Table(header_style="bold")
    for col in ("ID", "Started (UTC)", "Suite", "Status", "Runs", "Configs", "Host", "Agent"):
        table.add_column(col, justify="right" if col in ("ID", "Runs", "Configs") else "left")
    for exp_id, started_at, suite, status, n_ok, n_runs, n_configs, host, agent in zip(
        df["experiment_id"], df["started_at"], df["suite"], df["status"], df["n_ok"],
        df["n_runs"], df["n_configurations"], df["host"], df["agent_version"], strict=True,
    ):  # fmt: skip
        started = started_at.strftime("%Y-%m-%d %H:%M:%S") if started_at else "-"
        table.add_row(
            str(exp_id),
            started,
            str(suite),
            str(status),
            runs_cell(int(n_ok), int(n_runs)),
            str(n_configs),
            str(host or "-"),
            str(agent or "-"),
        )
    out_console().print(table)
    if df.empty:
        typer.echo(f"no experiments in {store.url_display}; run `vmtax run` to make one")


def runs_cell(n_ok: int, n_runs: int) -> str:
    """The stored runs by outcome. A resumed experiment keeps its lost run beside the run
    that replaced it: "40/41" read as one run missing from an experiment that is ok."""
    lost = n_runs - n_ok
    return f"{n_ok:,} ok" + (f", {lost:,} failed or lost" if lost else "")


@results_app.command("show")
def show_cmd(
    experiment: Annotated[
        str, typer.Argument(callback=options.experiment, help="Experiment id or 'latest'.")
    ],
    executed: Annotated[
        bool,
        typer.Option(
            "--executed",
            help="List the runs in the order they ran, with start and end times, instead of "
            "the table (runs stored before vmtax recorded times come last, without them).",
        ),
    ] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="table | json: json prints the runs (with --executed, in the order they "
            "ran), each with its start and end times, and nothing else on stdout.",
        ),
    ] = "table",
    db: DbOption = None,
) -> None:
    """Print the study-A table of one experiment from the store.

    Example: vmtax results show 3

    Example: vmtax results show latest --executed

    Example: vmtax results show latest --executed --format json
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import out_console, print_executed_order, print_table
    from vmtax.experiment import results
    from vmtax.experiment.results import write_json

    if fmt not in ("table", "json"):
        raise UsageError(f"--format must be table or json, got {fmt!r}")
    store = results.open_store(db)
    exp_id = results.find(store, experiment)
    if fmt == "json":
        rows = (
            results.executed_order(store, exp_id)
            if executed
            else results.runs_with_times(store, exp_id)
        )
        write_json(rows, sys.stdout)
        typer.echo(f"experiment {exp_id}", err=True)
        return
    if executed:
        print_executed_order(out_console(), results.executed_order(store, exp_id))
    else:
        print_table(out_console(), store, exp_id)
    typer.echo(f"experiment {exp_id}")


@results_app.command("export")
def export_cmd(
    experiment: Annotated[
        str, typer.Argument(callback=options.experiment, help="Experiment id or 'latest'.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="File to write, or - for stdout. " + outfile.HELP)
    ],
    fmt: Annotated[
        str, typer.Option("--format", help="parquet | csv | json | openmetrics")
    ] = "parquet",
    samples: Annotated[
        bool | None,
        typer.Option(
            "--samples/--no-samples",
            help="Also write every raw sample beside the runs (default: with parquet only).",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            callback=options.selectors,
            help="With --format openmetrics: the baseline of the overheads (default level=L0 "
            "when the experiment has one L0 configuration and others).",
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Export one experiment: one row per run, and its raw samples beside it.

    Parquet (the default) writes the samples too, at a few bytes each. CSV and JSON take
    tens to hundreds of bytes a sample, so they write the run-level rows unless --samples is
    given. The size is estimated and checked against the free space before anything is
    written; the runs and samples files appear together and whole, or not at all. Every
    run row carries its start and end times.

    With -o -, stdout carries the runs and nothing else (every message goes to stderr), so
    `-o - > runs.parquet` is a whole file; --samples needs -o FILE.

    Example: vmtax results export latest -o runs.parquet

    Example: vmtax results export latest --format csv --samples -o runs.csv

    --format openmetrics writes the configurations' means and their overheads against the
    baseline, with 95% intervals and verdicts, as OpenMetrics text for Prometheus (a textfile
    collector's file, a pushgateway); docs/metrics.md names the metrics.

    Example: vmtax results export latest --format openmetrics -o /var/lib/node_exporter/vmtax.prom
    """
    if fmt not in ("csv", "json", "parquet", "openmetrics"):
        raise UsageError(f"--format must be csv, json, parquet or openmetrics, got {fmt!r}")
    if baseline is not None and fmt != "openmetrics":
        raise UsageError("--baseline is for --format openmetrics (the overheads' baseline)")
    to_stdout = str(output) == "-"
    if fmt == "openmetrics":
        _export_openmetrics(experiment, output, baseline, db, samples=samples)
        return
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import results
    from vmtax.experiment.results import human_bytes

    if to_stdout and samples:
        raise UsageError(
            "--samples needs -o FILE: stdout carries one table, the runs; the samples go "
            "beside FILE as <stem>.samples<suffix>"
        )
    if not to_stdout:
        outfile.destination(output)  # a FIFO, device or directory is refused before any work
    store = results.open_store(db)
    plan = results.plan_export(store, experiment, fmt, samples=samples, to_stdout=to_stdout)
    with_samples, n, size = plan.with_samples, plan.samples, plan.size
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # a line per message
    if with_samples:
        err.print(f"exporting {n:,} samples: about {human_bytes(size)} as {fmt}", markup=False)
    elif n and to_stdout:
        err.print(f"run-level rows only on stdout; the {n:,} raw samples need -o FILE",
                  markup=False)  # fmt: skip
    elif n:
        err.print(
            f"run-level rows only; the {n:,} raw samples would take about {human_bytes(size)} as "
            f"{fmt} (add --samples, or use --format parquet: about "
            f"{human_bytes(plan.parquet_size())})",
            markup=False,
        )
    with _export_progress(err) as progress:
        done = results.export(store, plan, output, progress)
    wrote = "stdout" if to_stdout else str(output)
    line = f"wrote {wrote} ({done.runs:,} runs)"
    if done.samples_file is not None:
        line += f" and {done.samples_file} ({done.samples:,} samples"
        line += f" and {done.warmup:,} warm-up samples)" if done.warmup else ")"
    err.print(line, markup=False)


def _export_openmetrics(
    experiment: str, output: Path, baseline: str | None, db: str | None, *, samples: bool | None
) -> None:
    """The OpenMetrics text to -o (atomically) or stdout, and a line on stderr saying what it
    holds: the overheads against which baseline, or why there are none."""
    if samples:
        raise UsageError("--samples is for parquet, csv and json; openmetrics has no samples")
    to_stdout = str(output) == "-"
    if not to_stdout:
        outfile.destination(output)  # a FIFO, device or directory is refused before any work
    # heavy: the comparison (scipy, statsmodels) and prometheus-client, only for this format
    from vmtax.experiment.metrics import openmetrics

    found = openmetrics(db, experiment, baseline)
    if to_stdout:
        sys.stdout.write(found.text)
        sys.stdout.flush()
    else:
        outfile.write_text(output, found.text)
    wrote = "stdout" if to_stdout else str(output)
    n = found.configurations
    what = f"experiment {found.experiment_id}: {n} configuration{'s' * (n != 1)}"
    if found.note is not None:
        what += f" and no overheads ({found.note}; only means, runs and boots)"
    else:
        what += f", {found.overheads} overheads against {found.baseline}"
    typer.echo(f"wrote {wrote} (OpenMetrics, {what})", err=True)


@contextlib.contextmanager
def _export_progress(err: Console) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar of samples written, on a terminal; nothing otherwise."""
    if not err.is_terminal:
        yield None
        return

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("samples", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
