"""`vmtax sweep`: an overcommitment sweep (study B); `vmtax sweep show EXP`: its figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from vmtax import outfile
from vmtax.errors import UsageError, VmtaxError
from vmtax.experiment.request import command_line as _command_line
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

SHOW_FORMATS = ("table", "markdown", "json", "html")

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


def _ratios(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(
            f"--steps must be ratios like 0.5,1,1.5,2 or a preset, got {text!r}"
        ) from None


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
            help=f"Replicates of each step, 2 to {MAX_REPLICATES} (3): rounds of fresh "
            "boots, each measuring every step once in a random order. 1 only with "
            "--no-intervals."
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
        typer.Option(help="Seed of the random step order (default: drawn and stored)."),
    ] = None,
    timing: Annotated[
        str, typer.Option(help="small (5 s warm-up, 15 s window, 3 s samples) | study-b")
    ] = "small",
    warmup: Annotated[
        float | None,
        typer.Option(help=f"Warm-up seconds (overrides --timing; at most {MAX_SECONDS:g})."),
    ] = None,
    window: Annotated[
        float | None,
        typer.Option(help=f"Window seconds (overrides --timing; at most {MAX_SECONDS:g})."),
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            help=f"Sample interval, seconds (at least {MIN_INTERVAL_S:g}; at most "
            f"{MAX_SAMPLES} samples a window)."
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
        typer.Option(help=f"Seconds between a client's transactions (at most {MAX_THINK_S:g})."),
    ] = 0.0,
    events: Annotated[
        int | None,
        typer.Option(
            help=f"Probe events per transaction (200); triplet: page views ({TRIPLET_EVENTS}); "
            f"at most {MAX_EVENTS:,}."
        ),
    ] = None,
    max_prime: Annotated[int, typer.Option(help="cpu workload: max_prime per event.")] = 2000,
    guest_vcpus: Annotated[
        int | None,
        typer.Option(
            help=f"vCPUs of each guest (guests axis; 1; at most {MAX_RATIO:g} per host CPU)."
        ),
    ] = None,
    guest_memory: Annotated[
        int | None,
        typer.Option(help="MiB of each guest (160); at most this machine's memory."),
    ] = None,
    guests: Annotated[
        int,
        typer.Option(help=f"Guests (vcpus and memory axes; at most {MAX_RATIO:g} per host CPU)."),
    ] = 1,
    tiers: Annotated[
        str,
        typer.Option(help="triplet: tier sizes, small (1 vCPU each) | study-b (study B's)."),
    ] = "small",
    clients: Annotated[
        int | None,
        typer.Option(help="triplet: clients per triplet (small 2, study-b 4)."),
    ] = None,
    cap_mb: Annotated[
        int | None,
        typer.Option(
            help="cgroup memory cap around all guests, MiB (memory axis; at most this "
            "machine's memory)."
        ),
    ] = None,
    level: Annotated[str, typer.Option(help="L1: QEMU guests; L0: agent processes here.")] = "L1",
    accel: Annotated[str, typer.Option(help="auto | kvm | tcg")] = "auto",
    slo: Annotated[float, typer.Option(help="p95 response-time objective, seconds.")] = 2.0,
    boot_timeout: Annotated[
        float, typer.Option(help="Seconds a guest may take to boot (at most 3600).")
    ] = 300.0,
    resume: Annotated[
        int | None, typer.Option(help="Resume sweep EXP at its first uncommitted step.")
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
    import secrets
    from dataclasses import replace

    from vmtax.runner import controller_identity
    from vmtax.store import Store
    from vmtax.sweep.run import SweepRunner, spec_for_resume
    from vmtax.sweep.spec import SweepSpec, Timing, apply_presets
    from vmtax.targets.levels import host_resources

    if level not in ("L0", "L1"):
        raise UsageError(f"--level must be L0 or L1, got {level!r}")
    if workload == "triplet" and (guest_vcpus or guest_memory):
        raise UsageError(
            "--guest-vcpus and --guest-memory size plain guests; the triplet's tiers are "
            "sized by --tiers (small or study-b)"
        )
    if workload == "triplet" and resume is None:
        _triplet_can_run(level)
    if not (0 < boot_timeout <= 3600):
        raise UsageError(f"--boot-timeout must be above 0 and at most 3600 s, got {boot_timeout}")
    spec = None
    if resume is None:
        cpus, host_mb = host_resources()
        spec = SweepSpec(
            axis=axis,
            workload="threads" if axis == "vcpus" and workload == "cpu" else workload,
            think_time_s=think_time,
            events=events or (TRIPLET_EVENTS if workload == "triplet" else 200),
            max_prime=max_prime,
            host_cpus=cpus,
            guest_vcpus=guest_vcpus or 1,
            guest_memory_mb=guest_memory or 160,
            guests=guests,
            cap_mb=cap_mb,
            accel="none",
            slo_s=slo,
            tiers=tiers,
            clients_per_triplet=clients,
            replicates=replicates,
            intervals=intervals,
            order_seed=secrets.randbits(32) if order_seed is None else order_seed,
            host_memory_mb=host_mb,
        )
        if not 0 <= spec.order_seed < 2**63:
            raise UsageError(f"--order-seed must be 0 to 2^63-1, got {spec.order_seed}")
        preset = steps if steps in ("default", "study-b") else "default"
        custom = _ratios(steps) if preset == "default" and steps != "default" else None
        if custom is not None:  # bounds first: a preset must not size absurd steps
            replace(spec, ratios=custom)._check_bounds()
        spec = apply_presets(spec, steps=preset, timing=timing)
        if custom is not None:
            spec = replace(spec, ratios=custom, steps_preset="custom")
        t = spec.timing
        spec = replace(
            spec,
            timing=Timing(
                t.warmup_s if warmup is None else warmup,
                t.window_s if window is None else window,
                t.interval_s if interval is None else interval,
            ),
        )
        spec.check()
    store = Store.open(db)
    try:
        if resume is not None:
            exp = store.experiment(resume)
            spec = spec_for_resume(exp.get("plan") or {})
            level = (exp.get("plan") or {}).get("level", "L1")
            store.reopen_experiment(resume, controller_identity())
            experiment_id = resume
        else:
            assert spec is not None
            if level == "L1":
                from vmtax.targets.accel import choose_accel

                # After the checks: probing KVM can take seconds, a usage error should not.
                spec = replace(spec, accel=choose_accel(accel))
            experiment_id = store.create_experiment(
                command=_command_line(sys.argv[1:], store.url_display),
                suite="sweep",
                seed=spec.order_seed,
                plan={
                    "sweep": spec.as_plan(),
                    "level": level,
                    "controller": controller_identity(),
                },  # fmt: skip
                vmtax_version=_version(),
                agent_version=None,
            )
        factory = _factory(spec, level, boot_timeout)
        total = len(spec.ratios)
        units = total * spec.replicates
        done = [0]

        def on_step(o: object) -> None:
            from vmtax.sweep.run import StepOutcome, throughput_unit

            assert isinstance(o, StepOutcome)
            window = [s for s in o.samples if s["phase"] == "window"]
            tput = [s["throughput"] for s in window if s["throughput"] is not None]
            util = [s["host_util"] for s in window if s["host_util"] is not None]
            mean = sum(tput) / len(tput) if tput else float("nan")
            cpu = 100 * sum(util) / len(util) if util else float("nan")
            p95 = o.detail.get("resp_p95_s") or float("nan")
            done[0] += 1
            typer.echo(
                f"[{done[0]}/{units}] replicate {o.replicate + 1}/{spec.replicates} "
                f"step {o.index + 1}/{total} {o.ratio:g}:1 {o.status}: {mean:,.0f} "
                f"{throughput_unit(spec)}, p95 {p95:.3g} s, "
                f"host CPU {cpu:.0f}%",
                err=True,
            )

        typer.echo(
            f"vmtax: sweep experiment {experiment_id}: {total} steps x {spec.replicates} "
            f"replicates, order seed {spec.order_seed}",
            err=True,
        )
        runner = SweepRunner(store, spec, factory, level=level, on_step=on_step)
        from vmtax.cli.signals import sigterm_as_interrupt as _sigterm_as_interrupt

        # SIGTERM stops like Ctrl-C: guests killed, committed steps kept, experiment
        # marked interrupted (resume with --resume).
        with _sigterm_as_interrupt():
            runner.execute(experiment_id)
        _show(store, experiment_id, "table")
    finally:
        store.close()


def _triplet_can_run(level: str) -> None:
    """The triplet's servers run in QEMU guests from an image with PHP: say so in one line
    before an experiment is made."""
    from vmtax.workloads import webapp

    if level != "L1":
        raise UsageError("the triplet workload runs its tiers in QEMU guests: use --level L1")
    webapp.extension_dir(webapp.php_cgi())


def _factory(spec: object, level: str, boot_timeout: float) -> object:
    from vmtax.sweep.guests import local_factory, qemu_factory

    if level == "L0":
        return local_factory(spec)  # type: ignore[arg-type]
    return qemu_factory(spec, boot_timeout=boot_timeout)  # type: ignore[arg-type]


def _version() -> str:
    from vmtax import __version__

    return __version__


def _experiment_id(store: object, which: str) -> int:
    if which == "latest":
        from sqlalchemy import select

        from vmtax.store.models import Experiment

        t = Experiment.__table__
        with store.engine.connect() as c:  # type: ignore[attr-defined]
            found = c.execute(
                select(t.c.id).where(t.c.suite == "sweep").order_by(t.c.id.desc()).limit(1)
            ).scalar()
        if found is None:
            raise VmtaxError("no sweep in the store yet (run `vmtax sweep`)")
        return int(found)
    try:
        return int(which)
    except ValueError:
        raise UsageError(f"EXP must be an experiment id or latest, got {which!r}") from None


def _show(store: object, experiment_id: int, fmt: str, output: Path | None = None) -> None:
    from rich.console import Console

    from vmtax.report import sweep as sweep_report
    from vmtax.sweep.summary import summarise

    summary = summarise(store, experiment_id)  # type: ignore[arg-type]
    if fmt == "json":
        text = json.dumps(summary.as_json(), indent=2)
    elif fmt == "markdown":
        text = sweep_report.markdown(summary)
    elif fmt == "html":
        part = sweep_report.Section(experiment_id, sweep_report.html_section(summary), "")
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
    experiment: Annotated[str, typer.Argument(help="Sweep experiment id, or latest.")] = "latest",
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
    from vmtax.store import Store

    if fmt not in SHOW_FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(SHOW_FORMATS)})")
    if output is not None:
        outfile.destination(output)  # a FIFO, device or directory is refused before any work
    store = Store.open(db, read_only=True)
    try:
        _show(store, _experiment_id(store, experiment), fmt, output)
    finally:
        store.close()
