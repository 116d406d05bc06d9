"""`vmtax sweep`: an overcommitment sweep (study B); `vmtax sweep show EXP`: its figures.

The sweep itself is ``vmtax.experiment.sweep``'s; this module parses options and renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from vmtax import limits, outfile
from vmtax.cli import options
from vmtax.cli.signals import sigterm_as_interrupt
from vmtax.errors import UsageError
from vmtax.sweep.spec import (
    DEFAULT_REPLICATES,
    MAX_EVENTS,
    MAX_RATIO,
    MAX_REPLICATES,
    MAX_SAMPLES,
    MAX_SECONDS,
    MAX_STEPS,
    MAX_THINK_S,
    MIN_INTERVAL_S,
    QEMU_OVERHEAD_MB,
)
from vmtax.sweep.tiers import TRIPLET_EVENTS

if TYPE_CHECKING:
    from vmtax.sweep.summary import SweepSummary

SHOW_FORMATS = ("table", "markdown", "json", "html")
#: The cpu probe's own range of max_prime (`vmtax probes`).
MAX_PRIME = 100_000_000

sweep_app = typer.Typer(
    help="Overcommitment sweeps: scale guests, vCPUs or memory in steps, each step in "
    "replicates (fresh boots, random order); find the knee with its 95% interval.\n\n"
    "Example: vmtax sweep && vmtax sweep show latest\n\n"
    "Example: vmtax sweep --steps 0.5,1,1.5,2,2.5,3 --replicates 5\n\n"
    "Example: vmtax sweep --workload triplet --accel tcg  (study B's web, app and db "
    "guests: 1 to 4 triplets)",
    no_args_is_help=False,
    invoke_without_command=True,
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.add_typer(sweep_app, name="sweep")


@sweep_app.callback()
def sweep(
    ctx: typer.Context,
    axis: Annotated[str, typer.Option(help="guests | vcpus | memory")] = "guests",
    steps: Annotated[
        str,
        typer.Option(
            help="Ratios, e.g. 0.5,1,1.5,2,2.5, or a preset: default (0.5 to 2.5) | study-b. "
            f"1 to {MAX_STEPS} steps, each at most {MAX_RATIO:g}:1; a step's guests (RAM plus "
            f"{QEMU_OVERHEAD_MB} MiB each for QEMU) must fit in this machine's memory."
        ),
    ] = "default",
    replicates: Annotated[
        int,
        typer.Option(
            callback=options.count(1, MAX_REPLICATES),
            help=f"Replicates of each step, 3 to {MAX_REPLICATES} (3): rounds of fresh "
            "boots, each measuring every step once in a random order. 1 only with "
            "--no-intervals.",
        ),
    ] = DEFAULT_REPLICATES,
    intervals: Annotated[
        bool,
        typer.Option(
            "--intervals/--no-intervals",
            help="--no-intervals (with --replicates 1): no interval, no rise test.",
        ),
    ] = True,
    order_seed: Annotated[
        int | None,
        typer.Option(
            callback=options.seed,
            help=f"Seed of the random step order, 0..{limits.MAX_SEED} (default: drawn and "
            "stored).",
        ),
    ] = None,
    timing: Annotated[
        str, typer.Option(help="small (5 s warm-up, 15 s window, 3 s samples) | study-b")
    ] = "small",
    warmup: Annotated[
        float | None,
        typer.Option(
            callback=options.finite(0, MAX_SECONDS),
            help=f"Warm-up seconds (overrides --timing; at most {MAX_SECONDS:g}).",
        ),
    ] = None,
    window: Annotated[
        float | None,
        typer.Option(
            callback=options.seconds(MAX_SECONDS),
            help=f"Window seconds (overrides --timing; at most {MAX_SECONDS:g}).",
        ),
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            callback=options.finite(MIN_INTERVAL_S, MAX_SECONDS),
            help=f"Sample interval, seconds (at least {MIN_INTERVAL_S:g}; at most "
            f"{MAX_SAMPLES} samples a window).",
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            help="cpu | threads | memory (the agent's probes) | triplet (study B's web, app "
            "and db guests)"
        ),
    ] = "cpu",
    think_time: Annotated[
        float,
        typer.Option(
            callback=options.finite(0, MAX_THINK_S),
            help=f"Seconds between a client's transactions (at most {MAX_THINK_S:g}).",
        ),
    ] = 0.0,
    events: Annotated[
        int | None,
        typer.Option(
            callback=options.count(1, MAX_EVENTS),
            help=f"Probe events per transaction (200); triplet: page views ({TRIPLET_EVENTS}); "
            f"at most {MAX_EVENTS:,}.",
        ),
    ] = None,
    max_prime: Annotated[
        int,
        typer.Option(
            callback=options.count(3, MAX_PRIME), help="cpu workload: max_prime per event."
        ),
    ] = 2000,
    guest_vcpus: Annotated[
        int | None,
        typer.Option(
            callback=options.count(1, limits.MAX_ID),
            help=f"vCPUs of each guest (guests axis; 1; at most {MAX_RATIO:g} per host CPU).",
        ),
    ] = None,
    guest_memory: Annotated[
        int | None,
        typer.Option(
            callback=options.count(1, limits.MAX_ID),
            help="MiB of each guest (160); at most this machine's memory.",
        ),
    ] = None,
    guests: Annotated[
        int,
        typer.Option(
            callback=options.count(1, limits.MAX_ID),
            help=f"Guests (vcpus and memory axes; at most {MAX_RATIO:g} per host CPU).",
        ),
    ] = 1,
    tiers: Annotated[
        str,
        typer.Option(help="triplet: tier sizes, small (1 vCPU each) | study-b (study B's)."),
    ] = "small",
    clients: Annotated[
        int | None,
        typer.Option(
            callback=options.count(1, limits.MAX_ID),
            help="triplet: clients per triplet (small 2, study-b 4).",
        ),
    ] = None,
    cap_mb: Annotated[
        int | None,
        typer.Option(
            callback=options.count(1, limits.MAX_ID),
            help="cgroup memory cap around all guests, MiB (memory axis; at most this "
            "machine's memory).",
        ),
    ] = None,
    level: Annotated[str, typer.Option(help="L1: QEMU guests; L0: agent processes here.")] = "L1",
    accel: Annotated[str, typer.Option(help="auto | kvm | tcg")] = "auto",
    slo: Annotated[
        float,
        typer.Option(
            callback=options.seconds(limits.MAX_DURATION_S),
            help="p95 response-time objective, seconds (above 0, at most 86400).",
        ),
    ] = 2.0,
    boot_timeout: Annotated[
        float,
        typer.Option(
            callback=options.seconds(3600), help="Seconds a guest may take to boot (at most 3600)."
        ),
    ] = 300.0,
    resume: Annotated[
        str | None,
        typer.Option(
            callback=options.experiment,
            help="Resume sweep EXP (id or 'latest') at its first uncommitted step.",
        ),
    ] = None,
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """Run an overcommitment sweep: in each of --replicates rounds, boot fresh guests and
    measure every step once in a random order (run the workload in the step's guests at
    once, discard the warm-up, sample the window); then find the knee. Each replicate's
    window mean is the unit of the step's 95% interval, the knee's interval and the
    response-time rise test. The default (5 steps x 3 replicates of 1-vCPU TCG guests) takes
    under 10 minutes on 2 cores.

    Example: vmtax sweep && vmtax sweep show latest

    Example: vmtax sweep --replicates 1 --no-intervals  # a quick look: no interval

    Example: vmtax sweep --workload triplet  # study B's web/app/db guests: 1 to 4 triplets
    """
    if ctx.invoked_subcommand is not None:
        return
    # heavy: the use case and what it loads, only when a sweep runs (not `sweep show`)
    from vmtax.experiment.sweep import SweepRequest, resume_sweep, run_sweep

    request = SweepRequest(
        axis=axis, steps=steps, replicates=replicates, intervals=intervals,
        order_seed=order_seed, timing=timing, warmup=warmup, window=window, interval=interval,
        workload=workload, think_time=think_time, events=events, max_prime=max_prime,
        guest_vcpus=guest_vcpus, guest_memory=guest_memory, guests=guests, tiers=tiers,
        clients=clients, cap_mb=cap_mb, level=level, accel=accel, slo=slo,
        boot_timeout=boot_timeout, db=db, argv=sys.argv[1:],
    )  # fmt: skip
    # SIGTERM stops like Ctrl-C: guests killed, committed steps kept, experiment marked
    # interrupted (resume with --resume).
    if resume is not None:
        request.validate()  # bad input is refused before --resume opens anything, too
        with sigterm_as_interrupt():
            done = resume_sweep(
                resume, db=db, boot_timeout=boot_timeout, progress=UnitLines(),
                notice=_to_stderr,
            )  # fmt: skip
    else:
        with sigterm_as_interrupt():  # bad input is refused before anything starts
            done = run_sweep(request, progress=UnitLines(), notice=_to_stderr)
    with done:
        _show(done.summary(), "table")


def _to_stderr(line: str) -> None:
    typer.echo(line, err=True)


class UnitLines:
    """The sweep's progress (``vmtax.execution.Progress``): each unit's line on stderr."""

    def add_target(self, name: str, total: int) -> None:
        del name, total

    def advance(self, name: str, description: str) -> None:
        del name
        typer.echo(description, err=True)

    def finish(self, name: str, description: str, *, failed: bool) -> None:
        del name, description, failed


def _show(summary: SweepSummary, fmt: str, output: Path | None = None) -> None:
    # The report draws with matplotlib (most of a second to load): only when shown.
    from vmtax.report import sweep as sweep_report

    if fmt == "json":
        text = json.dumps(summary.as_json(), indent=2)
    elif fmt == "markdown":
        text = sweep_report.markdown(summary)
    elif fmt == "html":
        part = sweep_report.Section(summary.experiment_id, sweep_report.html_section(summary), "")
        text = sweep_report.standalone([part], "html")
    else:
        if output is None:
            Console(width=max(160, Console().width)).print(sweep_report.terminal(summary))
            return
        text = sweep_report.markdown(summary)
    if output is not None:
        outfile.write_text(output, text)
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(text)


@sweep_app.command("show")
def show(
    experiment: Annotated[
        str, typer.Argument(callback=options.experiment, help="Sweep experiment id, or latest.")
    ] = "latest",
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | json | html")] = "table",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to a file. " + outfile.HELP)
    ] = None,
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """Show a sweep: per step throughput (mean, 95% CI), response time (mean, p95),
    utilisation and steal; the knee, why the curve is flat, the response-time rise, the SLO.

    Example: vmtax sweep show latest --format json
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.sweep import stored_sweep

    if fmt not in SHOW_FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(SHOW_FORMATS)})")
    if output is not None:
        outfile.destination(output)  # a FIFO, device or directory is refused before any work
    _show(stored_sweep(experiment, db=db), fmt, output)
