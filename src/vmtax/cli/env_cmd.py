"""`vmtax env` (the environment fingerprint) and `vmtax probes` (what the agent can measure)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from vmtax.errors import UsageError

FormatOption = Annotated[str, typer.Option("--format", help="text | json")]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("env")(env)
    app.command("probes")(probes)


def env(fmt: FormatOption = "text") -> None:
    """Show what the agent detects about this machine: hypervisor, nesting estimate, CPU, memory.

    Example: vmtax env --format json
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import machine

    _check_format(fmt)
    fp = machine.environment()
    if fmt == "json":
        typer.echo(json.dumps(fp.model_dump(mode="json"), indent=2))
        return
    hv = fp.hypervisor
    rows = [
        ("hypervisor", f"{hv.vendor or 'unknown'} ({hv.signature})" if hv.detected else "none"),
        ("evidence", "; ".join(hv.evidence) or "-"),
        (
            "nesting",
            f"depth {fp.nesting.depth} ({fp.nesting.confidence}): {fp.nesting.basis}"
            if fp.nesting.depth is not None
            else f"unknown: {fp.nesting.basis}",
        ),
        ("cpu", f"{fp.cpu.model} ({fp.cpu.vendor}), {fp.cpu.logical_cpus} logical CPUs"),
        (
            "tsc",
            f"{fp.cpu.tsc_hz / 1e9:.3f} GHz, invariant={fp.cpu.tsc_invariant}"
            if fp.cpu.tsc_hz
            else "unknown",
        ),
        ("memory", f"{fp.memory_bytes / 2**30:.1f} GiB"),
        ("kernel", fp.kernel),
        ("clocksource", fp.clocksource or "-"),
        ("transparent hugepages", fp.thp or "-"),
        ("steal ticks", str(fp.steal_ticks) if fp.steal_ticks is not None else "-"),
        ("agent", fp.agent_version),
    ]
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    Console().print(table)


def probes(fmt: FormatOption = "text") -> None:
    """List the probes the agent offers, with the mechanism each exercises.

    Example: vmtax probes
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import machine

    _check_format(fmt)
    infos = machine.probes()
    if fmt == "json":
        typer.echo(json.dumps([p.model_dump(mode="json") for p in infos], indent=2))
        return
    table = Table(header_style="bold")
    for col in ("Probe", "Measures", "Mechanism", "Unit", "Better", "Parameters"):
        table.add_column(col)
    for p in infos:
        params = ", ".join(f"{x.name}={x.default}" for x in p.params) or "-"
        table.add_row(p.name, p.summary, p.mechanism, p.unit, p.better, params)
    Console().print(table)


def _check_format(fmt: str) -> None:
    if fmt not in ("text", "json"):
        raise UsageError(f"--format must be text or json, got {fmt!r}")
