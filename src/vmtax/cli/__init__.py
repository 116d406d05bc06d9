"""The ``vmtax`` command: a typer app; each command lives in its own module and is a thin call
into the packages below (plan, targets, store, stats, report)."""

from __future__ import annotations

import contextlib
import signal
import sys
from types import ModuleType

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
        exits_cmd,
        image_cmd,
        import_cmd,
        model_cmd,
        refs_cmd,
        report_cmd,
        results_cmd,
        run_cmd,
        sweep_cmd,
        workloads_cmd,
    )

    for module in (
        run_cmd,
        env_cmd,
        results_cmd,
        import_cmd,
        compare_cmd,
        artifacts_cmd,
        exits_cmd,
        model_cmd,
        sweep_cmd,
        report_cmd,
        refs_cmd,
        image_cmd,
        db_cmd,
        workloads_cmd,
    ):
        module.register(app)


_register_commands()


def _click_exceptions() -> ModuleType:
    # Newer typer releases vendor click as typer._click; older ones use click itself.
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def main() -> None:
    """Entry point: every failure becomes one line on stderr and a non-zero exit."""
    cx = _click_exceptions()
    # Behave like other Unix tools in a pipeline: `vmtax ... | head` ends quietly. The handler
    # is this call's only: a process that calls main() in-process (the tests) gets its own back.
    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        code = app(standalone_mode=False)
        if code == 130:
            # typer turns a KeyboardInterrupt (Ctrl-C, or SIGTERM made one) inside a command
            # into a returned 130 when not in standalone mode: still an interruption.
            _err.print("vmtax: error: interrupted", markup=False)
            sys.exit(130)
        sys.exit(0)
    except VmtaxError as exc:
        _err.print(f"vmtax: error: {exc.message}", markup=False)
        sys.exit(exc.exit_code)
    except cx.NoArgsIsHelpError:
        # typer's rich formatter has already printed the help while raising this.
        sys.exit(2)
    except cx.UsageError as exc:
        # click's usage text is several lines; keep the line that says what is wrong.
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        _err.print(f"vmtax: error: {exc.format_message()}{where}", markup=False)
        sys.exit(2)
    except cx.ClickException as exc:
        _err.print(f"vmtax: error: {exc.format_message()}", markup=False)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _err.print("vmtax: error: interrupted", markup=False)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    finally:
        _flush_quietly()
        signal.signal(signal.SIGPIPE, previous)


def _flush_quietly() -> None:
    # Flush while SIGPIPE still ends the process quietly, so a reader that went away early
    # does not turn into a BrokenPipeError at interpreter exit.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
