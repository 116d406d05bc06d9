"""What the commands print and how: rendered tables and text on stdout, the consoles they
go through, and the tables several commands share (an experiment's study-A table)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import pandas as pd

    from vmtax.store import Store


def out_console() -> Console:
    """stdout; when it is a pipe or file, wide enough that tables do not wrap."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    return console


def _wide_console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def emit(rendered: object) -> None:
    """Print a rendered table or text to stdout."""
    if isinstance(rendered, str):
        sys.stdout.write(rendered)
    else:
        _wide_console().print(rendered)


def print_table(console: Console, store: Store, exp_id: int) -> None:
    """The study-A table of one experiment."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.results import study_a
    from vmtax.report.terminal import studya_table

    found = study_a(store, exp_id)
    console.print(studya_table(found.described, title=found.title, width=console.width))


def print_executed_order(console: Console, runs: pd.DataFrame) -> None:
    """One row per run in the order the runs started: when, how long, where, what."""
    # heavy: the use case and what it loads, only when the command runs
    import pandas as pd

    table = Table(title="runs in executed order", title_justify="left")
    for name in ("#", "started (UTC)", "ms", "level", "target", "probe", "run", "plan", "status"):
        table.add_column(name, justify="right" if name in ("#", "ms", "run", "plan") else "left")
    rows = zip(
        runs["started_ns"], runs["ended_ns"], runs["started_at"], runs["level"], runs["target"],
        runs["probe"], runs["run_index"], runs["plan_index"], runs["status"], strict=True,
    )  # fmt: skip
    for pos, row in enumerate(rows, start=1):
        started_ns, ended_ns, started_at, level, target, probe, run_index, plan_index, status = row
        timed = not pd.isna(started_ns)
        started = started_at.strftime("%H:%M:%S.%f")[:-3] if timed else "not recorded"
        took = "" if not timed or pd.isna(ended_ns) else f"{(ended_ns - started_ns) / 1e6:,.0f}"
        table.add_row(
            str(pos), started, took, level, target or "", probe,
            str(run_index), str(plan_index), status,
        )  # fmt: skip
    console.print(table)
