"""`vmtax history`: one configuration's overhead against a baseline across the stored
experiments, in time order, with the steps found in it and what changed in the environment."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from vmtax import outfile
from vmtax.cli import options
from vmtax.errors import UsageError
from vmtax.stats.compare_options import RunStatistic

if TYPE_CHECKING:
    from vmtax.experiment.history import History

FORMATS = ("table", "json", "csv", "html")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("history")(history_cmd)


def history_cmd(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            callback=options.selectors,
            help="Selectors of the configuration and probes (key=value[,key=value]; several "
            "= OR), e.g. level=L1,accel=kvm probe=cpuid.",
        ),
    ] = None,
    baseline: Annotated[
        str,
        typer.Option(
            callback=options.selectors,
            help="The baseline in each experiment, e.g. level=L0.",
        ),
    ] = "level=L0",
    fmt: Annotated[str, typer.Option("--format", help="table | json | csv | html")] = "table",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write (html needs one). " + outfile.HELP),
    ] = None,
    min_size: Annotated[
        int,
        typer.Option(
            callback=options.count(2, 1000),
            help="Experiments on each side of a step, at least (2..1000).",
        ),
    ] = 2,
    permutations: Annotated[
        int,
        typer.Option(
            callback=options.resamples(99),
            help="Permutations of each step's test (99..1000000).",
        ),
    ] = 999,
    seed: Annotated[int, typer.Option(callback=options.seed, help="Seed of the permutations.")] = 0,
    statistic: Annotated[
        str,
        typer.Option(
            help="mean | median: each run's iteration mean (compare's default), or its median, "
            "which a run stalled by a busy machine moves far less."
        ),
    ] = "mean",
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """The tax over time: a configuration's overhead against a baseline in every stored
    experiment that has both, in the order they ran, each with its 95% CI; what changed in
    the fingerprints between consecutive experiments (kernel, QEMU, CPU and microcode,
    hypervisor); and the steps in it.

    Steps are proposed by ruptures on the boot-level overheads and tested by permuting
    whole experiments, with the false-discovery rate controlled across probes (hierarchical
    Benjamini-Hochberg); a history shorter than 2 x --min-size experiments is not tested,
    and says so. See docs/history.md.

    Example: vmtax history level=L1,accel=kvm --baseline level=L0

    Example: vmtax history level=L1 probe=cpuid --format json --statistic median

    Example: vmtax history level=L1 --format html -o history.html
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if statistic not in set(RunStatistic):
        raise UsageError(f"--statistic must be mean or median, got {statistic!r}")
    if fmt == "html" and (output is None or str(output) == "-"):
        raise UsageError("--format html needs -o FILE")
    if output is not None and str(output) != "-":
        outfile.destination(output)  # refused before any work
    # heavy: the use case (pandas, scipy, ruptures), only when the command runs
    from vmtax.experiment.history import history

    found = history(
        list(selectors or []),
        baseline,
        min_size=min_size,
        permutations=permutations,
        seed=seed,
        statistic=RunStatistic(statistic),
        db=db,
    )
    if fmt == "html":
        # heavy: matplotlib and Jinja2, only for the HTML view
        from vmtax.report.history import render_html

        outfile.write_text(output or Path("-"), render_html(found))
        typer.echo(f"wrote {output}", err=True)
        return
    text = {"json": _json, "csv": _csv}.get(fmt)
    if text is not None:
        rendered = text(found)
        if output is None or str(output) == "-":
            sys.stdout.write(rendered)
        else:
            outfile.write_text(output, rendered)
        for note in found.notes:
            typer.echo(note, err=True)
        return
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(_table(found))
    for line in [*_step_lines(found), *found.notes]:
        console.print(line, markup=False, highlight=False)


def _num(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if math.isfinite(x) else ""


def _found_after(found: History) -> dict[tuple[str, int], str]:
    return {(s.probe, s.after_id): f"step ×{s.ratio:.3f}" for s in found.steps if s.found}


def _table(found: History) -> Table:
    table = Table(
        title=f"overhead against {found.baseline}, experiments in the order they ran",
        title_justify="left",
    )
    for col in ("probe", "exp", "started (UTC)", "config", "overhead", "95% CI", "boots",
                "runs", "verdict", "step", "changed since the previous"):  # fmt: skip
        table.add_column(col, justify="right" if col in ("exp", "overhead", "boots", "runs")
                         else "left")  # fmt: skip
    marks = _found_after(found)
    for p in found.points:
        ci = f"[{_num(p.ci_low)}, {_num(p.ci_high)}]" if math.isfinite(p.ci_low) else ""
        table.add_row(
            p.probe, str(p.experiment_id), p.started[:19].replace("T", " "), p.config,
            _num(p.overhead), ci, str(p.boots), str(p.runs), p.verdict,
            marks.get((p.probe, p.experiment_id), ""), "; ".join(p.changes),
            style="bold" if (p.probe, p.experiment_id) in marks else None,
        )  # fmt: skip
    return table


def _step_lines(found: History) -> list[str]:
    out = []
    for s in found.steps:
        where = f"{s.probe}: between experiments {s.before_id} and {s.after_id}"
        changed = (
            f"; changed there: {', '.join(s.changes)}"
            if s.changes
            else "; no fingerprint change there"
        )
        if s.found:
            out.append(
                f"{where}: step ×{s.ratio:.3f} (p = {s.p_value:.3g}, adjusted "
                f"{s.p_adjusted:.3g}){changed}"
            )
        else:
            out.append(
                f"{where}: step not detected (best candidate ×{s.ratio:.3f}, p = "
                f"{s.p_value:.3g}, adjusted {s.p_adjusted:.3g})"
            )
    return out


def _json(found: History) -> str:
    return json.dumps(found.to_json(), indent=2, allow_nan=False) + "\n"


def _csv(found: History) -> str:
    marks = {(s.probe, s.after_id): s for s in found.steps if s.found}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        ["probe", "experiment", "started", "config", "overhead", "ci_low", "ci_high", "boots",
         "runs", "verdict", "changes", "step_ratio", "step_p_adjusted"]
    )  # fmt: skip
    for p in found.points:
        step = marks.get((p.probe, p.experiment_id))
        writer.writerow(
            [p.probe, p.experiment_id, p.started, p.config, _num(p.overhead, 6),
             _num(p.ci_low, 6), _num(p.ci_high, 6), p.boots, p.runs, p.verdict,
             "; ".join(p.changes), _num(step.ratio, 6) if step else "",
             f"{step.p_adjusted:.6g}" if step else ""]
        )  # fmt: skip
    return buf.getvalue()
