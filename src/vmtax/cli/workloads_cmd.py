"""`vmtax workloads`: the application benchmarks (real servers and tools) and their contract."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from vmtax.errors import UsageError


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("workloads")(workloads)


def workloads(
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """List the workloads: what one value is, the mechanism, unit, direction, parameters,
    presets and whether the programs they need are installed.

    Run one like a probe: vmtax run --suite apps-quick, or
    vmtax run --probe oltp --runs 3 (a suite entry can set params = { preset = "study-a" }).

    Example: vmtax workloads --format json
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment import machine

    if fmt not in ("text", "json"):
        raise UsageError(f"--format must be text or json, got {fmt!r}")
    rows = machine.workloads()
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(header_style="bold")
    table.add_column("Workload", no_wrap=True)
    for col in ("One value is", "Unit", "Better", "Parameters (defaults)", "Presets", "Where"):
        table.add_column(col)
    for r in rows:
        params = ", ".join(
            f"{p['name']}={p['default']}" for p in r["params"] if p["name"] != "preset"
        )
        where = "any level" if r["runs_in_guests"] else "L0 (server here)"
        if r["missing"]:
            where += f"; missing: {', '.join(r['missing'])}"
        table.add_row(
            r["name"],
            r["summary"],
            r["unit"],
            r["better"],
            params,
            ", ".join(r["presets"]) or "-",
            where,
        )
    Console().print(table)
