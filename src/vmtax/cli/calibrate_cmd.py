"""`vmtax calibrate`: a dimensioning experiment (one guest configuration in many boots, a few
runs each) stored as this machine's noise profile; `vmtax calibrate show` prints the profiles."""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from vmtax import limits
from vmtax.cli import options
from vmtax.cli.output import emit
from vmtax.errors import UsageError

calibrate_app = typer.Typer(
    help="Noise profiles: how much each probe varies between boots and between runs, on this "
    "machine and configuration; `vmtax run` plans its boots and runs from them.\n\n"
    "Example: vmtax calibrate --levels L1 && vmtax calibrate show",
)

#: Boots and runs per boot of a calibration (experiment/calibrate.py holds the same numbers;
#: repeated here so that --help needs no import of the use case).
DEFAULT_BOOTS = 8
DEFAULT_RUNS_PER_BOOT = 3


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.callback(invoke_without_command=True)
def calibrate(
    ctx: typer.Context,
    levels: Annotated[
        str, typer.Option(help="The one guest configuration to calibrate: L1, L2 or L3.")
    ] = "L1",
    boots: Annotated[
        int,
        typer.Option(
            help="Boots of the guest, at least 2 (one degree of freedom between boots); "
            "8 or more give a usable profile.",
        ),
    ] = DEFAULT_BOOTS,
    runs_per_boot: Annotated[
        int, typer.Option(help="Runs of every probe in each boot, at least 2.")
    ] = DEFAULT_RUNS_PER_BOOT,
    suite: Annotated[str, typer.Option(help="Built-in suite name or a suite .toml.")] = "quick",
    probe: Annotated[
        list[str] | None,
        typer.Option(callback=options.nonempty, help="Only this probe (repeatable)."),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="Extra configuration label key=value (repeatable).")
    ] = None,
    preset: Annotated[str, typer.Option(help="Guest sizing preset, as for `vmtax run`.")] = (
        "seed-c"
    ),
    accel: Annotated[str, typer.Option(help="auto | kvm | tcg.")] = "auto",
    inner_accel: Annotated[str, typer.Option(help="tcg | kvm, for L2 and L3.")] = "tcg",
    guest_net: Annotated[str, typer.Option(help="user: give L1 a NIC, as for run.")] = "",
    duration: Annotated[
        float | None,
        typer.Option(
            callback=options.seconds(limits.MAX_DURATION_S),
            help="Bound every run to this many seconds (a profile holds for this run length; "
            "`vmtax run` uses it only with the same --duration).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(callback=options.seconds(limits.MAX_TIMEOUT_S), help="Per-run timeout."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(callback=options.seed, help="Seed of the run order.")
    ] = None,
    db: Annotated[str | None, typer.Option(help="Store URL (default $VMTAX_DB).")] = None,
) -> None:
    """Run a dimensioning experiment and store this machine's noise profile for it.

    One guest configuration is booted --boots times, every probe of the suite (or --probe)
    runs --runs-per-boot times in each boot, and each probe's between-boot and within-boot
    variances (with intervals and degrees of freedom), boot cost and run cost are stored.

    Example: vmtax calibrate --levels L1 --boots 8 --runs-per-boot 3

    Example: vmtax calibrate show --format json
    """
    if ctx.invoked_subcommand is not None:
        return
    # heavy: the use case (scipy, the store, the run), only when the command runs
    from vmtax.experiment import calibrate as use_case
    from vmtax.experiment.machine import environment

    request = use_case.CalibrateRequest(
        levels=levels, boots=boots, runs_per_boot=runs_per_boot, suite=suite,
        probes=probe or [], labels=label or [], preset=preset, accel=accel,
        inner_accel=inner_accel, guest_net=guest_net, duration=duration, timeout=timeout,
        seed=seed, db=db, argv=sys.argv[1:],
    )  # fmt: skip
    request.run_request()  # bad input is refused before the machine is asked anything
    if boots < DEFAULT_BOOTS:
        typer.echo(
            f"vmtax: warning: {boots} boots leave {boots - 1} degrees of freedom between "
            f"boots; {DEFAULT_BOOTS} or more give a profile worth planning from",
            err=True,
        )
    fp = environment().model_dump(mode="json", by_alias=True)
    done = use_case.calibrate(request, fingerprint=fp)
    for line in done.skipped:
        typer.echo(f"vmtax: no profile for {line}", err=True)
    emit(_table([p.summary() for p in done.profiles], f"experiment {done.experiment_id}"))
    typer.echo(
        f"calibrated {len(done.profiles)} probes in {done.seconds:.0f} s (experiment "
        f"{done.experiment_id}, {boots} boots × {runs_per_boot} runs)"
    )


@calibrate_app.command("show")
def show(
    fmt: Annotated[str, typer.Option("--format", help="text | json")] = "text",
    db: Annotated[str | None, typer.Option(help="Store URL (default $VMTAX_DB).")] = None,
) -> None:
    """Print the stored noise profiles: per machine, configuration and probe, the variance
    between boots and within a boot (log scale, 95% intervals), their degrees of freedom,
    the boots and runs they come from, and the boot and run costs.

    Example: vmtax calibrate show --format json
    """
    if fmt not in ("text", "json"):
        raise UsageError(f"--format must be text or json, got {fmt!r}")
    # heavy: the use case and the store, only when the command runs
    from vmtax.experiment import calibrate as use_case

    shown = use_case.show(db)
    rows = [p.summary() for p in shown.profiles]
    if fmt == "json":
        payload = {"schema": "vmtax.noise/1", "profiles": rows, "unreadable": shown.unreadable}
        typer.echo(json.dumps(_json_safe(payload), indent=2))
        return
    for line in shown.unreadable:
        typer.echo(f"vmtax: warning: {line}", err=True)
    if not rows:
        typer.echo(f"no noise profiles in {shown.store} (`vmtax calibrate` makes one)")
        return
    emit(_table(rows, shown.store))


def _table(rows: list[dict[str, Any]], title: str) -> Table:
    """The profiles as standard deviations of log run means in percent (the JSON keeps the
    variances), each with its 95% interval and degrees of freedom."""
    table = Table(title=f"noise profiles: {title}", title_justify="left")
    names = ("configuration", "probe", "between-boot sd % [95% CI]",
             "within-boot sd % [95% CI]", "share", "boots", "runs", "boot s", "run s",
             "machine")  # fmt: skip
    for name in names:
        table.add_column(name, justify="left" if name in ("configuration", "probe") else "right")
    for r in rows:
        table.add_row(
            escape(r["configuration"]),  # labels are text, never rich markup
            escape(r["probe"]),
            f"{_sd(r['between'])} [{_sd(r['between_ci'][0])}, {_sd(r['between_ci'][1])}] "
            f"df {r['df_between']:.3g}",
            f"{_sd(r['within'])} [{_sd(r['within_ci'][0])}, {_sd(r['within_ci'][1])}] "
            f"df {r['df_within']}",
            _g(r["between_share"], 2),
            str(r["boots"]),
            str(r["runs"]),
            _g(r["boot_cost_s"]),
            _g(r["run_cost_s"]),
            escape(f"{r['machine']} {r['host'] or ''}".strip()),
        )
    return table


def _sd(variance: float | None) -> str:
    """A variance of log values as a standard deviation in percent."""
    if variance is None or not math.isfinite(variance) or variance < 0:
        return ""
    return f"{100 * math.sqrt(variance):.2g}"


def _g(x: float | None, digits: int = 3) -> str:
    if x is None or not math.isfinite(x):
        return ""
    return f"{x:.{digits}g}"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
