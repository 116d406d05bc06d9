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
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from vmtax.cli import signals
from vmtax.errors import VmtaxError
from vmtax.version import __version__

if TYPE_CHECKING:
    from typer import _click as click

#: Every command of ``vmtax``: its name, the module (of this package) that registers it, and
#: its line in ``vmtax --help``, in the order of ``--help``. ``vmtax --help`` reads this table
#: instead of importing every command's module, and a command's module is loaded only when
#: that command runs (or shows its own help), so each command loads only what it uses.
#: A new command adds its line here; tests/test_startup.py holds the table to the modules.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run_cmd", "Run a suite of probes, store every run, print the study-A table."),
    "doctor": ("doctor_cmd", "Check what vmtax can do here, and end with one install line."),
    "env": ("env_cmd", "What the agent detects here: hypervisor, nesting, CPU, memory."),
    "probes": ("env_cmd", "List the probes the agent offers and the mechanism of each."),
    "import": ("import_cmd", "Import saved vmtax-probe streams as a new experiment."),
    "compare": (
        "compare_cmd",
        "Compare with a baseline: overhead, 95% CI, verdict; a CI gate.",
    ),
    "history": ("history_cmd", "The tax across experiments: steps and what changed there."),
    "artifacts": ("artifacts_cmd", "Find timing artifacts in raw samples, with their evidence."),
    "exits": ("exits_cmd", "Exit profiles by reason: count, handling time, exits per op."),
    "explain": ("explain_cmd", "How much of a level's overhead its exits explain, by exit group."),
    "model": (
        "model_cmd",
        "Predict deeper nesting from two levels, with and without DVH.",
    ),
    "sweep": ("sweep_cmd", "Overcommitment sweeps: scale guests, vCPUs or memory; the knee."),
    "report": (
        "report_cmd",
        "Write a report: summary, study-A tables, figures, environment.",
    ),
    "refs": ("refs_cmd", "Published reference results and your own imported tables."),
    "image": ("image_cmd", "Build and list guest images for QEMU levels."),
    "calibrate": (
        "calibrate_cmd",
        "Noise profiles: boot and run variance here, to plan runs from.",
    ),
    "db": ("db_cmd", "The results store: location, schema version, counts."),
    "workloads": (
        "workloads_cmd",
        "List the workloads: what one value is, its unit, what it needs.",
    ),
    "results": ("results_cmd", "Browse and export stored experiments."),
}


def command_module(name: str) -> ModuleType:
    """The module that registers the command ``name`` (a key of ``COMMANDS``), loaded now."""
    return importlib.import_module(f"vmtax.cli.{COMMANDS[name][0]}")


def loaded_command(name: str) -> click.Command:
    """The command ``name`` as typer builds it, its module loaded: an app of its own that the
    module registers its commands on, of which this one is taken."""
    own = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    command_module(name).register(own)
    return typer.main.get_group(own).commands[name]


class _Listed(TyperCommand):
    """A command as ``vmtax --help`` lists it (its name and line); its module is loaded only
    when it runs: click makes its context through ``make_context``, handed to the real one."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, help=COMMANDS[name][1])

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        real = loaded_command(self.name or "")
        return real.make_context(info_name, args, parent=parent, **extra)


class _Commands(TyperGroup):
    """The top-level group: its commands come from ``COMMANDS``, not from registration."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _Listed(cmd_name) if cmd_name in COMMANDS else None


app = typer.Typer(
    name="vmtax",
    cls=_Commands,
    help="Measure the virtualization tax: what each layer of hypervisor costs a workload.\n\n"
    "Example: vmtax run && vmtax results list",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"vmtax {__version__}")
        raise typer.Exit


@app.callback()
def _top(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print vmtax's version and exit.",
        ),
    ] = False,
) -> None:
    """Measure the virtualization tax: what each layer of hypervisor costs a workload.

    Example: vmtax run && vmtax results list
    """


def full_app() -> typer.Typer:
    """An app with every command's module loaded and registered, for tools that walk every
    command and option (the option fuzz, the table's test); ``vmtax`` itself never builds it."""
    full = typer.Typer(name="vmtax", add_completion=False, pretty_exceptions_enable=False)
    full.callback()(_top)
    registered: set[str] = set()
    for name, (module, _) in COMMANDS.items():
        if module not in registered:  # a module may register several commands
            command_module(name).register(full)
            registered.add(module)
    return full


_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _exits_alone_is_counts(argv: list[str]) -> list[str]:
    # Only `vmtax run` has the option; no other command loads its module for it.
    if argv[:1] != ["run"]:
        return argv
    return list(command_module("run").exits_alone_is_counts(argv))


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
        with signals.interrupts_not_dropped():
            code = app(args=_exits_alone_is_counts(sys.argv[1:]), standalone_mode=False)
        if code == 130:
            # typer turns a KeyboardInterrupt (Ctrl-C, or SIGTERM made one) inside a command
            # into a returned 130 when not in standalone mode: still an interruption.
            _err.print("vmtax: error: interrupted", markup=False)
            sys.exit(130)
        # Outside standalone mode a command's typer.Exit(n) comes back as the return value:
        # `doctor` without a working agent exits 1, as it says.
        sys.exit(code if isinstance(code, int) else 0)
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
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _reader_gone()
        sys.exit(0)
    except Exception:
        # Python does not always let a KeyboardInterrupt out as itself: a Ctrl-C or SIGTERM
        # that lands while a C extension initialises (scipy's, on a first import) comes out as
        # "ImportError: initialization failed", and one inside a class's __set_name__
        # (matplotlib's, on import) as a RuntimeError. After a signal, any failure is the
        # interruption; without one it is a bug and keeps its traceback.
        if not signals.INTERRUPTED[0]:
            raise
        _err.print("vmtax: error: interrupted", markup=False)
        sys.exit(130)
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
