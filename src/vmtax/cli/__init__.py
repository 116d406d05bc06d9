"""The ``vmtax`` command: a typer app; each command lives in its own module and is a thin call
into the packages below (plan, targets, store, stats, report)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import select
import signal
import stat
import sys
from types import ModuleType

import typer
from rich.console import Console

from vmtax.cli import run_cmd, signals
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
        doctor_cmd,
        env_cmd,
        exits_cmd,
        explain_cmd,
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
        doctor_cmd,
        env_cmd,
        results_cmd,
        import_cmd,
        compare_cmd,
        artifacts_cmd,
        exits_cmd,
        explain_cmd,
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
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def main() -> None:
    """Entry point: every failure becomes one line on stderr and a non-zero exit."""
    cx = _click_exceptions()
    # A reader that goes away early (`vmtax ... | head`) ends every command the same way:
    # quietly, exit 0, since the reader has what it wanted. SIGPIPE's default (death, 141)
    # hit only commands whose output outgrew the pipe, so `results show | head -1` gave 141
    # and `compare | head` 0; with SIGPIPE ignored (Python's default) each write to the
    # closed pipe raises BrokenPipeError instead, handled here once for every command.
    previous = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # SIGTERM stops every command as Ctrl-C does (one line, exit 130), from the first option
    # parsed: run and sweep turned it into an interruption only once they were measuring, so
    # a SIGTERM during their checks, or any time in another command, killed it silently.
    previous_term = signal.signal(signal.SIGTERM, signals.interrupt)
    previous_int = signal.signal(signal.SIGINT, signals.interrupt)
    # An interruption that lands while SQLAlchemy's pool closes a connection is logged by the
    # pool with its traceback (through logging's last-resort handler); the command already
    # says "interrupted" in its one line, so the pool's log is not the user's to read.
    pool_log = logging.getLogger("sqlalchemy.pool")
    if not pool_log.handlers:
        pool_log.addHandler(logging.NullHandler())
    with contextlib.suppress(OSError):
        _STARTED_ON_A_PIPE[0] = stat.S_ISFIFO(os.fstat(1).st_mode)
    try:
        code = app(args=run_cmd.exits_alone_is_counts(sys.argv[1:]), standalone_mode=False)
        if code == 130:
            # typer turns a KeyboardInterrupt (Ctrl-C, or SIGTERM made one) inside a command
            # into a returned 130 when not in standalone mode: still an interruption.
            _err.print("vmtax: error: interrupted", markup=False)
            sys.exit(130)
        sys.exit(0)
    except VmtaxError as exc:
        if _reader_went_away():  # e.g. export's "cannot write -: Broken pipe"
            _reader_gone()
            sys.exit(0)
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
    except (ImportError, SystemError):
        # A Ctrl-C that lands while a C extension initialises (scipy's, on a first import)
        # comes out as "ImportError: initialization failed", its KeyboardInterrupt lost.
        if not signals.INTERRUPTED[0]:
            raise
        _err.print("vmtax: error: interrupted", markup=False)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _reader_gone()
        sys.exit(0)
    except SystemExit as exc:
        # click turns a broken pipe inside a command into exit 1 on its own.
        if exc.code not in (0, None) and _reader_went_away():
            _reader_gone()
            sys.exit(0)
        raise
    finally:
        _flush_quietly()
        signal.signal(signal.SIGPIPE, previous)
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


def _reader_went_away() -> bool:
    """stdout is a pipe whose reading end is closed (poll reports an error on it), or was one
    and now points at /dev/null: rich's Console does that on a broken pipe, then exits 1.

    File descriptor 1, not sys.stdout: click may have swapped the latter for a wrapper."""
    try:
        st = os.fstat(1)
        if not stat.S_ISFIFO(st.st_mode):
            null = os.stat(os.devnull)
            return _STARTED_ON_A_PIPE[0] and (st.st_dev, st.st_ino) == (null.st_dev, null.st_ino)
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except OSError:
        return False


#: Whether fd 1 was a pipe when main() started (set there).
_STARTED_ON_A_PIPE = [False]


def _reader_gone() -> None:
    # Point stdout at /dev/null so the interpreter's final flush does not fail again.
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _flush_quietly() -> None:
    # A reader that went away early must not turn into a BrokenPipeError at interpreter exit.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
