"""`vmtax explain`: a level's overhead per operation over the level below, split by exit
reason group (exits per operation × cost per exit) plus a residual (docs/model.md)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from vmtax.cli import options
from vmtax.errors import UsageError


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("explain")(explain_cmd)


def explain_cmd(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            callback=options.selectors,
            help="Selectors of runs (key=value[,key=value]; several = OR); default exp=latest.",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            help="The configuration to explain, KEY=VAL (level=L2, a label); default the "
            "highest level with exit profiles."
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(help="Its baseline, KEY=VAL, one level down; default the only one there."),
    ] = None,
    probe: Annotated[
        list[str] | None,
        typer.Option(
            help="Only these probes or workloads; repeat for several. Default: all profiled."
        ),
    ] = None,
    round_trip_probe: Annotated[
        str, typer.Option(help="The null-exit probe whose runs give an exit's round trip.")
    ] = "cpuid",
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json")] = "table",
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """How much of a level's overhead its exits explain: per exit reason group, the exits per
    operation (from the exit profile), the cost of one exit (its handling time in the
    profile plus a round trip measured by cpuid at the same level) and its share of the
    overhead over the baseline one level down; then the residual and the explained
    fraction with a 95% interval. Where the profile says which vCPU made each exit
    (--exits=trace), the same cost per vCPU, and the fraction on the vCPUs of the measured
    path: the client's and its server's, which the agent pins when the run has --cpus.

    Example: vmtax run --levels L1,L2 --inner-accel kvm --probe cpuid --probe timer --exits=trace

    Example: vmtax explain exp=latest

    Example: vmtax explain exp=12 --config level=L2 --baseline level=L1 --probe http --format json
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.experiment.explain import explain_overhead
    from vmtax.report import explain_format

    if fmt not in explain_format.FORMATS:
        raise UsageError(
            f"--format must be one of {', '.join(explain_format.FORMATS)}, got {fmt!r}"
        )
    found = explain_overhead(
        list(selectors or []), config=config, baseline=baseline, probes=list(probe or []),
        round_trip_probe=round_trip_probe, db=db,
    )  # fmt: skip
    rows = found.rows
    title = (
        f"{found.config} vs {found.baseline}: overhead per operation by exit group "
        f"(profiles recorded at {found.recorded_at}; round trip "
        f"{rows['round_trip_ns'].iloc[0]:.0f} ns from {found.round_trip_probe})"
    )
    rendered = explain_format.render(rows, fmt, title, found.vcpus)
    emit(rendered)
    if fmt == "table" and len(found.vcpus):
        emit(explain_format.render_split(found.vcpus, "table", "by the vCPU that made the exits"))
    if found.counted:
        print(
            "vmtax: explain: these profiles are counts (--exits), with no handling time: each "
            "exit is costed as a whole cpuid exit; --exits=trace records handling times",
            file=sys.stderr,
        )
    if fmt == "table":
        for line in explain_format.summary(rows):
            print(line)
