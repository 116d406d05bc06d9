"""The ``vmtax`` command: a typer app; each command lives in its own module and is a thin call
into the packages below (plan, targets, store, stats, report)."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from vmtax.errors import VmtaxError

app = typer.Typer(
    name="vmtax",
    help="Measure the virtualization tax: what each layer of hypervisor costs a workload.\n\n"
    "Example: vmtax run && vmtax results list",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _register_commands() -> None:
    # Each module adds its commands to ``app``; the order here is the order of ``--help``.
    from vmtax.cli import (
        artifacts_cmd,
        compare_cmd,
        db_cmd,
        env_cmd,
        image_cmd,
        refs_cmd,
        report_cmd,
        results_cmd,
        run_cmd,
    )

    for module in (
        run_cmd,
        env_cmd,
        results_cmd,
        compare_cmd,
        artifacts_cmd,
        report_cmd,
        refs_cmd,
        image_cmd,
        db_cmd,
    ):
        module.register(app)


_register_commands()


def main() -> None:
    """Entry point: every VmtaxError becomes one line on stderr and a non-zero exit."""
    try:
        app(standalone_mode=True)
    except VmtaxError as exc:
        _err.print(f"vmtax: error: {exc.message}", markup=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _err.print("vmtax: interrupted", markup=False)
        sys.exit(130)
