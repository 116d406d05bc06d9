"""`vmtax exits`: exit profiles in study E's Table 2 shape (rows exit reasons or groups,
columns configurations), from profiles recorded by `vmtax run --exits`, or a published table
(`--dataset virtage_table2`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vmtax.cli import options
from vmtax.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("exits")(exits_cmd)


def exits_cmd(
    experiment: Annotated[
        str | None,
        typer.Argument(
            callback=options.experiment, help="Experiment: N, latest, exp=N or exp=latest."
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="The configuration shares are normalised to, KEY=VAL (level=L2, a label, "
            "recorded_at=L1); default the first (lowest level)."
        ),
    ] = None,
    by: Annotated[str, typer.Option(help="Rows: reason | group (study E's groups).")] = "reason",
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json.")] = "table",
    dataset: Annotated[
        str | None,
        typer.Option(help="Print a published exit-profile table instead, e.g. virtage_table2."),
    ] = None,
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """Exit profiles by reason: count, handling time, share of the baseline's total and
    exits per probe iteration, one column per configuration (and recording level). Profiles
    of `vmtax run --exits` (KVM's own counters) have categories for reasons and no time;
    those of `--exits=trace` have exit reasons and handling times.

    Example: vmtax run --levels L1,L2 --inner-accel kvm --probe cpuid --exits=trace

    Example: vmtax exits exp=latest

    Example: vmtax exits 12 --by group --baseline level=L2 --format markdown

    Example: vmtax exits --dataset virtage_table2
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.exits import exit_table
    from vmtax.report import exits_format

    if fmt not in exits_format.FORMATS:
        raise UsageError(f"--format must be one of {', '.join(exits_format.FORMATS)}, got {fmt!r}")
    if by not in {"reason", "group"}:
        raise UsageError(f"--by must be reason or group, got {by!r}")
    if dataset is not None:
        if experiment is not None:
            raise UsageError("give an experiment or --dataset, not both")
        _published(dataset, fmt)
        return
    if experiment is None:
        raise UsageError("name an experiment (e.g. exp=latest) or --dataset NAME")

    found = exit_table(experiment, by=by, baseline=baseline, db=db)
    notes = _notes(found.profiles, found.frame)
    title = f"experiment {found.exp_id} · exits by {by} · share of the baseline's total"
    frame = found.frame
    _emit(exits_format.render(frame, fmt, title=title, notes=notes), fmt, notes)


def _notes(profiles: pd.DataFrame, frame: pd.DataFrame) -> list[str]:
    base = frame.attrs.get("baseline")
    out = [f"baseline: {base}"] if base else []
    if (profiles["recorder"] == "kvm-stats").any():
        out.append(
            "counts from KVM's own counters (--exits): by category, no handling time; "
            "--exits=trace gives exit reasons and their times"
        )
    bad = profiles.drop_duplicates(["run_id", "recorded_at"])
    bad = bad[~bad["complete"]]
    if len(bad):
        first = next((p for p in bad["problems"] if p), None)
        why = f" (first: {first[0]})" if first else ""
        out.append(f"{len(bad)} profiles are incomplete{why}")
    return out


def _published(name: str, fmt: str) -> None:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.exits import published
    from vmtax.report import exits_format

    frame = published(name)
    totals = frame[frame["row"] == "total"]["share"].tolist()
    notes = []
    if len(totals) == 2 and totals[0] > 0:
        less = 100 * (1 - totals[1] / totals[0])
        notes.append(f"totals {totals[0]:.3f} and {totals[1]:.3f}: {less:.1f}% less")
    title = f"{name} (published): exit-handling time by factor, normalised to the first total"
    _emit(exits_format.render(frame, fmt, title=title, notes=notes, published=True), fmt, notes)


def _emit(rendered: Any, fmt: str, notes: list[str]) -> None:  # noqa: ANN401

    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import out_console

    if isinstance(rendered, str):
        sys.stdout.write(rendered)
        if fmt in {"csv", "json"}:
            for n in notes:
                print(f"vmtax: {n}", file=sys.stderr)
        return
    console = out_console()
    for part in rendered:
        console.print(part)
