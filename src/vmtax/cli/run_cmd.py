"""`vmtax run`: plan a suite, run it on this machine (or on levels / SSH hosts), store every
run, and print the study-A table."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from vmtax import limits
from vmtax.cli import background_report, options
from vmtax.cli.report_output import progress_steps, show_run_report
from vmtax.cli.signals import sigterm_as_interrupt
from vmtax.errors import UsageError, VmtaxError
from vmtax.stats.compare_options import CompareOptions

if TYPE_CHECKING:
    from vmtax.experiment import Finished


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("run")(run)


def run(
    suite: Annotated[
        str, typer.Option(help="Built-in suite name or a path to a suite .toml.")
    ] = "quick",
    probe: Annotated[
        list[str] | None,
        typer.Option(
            callback=options.nonempty,
            help="Run only this probe (repeatable); one the suite lacks runs with its defaults.",
        ),
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option(
            callback=options.count(1, limits.MAX_RUNS),
            help="Runs per probe, 1..10000 (overrides the suite).",
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="Probe parameter key=value for every selected probe that has it (repeatable), "
            "checked against the range `vmtax probes` lists."
        ),
    ] = None,
    level: Annotated[
        str | None,
        typer.Option(
            help="Level label for this machine (default L0, with what the fingerprint detected)."
        ),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="Extra configuration label key=value (repeatable).")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            help="Store URL (sqlite:///file.db, postgresql://...); default $VMTAX_DB or the "
            "user data dir."
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            callback=options.seconds(limits.MAX_TIMEOUT_S),
            help="Per-run timeout in seconds, at most 604800 (a week).",
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            callback=options.seconds(limits.MAX_DURATION_S),
            help="Bound every run to this many seconds, at most 86400 (overrides the suite).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            callback=options.seed,
            help="Seed of the randomized run order, 0..9223372036854775807.",
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            callback=options.experiment,
            help="Finish the missing runs of an interrupted experiment (id or 'latest').",
        ),
    ] = None,
    levels: Annotated[
        str | None,
        typer.Option(
            callback=options.nonempty,
            help="Run at these levels, e.g. L0,L1,L2 (QEMU guests for L1 and above).",
        ),
    ] = None,
    boots: Annotated[
        int | None,
        typer.Option(
            help="Boots of each guest level, 1..1000 (default 3): every guest configuration is "
            "measured in this many fresh boots, its runs split over them, since whatever a boot "
            "fixes (memory placement, huge pages, vCPU placement) is shared by its runs. L0 "
            "and SSH hosts have one boot. A level named twice (--levels L1,L1) is two "
            "configurations, set=a and set=b, each with its own boots: an A/A test."
        ),
    ] = None,
    boot_cost: options.RunBootCost = None,
    depth: Annotated[
        int | None,
        typer.Option(help="Nest guests N deep (1..3) and run at every level: --levels L0..LN."),
    ] = None,
    preset: Annotated[
        str,
        typer.Option(
            help="Guest sizing preset for --levels: seed-c, seed-a-overcommitted, "
            "seed-a-reserved; with --inner-accel kvm, kvm-testbed (the default there) or "
            "kvm-testbed-smp (L2 gets two vCPUs)."
        ),
    ] = "seed-c",
    accel: Annotated[str, typer.Option(help="auto | kvm | tcg, for --levels.")] = "auto",
    inner_accel: Annotated[
        str,
        typer.Option(
            help="tcg | kvm: how L2 and L3 run inside their hypervisor level. kvm boots them "
            "under the KVM of the level above (on this machine: KVM on the SVM that TCG "
            "emulates in L1), e.g. --levels L1,L2,L3 --inner-accel kvm."
        ),
    ] = "tcg",
    guest_net: Annotated[
        str,
        typer.Option(
            help="user: give L1 guests a virtio-net NIC on QEMU's user network, where this "
            "machine is 10.0.2.2 and guest ports 7100-7103 are forwarded from this machine, "
            "e.g. for --probe net --param peer=host (guest to host) or peer=from-host."
        ),
    ] = "",
    target: Annotated[
        list[str] | None, typer.Option(help="Run on ssh://user@host[:port] (repeatable).")
    ] = None,
    targets: Annotated[
        str | None, typer.Option(help="A hosts.toml fleet file (run as an inventory).")
    ] = None,
    inventory: Annotated[
        str | None,
        typer.Option(
            "--inventory",
            "-i",
            help="Measure the hosts of an Ansible inventory through Ansible: any inventory "
            "Ansible takes (a file, a directory, a script, a plugin's .yml), read within "
            "300 s (a script that hangs is stopped there); docs/fleet.md.",
        ),
    ] = None,
    limit: Annotated[
        str | None,
        typer.Option("--limit", help="Only the inventory's hosts matching this Ansible pattern."),
    ] = None,
    accept_new_host_key: Annotated[
        bool, typer.Option(help="Trust an SSH host key seen for the first time.")
    ] = False,
    exits: Annotated[
        str | None,
        typer.Option(
            metavar="[=counts|trace|LEVEL=MODE,...]",
            help="Record each run's VM exits on the level whose KVM runs it (see vmtax exits "
            "and docs/exits.md). --exits alone (counts): KVM's own counters by category, at "
            "no cost to the run; --exits=trace: by exit reason with handling times (tracing, "
            "slower); per measured level, e.g. --exits L2=trace,L3=counts (a level not "
            "named is not recorded; a bare mode among the pairs is theirs).",
        ),
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            help="Add runs until each probe's 95% CI half-width is at most this share of its "
            "mean, e.g. 2% (default: the suite's; --runs N turns it off)."
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            callback=options.budget,
            help="Time budget of adaptive sampling, e.g. 60s or 5m, at most a week "
            "(default: the suite's).",
        ),
    ] = None,
    min_runs: Annotated[
        int | None,
        typer.Option(
            callback=options.count(2, limits.MAX_RUNS),
            help="Runs every probe gets before adaptive sampling looks, 2..10000.",
        ),
    ] = None,
) -> None:
    """Run a suite of probes, store every run and print the study-A table.

    Example: vmtax run --suite quick --runs 5 --label note=baseline

    Example: vmtax run --levels L0,L1 (or --depth 2 for L0, L1 and L2 nested in L1)

    Example: vmtax run --levels L1,L1 --boots 4 (an A/A test: one guest, two sets of boots)

    Example: vmtax run --levels L0,L2 --boot-cost 300 (an L2 boot takes minutes)

    Example: vmtax run --levels L1,L2 --inner-accel kvm --probe cpuid

    Example: vmtax run --levels L1,L2 --inner-accel kvm --probe cpuid --exits (or --exits=trace)

    Example: vmtax run --levels L2,L3 --inner-accel kvm --suite dvh-micro --exits L2=trace,L3=counts

    Example: vmtax run --levels L0,L1 --guest-net user --probe net --param peer=host

    Example: vmtax run --precision 2% --budget 60s --min-runs 5

    Example: vmtax run --inventory inventory.ini --limit kvm_hosts --runs 5
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.report import Reporting, check_template
    from vmtax.experiment.request import RunRequest
    from vmtax.experiment.run import resume as resume_experiment
    from vmtax.experiment.run import run as run_experiment

    request = RunRequest(
        suite=suite, probes=probe or [], runs=runs, params=param or [], level=level,
        labels=label or [], db=db, timeout=timeout, duration=duration, seed=seed,
        levels=levels, depth=depth, preset=preset, accel=accel, inner_accel=inner_accel,
        guest_net=guest_net, ssh=target or [], fleet=_fleet(inventory, targets, limit),
        limit=limit,
        accept_new_host_key=accept_new_host_key, exits=exits, precision=precision,
        budget=budget, min_runs=min_runs, boots=boots, boot_cost_s=boot_cost,
        argv=sys.argv[1:],
    )  # fmt: skip
    request.validate()  # bad input is refused before --resume opens anything, too
    check_template()  # and a report name that could not be written, before any run
    # At a terminal the run ends when the measuring does: a child writes the report
    # (vmtax.cli.background_report); elsewhere it is written before the run returns.
    reporting = Reporting(
        background=background_report.start if background_report.wanted() else None,
        steps=progress_steps,
        options=CompareOptions(boot_cost_s=request.boot_cost),
    )
    with sigterm_as_interrupt():
        if resume is not None:
            done = resume_experiment(
                resume,
                db=db,
                accept_new_host_key=accept_new_host_key,
                progress=_progress(),
                notice=typer.echo,
                reporting=reporting,
            )
        else:
            done = run_experiment(request, progress=_progress(), reporting=reporting)
    _show(done)
    if done.problem:
        raise VmtaxError(done.problem)


def exits_alone_is_counts(argv: list[str]) -> list[str]:
    """``vmtax run ... --exits`` with no value is ``--exits=counts``. Hand-written: the
    option parser typer vendors has no option whose value may be left out (click's
    ``flag_value``), so a bare ``--exits`` would take the next argument as its value."""
    if not argv or argv[0] != "run":
        return argv
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--exits" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = "--exits=counts"
    return out


def _fleet(inventory: str | None, targets: str | None, limit: str | None) -> str | None:
    if inventory and targets:
        raise UsageError("give --inventory or --targets, not both")
    if limit and not (inventory or targets):
        raise UsageError("--limit narrows an inventory: give --inventory too")
    return inventory or targets


def _progress() -> RichProgress:
    return RichProgress(Console(stderr=True))


def _show(done: Finished) -> None:
    """The study-A table, who missed the precision target, and the report beside them."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import out_console, print_table
    from vmtax.sampling.outcome import lines as precision_lines

    exp_id = done.experiment_id
    print_table(out_console(), done.store, exp_id)
    for line in precision_lines(done.store, exp_id):  # adaptive sampling: who missed the target
        typer.echo(line)
    show_run_report(done.report)  # the report the run wrote (VMTAX_RUN_REPORT)
    typer.echo(f"experiment {exp_id}")


class RichProgress:
    """A rich progress bar per target on stderr; silent when stderr is not a terminal."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> RichProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def add_target(self, name: str, total: int) -> None:
        self._tasks[name] = self._bar.add_task(escape(name), total=total)

    def advance(self, name: str, description: str) -> None:
        # Adaptive sampling adds runs to a lane as it looks (the total given is the runs
        # planned first): the total grows with them, so the bar never counts past it (74/60).
        task_id = self._tasks[name]
        task = next(t for t in self._bar.tasks if t.id == task_id)
        total = task.total
        if total is not None and task.completed + 1 > total:
            total = task.completed + 1
        self._bar.update(task_id, advance=1, total=total, description=escape(description))

    def finish(self, name: str, description: str, *, failed: bool) -> None:
        # Host names and errors are text, never rich markup.
        text = f"[bold red]{escape(description)}[/]" if failed else escape(description)
        self._bar.update(self._tasks[name], description=text)
